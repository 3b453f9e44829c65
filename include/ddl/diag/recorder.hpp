#pragma once
// ddl/diag/recorder.hpp: the audit recorder (docs/spec.md §6), one row per gated sublayer per epoch
// (diag/gated_sublayers.hpp: a block of DeltaNet / ConvDeltaNet, an attention or SwiGLU sublayer of DeltaLM).
//
//   ddl::AuditRecorder rec;                       // detached by construction: the net knows nothing of it
//   for (batch...) { net.forward(X, logits); rec.observe(net); ... }   // after any forward
//   rec.endEpoch(epoch, net);                     // rows of the epoch, then the sums restart
//   ddl::writeAuditCsv(out + "/audit.csv", rec.rows());    // diag/audit_file.hpp, atomic
//
// A row holds the block's GateStats over every observed forward of the epoch (diag/gate_audit.hpp:
// beta mean/min/max/histogram/saturation, the regime counts of the operator's taxonomy, |k~| against
// eps_k, rho, lambda = 1 - beta rho, the measured |e_post|/|e_pre| against |1 - beta rho|, |k^T X| and
// |v|) and a SpectralSample of the block frozen at the end of the epoch: the operators of a few sample
// tokens of the net's last forward, predicted by the DeltaOperator API (diag/spectral.hpp) and measured.
//
// How it attaches (docs/decisions.md, "The audit recorder reads caches"): the recorder only reads what
// a forward already keeps (each residual's k, beta, v, discrepancy and the net's block inputs and
// outputs). The net holds no pointer to it and runs no extra code, so with no recorder the outputs and
// the allocations are exactly those of a net that never heard of one (tests/test_recorder_alloc.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <Eigen/LU>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/diag/net_gate_audit.hpp"
#include "ddl/diag/spectral.hpp"
#include "ddl/nn/blocks/delta_residual.hpp"
#include "ddl/ops/delta_write.hpp"

