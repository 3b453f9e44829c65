#pragma once
// ddl/data/householder_task.hpp: the Householder chain, the regression task of the claim test
// (docs/claims.md): a vector x in R^m is reflected across L hyperplanes given in the input, and the
// target is y = H_L ... H_1 x with H_t = I - 2 u_t u_tᵀ (the Delta Operator at β = 2, docs/spec.md §1).
// x ~ N(0, I_m) is the prefix, the unit normal u_t (uniform on the sphere) is step t's input; the loss is
// the squared error and the score R² (diag/r_squared.hpp). The targets are computed in double from the
// drawn values and rounded once to S, so ‖y‖ = ‖x‖ up to that rounding. No two samples of the three
// splits share an input column (a continuous draw repeats with probability 0; a repeat is drawn again).
//   auto h = ddl::makeHouseholderTask<float>({4, 6}, {20000, 2000, 2000}, seed);
//   h.train.inputs (m + L m, 20000), h.train.targets (m, 20000), h.train.stepTargets (L m, 20000)
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/sequence_sampling.hpp"

namespace ddl {

// m >= 1 dimensions, L >= 1 reflections.
struct HouseholderTask {
  Index dim = 4;
  Index steps = 6;
};

// Regression samples: inputs (features, N), targets (outputs, N), one column per sample; stepTargets
// (L outputs, N): rows [t m, (t + 1) m) the target after steps 1..t+1 (the last block is targets).
template <class S>
struct RegressionSet {
  MatX<S> inputs;
  MatX<S> targets;
  MatX<S> stepTargets;
  Index size() const { return inputs.cols(); }
};

template <class S>
struct RegressionTask {
  StepLayout layout;  // prefix x (width m), step t's u_t (width m)
  RegressionSet<S> train;
  RegressionSet<S> validation;
  RegressionSet<S> test;
};

// The Householder chain (HouseholderTask): inputs (m + L m, size), targets (m, size), stepTargets (L m, size).
template <class S = float>
RegressionTask<S> makeHouseholderTask(const HouseholderTask& task, const SplitSizes& sizes, std::uint64_t seed) {
  const char* fn = "ddl::makeHouseholderTask";
  require(task.dim >= 1, fn, "dim (m) must be >= 1, got ", task.dim);
  require(task.steps >= 1, fn, "steps must be >= 1, got ", task.steps);
  require(sizes.train >= 0 && sizes.validation >= 0 && sizes.test >= 0, fn, "split sizes must be >= 0, got train ",
          sizes.train, ", validation ", sizes.validation, ", test ", sizes.test);
  const Index m = task.dim;
  RegressionTask<S> out;
  out.layout = StepLayout{m, task.steps, m};
  const Index features = out.layout.features();
  Rng rng(seed);
  std::set<std::vector<S>> seen;
  VecX<double> input(features), y(m);
  std::vector<S> stored(static_cast<std::size_t>(features));
  auto fill = [&](RegressionSet<S>& set, Index n) {
    set.inputs.resize(features, n);
    set.targets.resize(m, n);
    set.stepTargets.resize(m * task.steps, n);
    for (Index j = 0; j < n;) {
      for (Index i = 0; i < m; ++i) input(i) = rng.normal();
      for (Index t = 0; t < task.steps; ++t) {
        auto u = input.segment(out.layout.stepOffset(t), m);
        do {
          for (Index i = 0; i < m; ++i) u(i) = rng.normal();
        } while (u.norm() < 1e-12);
        u /= u.norm();
      }
      for (Index i = 0; i < features; ++i) stored[static_cast<std::size_t>(i)] = static_cast<S>(input(i));
      if (!seen.insert(stored).second) continue;
      y = input.head(m);
      for (Index t = 0; t < task.steps; ++t) {
        const auto u = input.segment(out.layout.stepOffset(t), m);
        y -= 2 * u.dot(y) * u;  // H_t y, the reflection across u_t's hyperplane
        set.stepTargets.col(j).segment(t * m, m) = y.cast<S>();
      }
      set.inputs.col(j) = input.cast<S>();
      set.targets.col(j) = y.cast<S>();
      ++j;
    }
  };
  fill(out.train, sizes.train);
  fill(out.validation, sizes.validation);
  fill(out.test, sizes.test);
  return out;
}

}  // namespace ddl
