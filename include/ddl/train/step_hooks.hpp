#pragma once
// ddl/train/step_hooks.hpp: code the training loop (train/training_loop.hpp) runs inside every step,
// after backward and before clipping and the optimizer update.
//
//   loop.addStepHook([&](ddl::StepContext<float>& c) { allreduce(c.params); });
// Hooks run in the order they were added, then the loop's NaN/Inf guard (options.checkFinite), so the
// guard checks the gradient that will be applied. A hook may read and change the gradients
// (c.params: p.grad of every parameter) and the batch's stats (e.g. sum them over ranks); it must not
// change parameter values. A hook vetoes the step by throwing: the update, the step count and the
// position are then not advanced, run() ends with that exception and writes nothing, so the last
// checkpoint stays the last good state. A hook called every step should not allocate (the step
// allocates nothing in steady state; tests/test_alloc.cpp).
#include <cstdint>
#include <functional>

#include "ddl/core/param_list.hpp"
#include "ddl/core/types.hpp"
#include "ddl/train/task_step.hpp"

namespace ddl {

template <class S>
struct StepContext {
  std::int64_t step;           // 1-based number of the step being taken
  int epoch;                   // 0-based epoch
  Index batch;                 // 0-based batch in the epoch
  double lr;                   // learning rate of this step
  StepStats& stats;            // the batch's loss, correct and count (gradNorm is not known yet)
  const ParamList<S>& params;  // the model's parameters: gradients complete, values not yet updated
};

template <class S>
using StepHook = std::function<void(StepContext<S>&)>;

}  // namespace ddl