namespace ddl {

struct RecorderOptions {
  Index bins = 20;           // beta histogram bins over [0, 2]
  Index spectralTokens = 4;  // sample tokens per block for the frozen-operator spectrum (0: none)
};

// The frozen operators A = I - beta k k^T of a few sample tokens of one block (Delta kind only;
// tokens = 0 otherwise). "Predicted" comes from the DeltaOperator API (eigenvalue 1 with multiplicity
// d - 1 and lambda = 1 - beta rho along k); "measured" from the state Jacobian J = dX'/dX of the
// block's write with k, beta and v frozen, built column by column by the training kernel deltaWrite
// (X = I, v = 0, so X' = A exactly as the kernel computes it) and decomposed in double. Each field is
// the maximum over the sample tokens unless it says otherwise.
struct SpectralSample {
  static constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  Index tokens = 0;
  double lambdaMin = nan, lambdaMax = nan;  // predicted k-eigenvalue 1 - beta rho: min and max
  double eigenvalueError = nan;    // max_i |measured_i - predicted_i| over the sorted spectra
  double asymmetry = nan;          // max |J - J^T| (A is symmetric)
  double normPredicted = nan;      // |A|_2 = max(1, |lambda|) (|lambda| for d = 1)
  double normMeasured = nan;       // |J|_2 (largest |eigenvalue| of the symmetric part)
  double conditionPredicted = nan; // DeltaOperator::conditionNumber (inf when singular)
  double conditionMeasured = nan;  // max |mu| / min |mu| over J's eigenvalues mu
  double determinantError = nan;   // |det J - (1 - beta rho)|
  double orthogonalityPredicted = nan;  // |A^T A - I|_2 = |lambda^2 - 1|
  double orthogonalityMeasured = nan;   // |J^T J - I|_2
  Index singular = 0;    // tokens the operator calls singular (lambda ~ 0: no inverse)
  Index orthogonal = 0;  // tokens the operator calls orthogonal (|lambda| = 1)
};

namespace detail {
// The state Jacobian of one token's write with k, beta frozen and v = 0, computed by deltaWrite on the
// d basis vectors: J = I - beta k k^T as the training kernel produces it, in double.
template <class S>
Eigen::MatrixXd frozenWriteJacobian(const VecX<S>& k, S beta) {
  const Index d = k.size();
  const MatX<S> K = k.replicate(1, d);
  const RowX<S> B = RowX<S>::Constant(1, d, beta);
  const MatX<S> V = MatX<S>::Zero(1, d);
  const MatX<S> X = MatX<S>::Identity(d, d);
  MatX<S> Y, D;
  deltaWrite(K, B, V, X, Y, D);
  return Y.template cast<double>();
}
}  // namespace detail

// Spectrum of up to `tokens` evenly spaced tokens (t_i = i N / count) of r's last forward. Throws
// Error when no forward ran; empty (tokens = 0) for the write-only control, ValueError for additive.
template <class S>
SpectralSample sampleSpectrum(const DeltaResidual<S>& r, Index tokens) {
  const char* fn = "ddl::sampleSpectrum";
  require(tokens >= 0, fn, "tokens must be >= 0, got ", tokens);
  if (r.options().residual == ResidualKind::Additive)
    throw ValueError(message(fn, "the residual is additive (X' = X + h): it has no Delta operator"));
  const Index N = r.beta().cols();
  if (r.beta().size() == 0) throw Error(message(fn, "no forward has run on this residual yet; no operator to sample"));
  SpectralSample out;
  if (r.options().residual != ResidualKind::Delta) return out;
  const Index count = std::min(tokens, N);
  constexpr double inf = std::numeric_limits<double>::infinity();
  for (Index i = 0; i < count; ++i) {
    const Index t = i * N / count;
    const SpectralSummary p = spectralSummary(r, t, 1);
    const VecX<S> k = r.directions().col(t);
    const Eigen::MatrixXd J = detail::frozenWriteJacobian<S>(k, r.beta()(0, t));
    const Index d = J.rows();
    // predicted spectrum: d - 1 ones and lambda, sorted ascending like the solver's
    Eigen::VectorXd predicted = Eigen::VectorXd::Ones(d);
    predicted(0) = p.kEigenvalue;
    std::sort(predicted.data(), predicted.data() + d);
    const Eigen::MatrixXd sym = 0.5 * (J + J.transpose());
    const Eigen::VectorXd mu = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(sym, Eigen::EigenvaluesOnly).eigenvalues();
    const Eigen::MatrixXd gram = J.transpose() * J - Eigen::MatrixXd::Identity(d, d);
    const Eigen::VectorXd g = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(gram, Eigen::EigenvaluesOnly).eigenvalues();
    const double lambda = p.kEigenvalue;
    const double absMax = mu.cwiseAbs().maxCoeff(), absMin = mu.cwiseAbs().minCoeff();
    auto maxInto = [](double& field, double v) { field = std::isnan(field) ? v : std::max(field, v); };
    auto minInto = [](double& field, double v) { field = std::isnan(field) ? v : std::min(field, v); };
    minInto(out.lambdaMin, lambda);
    maxInto(out.lambdaMax, lambda);
    maxInto(out.eigenvalueError, (mu - predicted).cwiseAbs().maxCoeff());
    maxInto(out.asymmetry, (J - J.transpose()).cwiseAbs().maxCoeff());
    maxInto(out.normPredicted, d == 1 ? std::abs(lambda) : std::max(1.0, std::abs(lambda)));
    maxInto(out.normMeasured, absMax);
    maxInto(out.conditionPredicted, p.conditionNumber);
    maxInto(out.conditionMeasured, absMin > 0 ? absMax / absMin : inf);
    maxInto(out.determinantError, std::abs(Eigen::PartialPivLU<Eigen::MatrixXd>(J).determinant() - p.determinant));
    maxInto(out.orthogonalityPredicted, std::abs(lambda * lambda - 1.0));
    maxInto(out.orthogonalityMeasured, g.cwiseAbs().maxCoeff());
    if (p.singular) ++out.singular;
    if (p.isOrthogonal) ++out.orthogonal;
    ++out.tokens;
  }
  return out;
}

// Compiled once in ddl::compiled: the eigen-solver and LU in double cost every auditing program seconds.
#if DDL_EXTERN_LAYERS
extern template SpectralSample sampleSpectrum<float>(const DeltaResidual<float>&, Index);
extern template SpectralSample sampleSpectrum<double>(const DeltaResidual<double>&, Index);
#endif

// One gated block in one epoch.
struct AuditRow {
  int epoch = 0;     // 1-based epoch the statistics belong to
  Index block = 0;   // blocks.<block> in the parameter names
  Index stage = 0;   // stage of the block (ConvDeltaNet); DeltaLM: the sublayer (0 attention, 1 SwiGLU);
                     // 0 for a DeltaNet
  GateStats gate;
  SpectralSample spectral;
};

// Collects AuditRows per gated sublayer and epoch (see the header comment). Net: DeltaNet<S>,
// ConvDeltaNet<S> or DeltaLM<S> (diag/gated_sublayers.hpp).
class AuditRecorder {
 public:
  explicit AuditRecorder(const RecorderOptions& opt = {}) : m_opt(checked(opt)), m_epoch(opt.bins) {}

