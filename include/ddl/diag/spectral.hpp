#pragma once
// ddl/diag/spectral.hpp: the spectrum of one frozen operator A = I - beta k k^T (docs/spec.md §1, §6), read
// through the DeltaOperator API, for one token of a DeltaResidual's last forward or any (k, beta).
// With a guarded k (rho = |k|^2 < 1) the k-eigenvalue is 1 - beta rho, never assumed to be 1 - beta.
#include <cmath>
#include <cstdio>
#include <string>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/delta_residual.hpp"
#include "ddl/ops/delta_operator.hpp"

namespace ddl {

struct SpectralSummary {
  Index d = 0;                 // size of A
  Index dv = 1;                // value channels the state determinant was taken over
  double beta = 0;             // the gate
  double rho = 0;              // k^T k
  double kEigenvalue = 0;      // 1 - beta rho (the other d - 1 eigenvalues are 1)
  double determinant = 0;      // det A = 1 - beta rho
  double determinantOnState = 0;  // det(I_dv (x) A) = (1 - beta rho)^dv
  double conditionNumber = 0;  // max(1, |lambda|) / min(1, |lambda|); +inf when singular
  bool singular = false;       // 1 - beta rho is zero up to rounding (no inverse)
  bool isOrthogonal = false;   // |1 - beta rho| = 1: beta = 0 or the reflection beta rho = 2
  DeltaRegime regime = DeltaRegime::Identity;  // band of the effective gate beta rho
};

// Summary of A via the DeltaOperator API; dv >= 1 value channels for determinantOnState.
template <class KType>
SpectralSummary spectralSummary(const DeltaOperator<KType>& A, Index dv = 1) {
  require(dv >= 1, "ddl::spectralSummary", "dv must be >= 1, got ", dv);
  SpectralSummary s;
  s.d = A.rows();
  s.dv = dv;
  s.beta = static_cast<double>(A.beta());
  s.rho = static_cast<double>(A.rho());
  s.kEigenvalue = static_cast<double>(A.kEigenvalue());
  s.determinant = static_cast<double>(A.determinant());
  s.determinantOnState = static_cast<double>(A.determinantOnState(dv));
  s.conditionNumber = static_cast<double>(A.conditionNumber());
  s.singular = A.isSingular();
  s.isOrthogonal = A.isOrthogonal();
  s.regime = A.regime();
  return s;
}

// Summary of the operator of one token of r's last forward: k = directions().col(token),
// beta = beta()(token); dv value channels for determinantOnState. Throws ValueError for the additive
// baseline or a token outside [0, N), Error when no forward ran.
template <class S>
SpectralSummary spectralSummary(const DeltaResidual<S>& r, Index token, Index dv) {
  const char* fn = "ddl::spectralSummary";
  if (r.options().residual == ResidualKind::Additive)
    throw ValueError(message(fn, "the residual is additive (X' = X + h): it has no Delta operator"));
  const RowX<S>& beta = r.beta();
  if (beta.size() == 0) throw Error(message(fn, "no forward has run on this residual yet; no operator to summarise"));
  require(token >= 0 && token < beta.cols(), fn, "token ", token, " is outside [0, ", beta.cols(), ") of the last forward");
  const VecX<S> k = r.directions().col(token);
  return spectralSummary(deltaOperator(k, beta(0, token)), dv);
}
// Same with the residual's own number of value channels.
template <class S>
SpectralSummary spectralSummary(const DeltaResidual<S>& r, Index token) {
  return spectralSummary(r, token, r.values().rows() > 0 ? r.values().rows() : 1);
}

// One line: "d=8 beta=1.0000 rho=1.0000 lambda_k=0.0000 det=... det_state(dv=1)=... cond=inf singular
// orthogonal=no regime=projection".
inline std::string formatSpectralSummary(const SpectralSummary& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "d=%lld beta=%.6g rho=%.6g lambda_k=%.6g det=%.6g det_state(dv=%lld)=%.6g cond=%.6g%s orthogonal=%s regime=%s",
                static_cast<long long>(s.d), s.beta, s.rho, s.kEigenvalue, s.determinant, static_cast<long long>(s.dv),
                s.determinantOnState, s.conditionNumber, s.singular ? " singular" : "", s.isOrthogonal ? "yes" : "no",
                regimeName(s.regime));
  return buf;
}

}  // namespace ddl
