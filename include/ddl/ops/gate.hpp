#pragma once
// ddl/ops/gate.hpp: the gate beta = betaMax sigma(z) in (0, betaMax), betaMax = 2 by default, and its two logit
// heads (docs/spec.md §2), with backward; nn/layers/beta_gate.hpp makes them one module.
//   linear:    z = w c + b                 w: (1, d), b: (1, 1)
//   two-layer: z = w2 tanh(W1 c) + b2      W1: (h, d), w2: (1, h), b2: (1, 1); no bias inside
// d beta / d z = betaMax sigma(z) sigma(-z), computed from z (not from the rounded beta, whose 2 - beta
// cancels: in float beta (2 - beta) / 2 is 0.9 % off at z = 12 and exactly 0 beyond z ~ 17).
// Parameter gradients accumulate (+=), input gradients are overwritten, as everywhere in ddl.
// Per-token loops run over OpenMP threads above detail::kParallelMinWork; sums over tokens do not, and
// the bias sums accumulate in double (core/reduce.hpp).
#include <algorithm>
#include <cmath>

#include <Eigen/Core>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/reduce.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

// sigma(z) without overflow: exp is only taken of -|z|.
template <class S>
S stableSigmoid(S z) {
  if (z >= S(0)) return S(1) / (S(1) + std::exp(-z));
  const S e = std::exp(z);
  return e / (S(1) + e);
}

// Gate bias from the initial gate value: b = logit(clamp(beta0, 0, betaMax) / betaMax), with the probability
// clamped to [1e-6, 1 - 1e-6] so beta0 = 0 or betaMax stays finite. beta0 = 0 gives a nearly dead gate
// (d beta/d z ~ 1e-6 betaMax) and beta0 = betaMax a nearly frozen gate: allowed, but they barely train.
inline double gateBiasFromBeta0(double beta0, double betaMax = 2.0) {
  require(!std::isnan(beta0), "ddl::gateBiasFromBeta0", "beta0 is NaN");
  require(betaMax > 0, "ddl::gateBiasFromBeta0", "betaMax must be > 0, got ", betaMax);
  const double p = std::clamp(std::clamp(beta0, 0.0, betaMax) / betaMax, 1e-6, 1.0 - 1e-6);
  return std::log(p / (1.0 - p));
}

// Z: (1, N) logits -> Beta: (1, N), beta = betaMax sigma(z)
template <class DZ>
void gateFromLogits(const Eigen::MatrixBase<DZ>& Z, RowX<typename DZ::Scalar>& Beta,
                    typename DZ::Scalar betaMax = 2) {
  checkShape("ddl::gateFromLogits", "Z", Z, 1, -1);
  if (Beta.cols() != Z.cols()) Beta.resize(1, Z.cols());
  const Index N = Z.cols();
  DDL_OMP(parallel for schedule(static) if (N >= detail::kParallelMinWork))
  for (Index n = 0; n < N; ++n) Beta(0, n) = betaMax * stableSigmoid(Z(0, n));
}

// d beta / d z = betaMax sigma(z) sigma(-z) = betaMax e / (1 + e)^2 with e = exp(-|z|): no cancellation, no
// overflow.
template <class S>
S gateSlope(S z, S betaMax = S(2)) {
  const S e = std::exp(-std::abs(z));
  const S onePlus = S(1) + e;
  return betaMax * e / (onePlus * onePlus);
}

// Z (the forward's logits), dBeta: (1, N) -> dZ: (1, N) overwritten, dZ = dBeta * betaMax sigma(z) sigma(-z)
template <class DZ, class DG>
void gateFromLogitsBackward(const Eigen::MatrixBase<DZ>& Z, const Eigen::MatrixBase<DG>& dBeta,
                            RowX<typename DZ::Scalar>& dZ, typename DZ::Scalar betaMax = 2) {
  checkShape("ddl::gateFromLogitsBackward", "Z", Z, 1, -1);
  checkShape("ddl::gateFromLogitsBackward", "dBeta", dBeta, 1, Z.cols());
  if (dZ.cols() != Z.cols()) dZ.resize(1, Z.cols());
  const Index N = Z.cols();
  DDL_OMP(parallel for schedule(static) if (N >= detail::kParallelMinWork))
  for (Index n = 0; n < N; ++n) dZ(0, n) = dBeta(0, n) * gateSlope(Z(0, n), betaMax);
}

// Linear logit head. w: (1, d), b: (1, 1), C: (d, N) -> Z: (1, N)
template <class DW, class DC>
void linearGateLogits(const Eigen::MatrixBase<DW>& w, typename DW::Scalar b, const Eigen::MatrixBase<DC>& C,
                      RowX<typename DW::Scalar>& Z) {
  checkShape("ddl::linearGateLogits", "C", C, w.cols(), -1);
  checkShape("ddl::linearGateLogits", "w", w, 1, C.rows());
  if (Z.cols() != C.cols()) Z.resize(1, C.cols());
  // One GEMV on one thread: splitting it would regroup its dot products and change their bits
  // with the thread count.
  Z.noalias() = w * C;
  Z.array() += b;
}