  // Adds the last forward of net to the epoch's sums (a no-op for an additive net).
  template <class Net>
  void observe(const Net& net) {
    m_epoch.add(net);
  }

  // Closes the epoch: one row per gated block from the observed forwards, with the spectrum of the
  // net's last forward; then the sums restart. Throws Error when nothing was observed for a gated net.
  template <class Net>
  void endEpoch(int epoch, const Net& net) {
    const std::vector<GateStats> stats = m_epoch.stats();
    if (detail::netHasGates(net) && m_epoch.tokens() == 0)
      throw Error(message("ddl::AuditRecorder::endEpoch", "epoch ", epoch, ": no forward was observed"));
    endEpoch(epoch, stats, net);
    m_epoch.reset();
  }

  // Same with statistics accumulated elsewhere (e.g. Trainer's EpochMetrics::gates over the test set):
  // stats has one entry per block of net (none for an additive net).
  template <class Net>
  void endEpoch(int epoch, const std::vector<GateStats>& stats, const Net& net) {
    const char* fn = "ddl::AuditRecorder::endEpoch";
    const std::size_t depth = gatedSublayerCount(net);
    if (stats.size() != depth)
      throw ShapeError(message(fn, "got statistics of ", stats.size(), " blocks for a net with ", depth, " gated blocks"));
    for (std::size_t i = 0; i < depth; ++i) {
      AuditRow row;
      row.epoch = epoch;
      row.block = gatedBlock(net, i);
      row.stage = gatedStage(net, i);
      row.gate = stats[i];
      row.spectral = sampleSpectrum(gatedResidual(net, i), m_opt.spectralTokens);
      m_rows.push_back(row);
    }
  }

  const std::vector<AuditRow>& rows() const { return m_rows; }
  const RecorderOptions& options() const { return m_opt; }
  // Rows of earlier runs (a resumed training keeps the rows of the epochs it does not repeat).
  void restore(std::vector<AuditRow> rows, int lastEpoch) {
    rows.erase(std::remove_if(rows.begin(), rows.end(), [&](const AuditRow& r) { return r.epoch > lastEpoch; }), rows.end());
    m_rows = std::move(rows);
  }

 private:
  static const RecorderOptions& checked(const RecorderOptions& o) {
    require(o.bins >= 1, "ddl::AuditRecorder", "bins must be >= 1, got ", o.bins);
    require(o.spectralTokens >= 0, "ddl::AuditRecorder", "spectralTokens must be >= 0, got ", o.spectralTokens);
    return o;
  }
  RecorderOptions m_opt;
  NetGateAccumulator m_epoch;
  std::vector<AuditRow> m_rows;
};

}  // namespace ddl
