#pragma once
// ddl/diag/r_squared.hpp: the coefficient of determination of a regression, pooled over its outputs:
//   R² = 1 − Σ_ij (y_ij − ŷ_ij)² / Σ_ij (y_ij − ȳ_i)²,   ȳ_i = the mean of output i over the samples,
// so 1 is a perfect fit and 0 is what predicting each output's mean achieves (scikit-learn's
// "variance_weighted" R²). Accumulated in double. The Householder task (data/householder_task.hpp)
// reports it (docs/claims.md).
#include <cmath>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

// prediction, target: (outputs, N), N >= 2. ValueError on a non-finite value or targets without
// variance (every output constant: R² is undefined).
template <class S>
double rSquared(const MatX<S>& prediction, const MatX<S>& target) {
  const char* fn = "ddl::rSquared";
  checkShape(fn, "prediction", prediction, target.rows(), target.cols());
  require(target.cols() >= 2, fn, "needs at least 2 samples, got ", target.cols());
  require(prediction.allFinite() && target.allFinite(), fn, "prediction or target holds a non-finite value");
  const MatX<double> y = target.template cast<double>();
  const VecX<double> mean = y.rowwise().mean();
  const double residual = (y - prediction.template cast<double>()).squaredNorm();
  const double total = (y.colwise() - mean).squaredNorm();
  require(total > 0, fn, "the targets have no variance (every output is constant over the ", y.cols(),
          " samples): R² is undefined");
  return 1 - residual / total;
}

}  // namespace ddl
