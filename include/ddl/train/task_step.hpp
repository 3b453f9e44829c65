#pragma once
// ddl/train/task_step.hpp: one optimizer step of any task, the scratch it reuses and what it measured.
//
//   ddl::StepBuffers<float> buf;                      // outputs and their gradient, reused every step
//   ddl::StepStats s = ddl::taskStep(model, task, optimizer, X, target, buf, {/*clipNorm=*/1.0});
//
// taskStep = forward, the task's loss and output gradient (train/task.hpp), zeroGrad, backward,
// optional global-norm clipping, optimizer step. It names no model, layer or loss: the model is
// anything with forward(X, out), backward(dOut) and visitParams; the optimizer anything with
// step(params) for a ParamList. train/train_step.hpp is this step with a classification loss layer.
#include <functional>
#include <type_traits>
#include <utility>

#include "ddl/core/bf16_weights.hpp"
#include "ddl/core/detects.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param_list.hpp"
#include "ddl/core/precision.hpp"
#include "ddl/core/types.hpp"
#include "ddl/train/grad_clip.hpp"

namespace ddl {

namespace detail {
// Whether Model has forwardInference(X, logits), the forward that caches nothing (evaluate prefers it).
template <class Model, class S>
using ForwardInferenceProbe = decltype(std::declval<Model&>().forwardInference(
    std::declval<const Eigen::Ref<const MatX<S>>&>(), std::declval<MatX<S>&>()));
template <class Model, class S>
using HasForwardInference = Detects<ForwardInferenceProbe, Model, S>;
}  // namespace detail

struct TrainStepOptions {
  double clipNorm = 0.0;  // global gradient-norm clipping threshold; 0 = no clipping
};

// Caller-owned scratch of a training step: kept between steps so that steps do not allocate.
// params follows the model passed to trainStep: it is rebuilt (once, allocating) when the buffers
// meet another model object or a parameter of the model got new storage (ParamList::refresh).
template <class S>
struct StepBuffers {
  MatX<S> logits;       // (classes, B) of the last forward, then their softmax and gradient (backward reads no logits)
  ParamList<S> params;  // the model's parameter walk, taken once
  Bf16Weights bf16;     // under the bf16 policy: the weights' bf16 copies of this step (core/bf16_weights.hpp)
};

// What one step measured, on the batch before the parameter update.
struct StepStats {
  double loss = 0.0;      // mean loss of the batch
  Index correct = 0;      // samples whose largest logit is the label
  Index count = 0;        // batch size B
  double gradNorm = 0.0;  // global gradient norm before clipping (computed only when clipping)
};

// One optimizer step of any task (train/task.hpp): forward, the task's loss and output gradient,
// zeroGrad, backward, beforeUpdate(StepStats&), optional global-norm clipping, optimizer step.
// beforeUpdate runs with the gradients complete and nothing updated: it may read or change the
// gradients (through buf.params) and the stats; if it throws, the parameters and the optimizer are
// unchanged. Input is whatever the model's forward takes (a matrix of columns for the nets here).
// beforeBackward(StepStats&) runs after zeroGrad, just before backward (data-parallel overlap sums the
// statistics there, train/data_parallel.hpp); the gradients are zero then.
template <class Model, class Task, class Opt, class Input, class BeforeBackward, class BeforeUpdate>
StepStats taskStep(Model& model, Task& task, Opt& optimizer, const Input& X, const typename Task::Target& target,
                   StepBuffers<typename Task::Scalar>& buf, const TrainStepOptions& options,
                   BeforeBackward&& beforeBackward, BeforeUpdate&& beforeUpdate) {
  require(options.clipNorm >= 0.0, "ddl::trainStep", "clipNorm must be >= 0 (0 = off), got ", options.clipNorm);
  // Under the bf16 policy the weights are converted once here, after the last update; the copies are read
  // by forward and backward only, the scope ends before the update.
  const Bf16Weights* stepWeights = nullptr;
  if constexpr (std::is_same<typename Task::Scalar, float>::value) {
    if (productPrecision() == Precision::BF16) {
      buf.params.refresh(model);
      buf.bf16.refresh(buf.params);
      stepWeights = &buf.bf16;
    }
  }
  Bf16WeightScope bf16Scope(stepWeights);
  model.forward(X, buf.logits);
  // The loss's softmax, then the gradient, take the logits' place: one (classes, B) buffer, 196 MiB for
  // the 124M language model (docs/results.md).
  StepStats s = task.lossAndGradient(buf.logits, target, buf.logits);
  buf.params.refresh(model);
  zeroGrad(buf.params);
  beforeBackward(s);
  model.backward(buf.logits);
  bf16Scope.end();
  beforeUpdate(s);
  if (options.clipNorm > 0.0) s.gradNorm = clipGradNorm(buf.params, options.clipNorm);
  optimizer.step(buf.params);
  return s;
}

// The same step with nothing before backward.
template <class Model, class Task, class Opt, class Input, class BeforeUpdate>
StepStats taskStep(Model& model, Task& task, Opt& optimizer, const Input& X, const typename Task::Target& target,
                   StepBuffers<typename Task::Scalar>& buf, const TrainStepOptions& options,
                   BeforeUpdate&& beforeUpdate) {
  return taskStep(model, task, optimizer, X, target, buf, options, [](StepStats&) {},
                  std::forward<BeforeUpdate>(beforeUpdate));
}

// The same step with nothing between backward and the update.
template <class Model, class Task, class Opt, class Input>
StepStats taskStep(Model& model, Task& task, Opt& optimizer, const Input& X, const typename Task::Target& target,
                   StepBuffers<typename Task::Scalar>& buf, const TrainStepOptions& options = {}) {
  return taskStep(model, task, optimizer, X, target, buf, options, [](StepStats&) {});
}

struct EvalResult {
  double loss = 0.0;      // mean loss over the samples evaluated
  double accuracy = 0.0;  // fraction correct in [0, 1]
  Index count = 0;        // samples (positions) evaluated
  bool stopped = false;   // an EvalStop ended it early: loss and accuracy cover the first count samples
};

// Asked after every evaluation batch: true ends the evaluation there (EvalResult::stopped), so a long
// evaluation answers Ctrl-C within one batch. Empty = never.
struct EvalStop {
  std::function<bool()> requested;
  bool now() const { return requested && requested(); }
};

}  // namespace ddl
