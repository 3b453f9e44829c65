#pragma once
// ddl/testing/grad_check.hpp: central finite differences and the relative error ddl's tests use.
// Public so users can check their own layers the same way:
//   CHECK(ddl::testing::relErr(p.grad, ddl::testing::numericGrad(p.value, loss)) < 1e-6);
// Use double: a threshold of 1e-6 is meaningless in float.
#include <algorithm>
#include <cmath>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"

namespace ddl {
namespace testing {

// Central-difference gradient of the scalar loss() with respect to every entry of P.
// P is perturbed in place and restored exactly; loss must read P (by reference).
// P: (r, c) -> result: (r, c)
template <class Derived, class Loss>
MatX<typename Derived::Scalar> numericGrad(Eigen::MatrixBase<Derived>& P, Loss&& loss,
                                           typename Derived::Scalar h = 1e-6) {
  using S = typename Derived::Scalar;
  MatX<S> g(P.rows(), P.cols());
  for (Index j = 0; j < P.cols(); ++j) {
    for (Index i = 0; i < P.rows(); ++i) {
      const S saved = P(i, j);
      P(i, j) = saved + h;
      const S up = static_cast<S>(loss());
      P(i, j) = saved - h;
      const S down = static_cast<S>(loss());
      P(i, j) = saved;
      g(i, j) = (up - down) / (2 * h);
    }
  }
  return g;
}
// Overload for plain matrices passed as lvalues of their own type.
template <class S, class Loss>
MatX<S> numericGrad(MatX<S>& P, Loss&& loss, S h = 1e-6) {
  return numericGrad(static_cast<Eigen::MatrixBase<MatX<S>>&>(P), loss, h);
}

// max|a - n| / max(max|a|, max|n|, floor): one number per tensor, scale-free.
template <class DA, class DN>
double relErr(const Eigen::MatrixBase<DA>& analytic, const Eigen::MatrixBase<DN>& numeric,
              double floor = 1e-12) {
  checkShape("ddl::testing::relErr", "numeric gradient", numeric, analytic.rows(), analytic.cols());
  if (analytic.size() == 0) return 0.0;
  const double diff = static_cast<double>((analytic - numeric).cwiseAbs().maxCoeff());
  const double scale = std::max({static_cast<double>(analytic.cwiseAbs().maxCoeff()),
                                 static_cast<double>(numeric.cwiseAbs().maxCoeff()), floor});
  return diff / scale;
}

// Per-entry relative error: max_i |a_i - n_i| / max(|a_i|, |n_i|, floor). relErr divides by the
// tensor's largest entry, so an error confined to small entries hides; this one does not. The
// absolute floor keeps entries that are zero up to rounding from dominating: central differences in
// double (h = 1e-6) carry an absolute error near 1e-10 * |loss| per entry, so pick floor with
// 1e-10 * |loss| / floor below the tolerance (the default suits tolerance 1e-6 and |loss| <= 10).
template <class DA, class DN>
double entryRelErr(const Eigen::MatrixBase<DA>& analytic, const Eigen::MatrixBase<DN>& numeric,
                   double floor = 1e-3) {
  checkShape("ddl::testing::entryRelErr", "numeric gradient", numeric, analytic.rows(), analytic.cols());
  double worst = 0.0;
  for (Index j = 0; j < analytic.cols(); ++j) {
    for (Index i = 0; i < analytic.rows(); ++i) {
      const double a = static_cast<double>(analytic(i, j)), n = static_cast<double>(numeric(i, j));
      worst = std::max(worst, std::abs(a - n) / std::max({std::abs(a), std::abs(n), floor}));
    }
  }
  return worst;
}

}  // namespace testing
}  // namespace ddl
