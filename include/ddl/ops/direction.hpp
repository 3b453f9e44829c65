#pragma once
// ddl/ops/direction.hpp: normalization of the raw direction k~ into k (docs/spec.md §2), with backward.
//   SqrtEps (default): k = k~ / sqrt(|k~|^2 + eps^2)   smooth everywhere; Jacobian (I - k k^T) / n
//   AddEps  (v1):      k = k~ / (|k~| + eps)           kink at k~ = 0, where the subgradient I/eps is used
// With eps > 0 the result is not exactly unit: rho = |k|^2 < 1, and the operator's k-eigenvalue is
// 1 - beta*rho (docs/spec.md §1). The operator-form guard of v1, A = I - beta k~k~^T/(k~^T k~ + eps), equals
// SqrtEps with eps_k^2 = eps, so it needs no kernel of its own.
#include <cmath>
#include <string>

#include <Eigen/Core>

#include "ddl/core/config.hpp"
#include "ddl/core/enum_names.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

enum class DirectionNorm { SqrtEps, AddEps };

inline constexpr EnumName<DirectionNorm> kDirectionNormNames[] = {{DirectionNorm::SqrtEps, "sqrt_eps"},
                                                                   {DirectionNorm::AddEps, "add_eps"}};
inline const char* toString(DirectionNorm kind) { return nameOf(kDirectionNormNames, kind); }
inline DirectionNorm parseDirectionNorm(const std::string& name) {
  return parseEnumName(kDirectionNormNames, name, "ddl::parseDirectionNorm", "normalization");
}

// Kt: (d, N) raw directions -> K: (d, N), Norm: (1, N) the cache for backward
// (SqrtEps: n = sqrt(|k~|^2 + eps^2); AddEps: |k~|). Throws MathError when a column would divide by 0
// or holds a NaN/Inf (naming the token and the first bad entry). A finite column whose squared norm
// overflows (float |k~| above ~1.8e19) is measured with a scaled norm, so k stays a unit direction.
template <class DK>
void normalizeDirections(const Eigen::MatrixBase<DK>& Kt, DirectionNorm kind, typename DK::Scalar eps,
                         MatX<typename DK::Scalar>& K, RowX<typename DK::Scalar>& Norm) {
  using S = typename DK::Scalar;
  const char* fn = "ddl::normalizeDirections";
  require(eps >= S(0) && std::isfinite(static_cast<double>(eps)), fn, "eps must be finite and >= 0, got ", eps);
  const Index d = Kt.rows(), N = Kt.cols();
  if (K.rows() != d || K.cols() != N) K.resize(d, N);
  if (Norm.cols() != N) Norm.resize(1, N);
  // Tokens are independent, so the common case runs over threads; a token that needs care (|k~|^2
  // not finite, or a zero denominator) sends the call to the serial loop below, which handles or
  // reports it and so names the same first bad token on any number of threads.
  bool careful = false;
  const bool par = d * N >= detail::kParallelMinWork;
  (void)par;
  DDL_OMP(parallel for schedule(static) reduction(|| : careful) if (par))
  for (Index n = 0; n < N; ++n) {
    const S sq = Kt.col(n).squaredNorm();
    const S norm = kind == DirectionNorm::SqrtEps ? std::sqrt(sq + eps * eps) : std::sqrt(sq);
    const S denom = kind == DirectionNorm::SqrtEps ? norm : norm + eps;
    if (!std::isfinite(static_cast<double>(sq)) || !(denom > S(0))) {
      careful = true;
      continue;
    }
    Norm(0, n) = norm;
    K.col(n) = Kt.col(n) / denom;
  }
  if (!careful) return;
  for (Index n = 0; n < N; ++n) {
    const S sq = Kt.col(n).squaredNorm();
    S denom;
    if (!std::isfinite(static_cast<double>(sq))) {
      for (Index i = 0; i < d; ++i)
        if (!std::isfinite(static_cast<double>(Kt(i, n))))
          throw MathError(message(fn, "direction of token ", n, " is not finite: entry ", i, " of ", d, " is ",
                                  Kt(i, n), " (the branch output that gives k~ is NaN/Inf)"));
      const S len = Kt.col(n).stableNorm();  // |k~|^2 overflowed, |k~| itself does not
      Norm(0, n) = kind == DirectionNorm::SqrtEps ? std::hypot(len, eps) : len;
      denom = kind == DirectionNorm::SqrtEps ? Norm(0, n) : len + eps;
    } else if (kind == DirectionNorm::SqrtEps) {
      Norm(0, n) = std::sqrt(sq + eps * eps);
      denom = Norm(0, n);
    } else {
      Norm(0, n) = std::sqrt(sq);
      denom = Norm(0, n) + eps;
    }
    if (!(denom > S(0)))
      throw MathError(message(fn, "direction of token ", n, " has norm 0 and eps = 0 (", toString(kind),
                              "); use eps > 0"));
    K.col(n) = Kt.col(n) / denom;
  }
}

// Backward of normalizeDirections. K and Norm are its outputs; dK = dL/dK.
//   SqrtEps: dKt = (dK - k (k . dK)) / n
//   AddEps:  dKt = dK / (|k~| + eps) - k (k . dK) / |k~|     (second term 0 at k~ = 0)
// K, dK: (d, N), Norm: (1, N) -> dKt: (d, N) overwritten (may alias dK).
template <class DK, class DN, class DG>
void normalizeDirectionsBackward(const Eigen::MatrixBase<DK>& K, const Eigen::MatrixBase<DN>& Norm,
                                 DirectionNorm kind, typename DK::Scalar eps, const Eigen::MatrixBase<DG>& dK,
                                 MatX<typename DK::Scalar>& dKt) {
  using S = typename DK::Scalar;
  const char* fn = "ddl::normalizeDirectionsBackward";
  const Index d = K.rows(), N = K.cols();
  checkShape(fn, "Norm", Norm, 1, N);
  checkShape(fn, "dK", dK, d, N);
  if (dKt.rows() != d || dKt.cols() != N) dKt.resize(d, N);
  const bool par = d * N >= detail::kParallelMinWork;
  (void)par;
  DDL_OMP(parallel for schedule(static) if (par))
  for (Index n = 0; n < N; ++n) {
    const S kdk = K.col(n).dot(dK.col(n));
    if (kind == DirectionNorm::SqrtEps) {
      dKt.col(n) = (dK.col(n) - kdk * K.col(n)) / Norm(0, n);
    } else {
      const S len = Norm(0, n);
      if (len > S(0))
        dKt.col(n) = dK.col(n) / (len + eps) - (kdk / len) * K.col(n);
      else
        dKt.col(n) = dK.col(n) / eps;
    }
  }
}

}  // namespace ddl