// Backward of linearGateLogits. dZ: (1, N) -> dC: (d, N) overwritten; dw: (1, d) +=, db: (1, 1) +=
template <class DW, class DC, class DZ>
void linearGateLogitsBackward(const Eigen::MatrixBase<DW>& w, const Eigen::MatrixBase<DC>& C,
                              const Eigen::MatrixBase<DZ>& dZ, MatX<typename DW::Scalar>& dC,
                              MatX<typename DW::Scalar>& dw, MatX<typename DW::Scalar>& db) {
  const char* fn = "ddl::linearGateLogitsBackward";
  checkShape(fn, "dZ", dZ, 1, C.cols());
  checkShape(fn, "dw", dw, 1, C.rows());
  checkShape(fn, "db", db, 1, 1);
  if (dC.rows() != C.rows() || dC.cols() != C.cols()) dC.resize(C.rows(), C.cols());
  const Index N = C.cols();
  DDL_OMP(parallel for schedule(static) if (C.size() >= detail::kParallelMinWork))
  for (Index n = 0; n < N; ++n) dC.col(n) = dZ(0, n) * w.row(0).transpose();
  dw.noalias() += dZ * C.transpose();  // a sum over tokens: one thread, the same bits on any count
  db(0, 0) += static_cast<typename DW::Scalar>(sumWide(dZ));  // in double: the terms cancel
}

// Two-layer logit head. W1: (h, d), w2: (1, h), b2 scalar, C: (d, N) -> Z: (1, N), Hid: (h, N) = tanh(W1 C)
template <class DW1, class DW2, class DC>
void twoLayerGateLogits(const Eigen::MatrixBase<DW1>& W1, const Eigen::MatrixBase<DW2>& w2, typename DW1::Scalar b2,
                        const Eigen::MatrixBase<DC>& C, MatX<typename DW1::Scalar>& Hid,
                        RowX<typename DW1::Scalar>& Z) {
  const char* fn = "ddl::twoLayerGateLogits";
  checkShape(fn, "C", C, W1.cols(), -1);
  checkShape(fn, "w2", w2, 1, W1.rows());
  if (Hid.rows() != W1.rows() || Hid.cols() != C.cols()) Hid.resize(W1.rows(), C.cols());
  if (Z.cols() != C.cols()) Z.resize(1, C.cols());
  Hid.noalias() = W1 * C;
  Hid = Hid.array().tanh().matrix();
  Z.noalias() = w2 * Hid;
  Z.array() += b2;
}

// Backward of twoLayerGateLogits, with Hid from the forward and a caller-owned workspace dPre: (h, N).
// dZ: (1, N) -> dC: (d, N) overwritten; dW1 (h, d), dw2 (1, h), db2 (1, 1) accumulate.
template <class DW1, class DW2, class DC, class DH, class DZ>
void twoLayerGateLogitsBackward(const Eigen::MatrixBase<DW1>& W1, const Eigen::MatrixBase<DW2>& w2,
                                const Eigen::MatrixBase<DC>& C, const Eigen::MatrixBase<DH>& Hid,
                                const Eigen::MatrixBase<DZ>& dZ, MatX<typename DW1::Scalar>& dC,
                                MatX<typename DW1::Scalar>& dW1, MatX<typename DW1::Scalar>& dw2,
                                MatX<typename DW1::Scalar>& db2, MatX<typename DW1::Scalar>& dPre) {
  const char* fn = "ddl::twoLayerGateLogitsBackward";
  checkShape(fn, "dZ", dZ, 1, C.cols());
  checkShape(fn, "Hid", Hid, W1.rows(), C.cols());
  checkShape(fn, "dW1", dW1, W1.rows(), W1.cols());
  checkShape(fn, "dw2", dw2, 1, W1.rows());
  checkShape(fn, "db2", db2, 1, 1);
  if (dPre.rows() != Hid.rows() || dPre.cols() != Hid.cols()) dPre.resize(Hid.rows(), Hid.cols());
  if (dC.rows() != C.rows() || dC.cols() != C.cols()) dC.resize(C.rows(), C.cols());
  dw2.noalias() += dZ * Hid.transpose();
  db2(0, 0) += static_cast<typename DW1::Scalar>(sumWide(dZ));
  dPre.noalias() = w2.transpose() * dZ;
  dPre.array() *= 1 - Hid.array().square();
  dW1.noalias() += dPre * C.transpose();
  dC.noalias() = W1.transpose() * dPre;
}

}  // namespace ddl
