#pragma once
// ddl/diag/gate_audit.hpp: per-block statistics of the gate, the direction and the write (docs/spec.md §6),
// read from what a DeltaResidual kept of its last forward. Nothing here changes a module.
//
// Per block and batch (GateStats):
//   beta        mean / min / max, a histogram of fixed bins over [0, 2] (the widest gate range, so nets
//               with different caps compare bin by bin), the fraction saturated at either end of the
//               residual's own range (beta < 1e-3 or beta > betaMax - 1e-3: at betaMax = 1 a gate
//               pinned at its cap of 1 is saturated, not "half open")
//   regimes     token counts per DeltaRegime of the effective gate b = beta rho, classified by the
//               operator's own classifyRegime (ops/delta_operator.hpp): one taxonomy for the operator
//               and the audit. In the gate's range its bands are docs/spec.md §6's thresholds on b:
//               identity-like b < 0.1, projection-like |b - 1| < 0.1, reflection-like b > 1.9, and
//               between them contraction / partial reflection (expansion only outside [0, 2]). The
//               cap bounds b by betaMax: with betaMax = 1 no token can be reflection-like or partially
//               reflecting, and every lambda = 1 - beta rho lies in [0, 1]
//   |k~|        against eps_k, recovered from the stored norm n (SqrtEps: |k~| = sqrt(n^2 - eps^2),
//               AddEps: n = |k~|): min, mean, and how many tokens have |k~| < 10 eps_k
//   rho         mean |k|^2 (1 for a unit k, < 1 where the guard bites)
//   error ratio |e_post| / |e_pre| per token, which must equal |1 - beta rho| (docs/spec.md §1). e_pre =
//               k^T X - v^T = -discrepancy; e_post = k^T Y - v^T is measured on the real output Y of
//               the same forward when the caller passes it. Delta kind only (the write-only control
//               has no such identity); the mean of |1 - beta rho| is reported without Y as well, and
//               the k-eigenvalue lambda = 1 - beta rho of the frozen operator by min / mean / max.
//   magnitudes  |k^T X| (the readout p, a dv-vector per token) and |v| (the target): mean and max of
//               their Euclidean norms. The readout is k^T X of the input state when the caller passes
//               X, else v - discrepancy (Delta kind); with X also e_pre = k^T X - v^T is measured on X.
// GateAccumulator sums the same quantities over many batches (an epoch); auditGate is one batch of it.
// Every sum is taken in double, token by token in order, so an accumulator over consecutive batches
// equals one audit of the concatenated batch up to the forward's own rounding.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/delta_residual.hpp"
#include "ddl/ops/delta_operator.hpp"
#include "ddl/ops/direction.hpp"

namespace ddl {

// Thresholds of docs/spec.md §6 that are not regime bands (those live in classifyRegime, ops/delta_operator.hpp).
struct GateThresholds {
  static constexpr double saturation = 1e-3;   // beta < 1e-3 or beta > betaMax - 1e-3
  static constexpr double smallDirection = 10;  // |k~| < 10 eps_k
};

// Statistics of one block over the tokens seen (one batch, or an epoch through GateAccumulator).
// Tokens whose beta, k or |k~| is not finite are counted in nonFinite and left out of everything else.
struct GateStats {
  Index tokens = 0;     // tokens counted (finite ones)
  Index nonFinite = 0;  // tokens skipped because beta, k or n was NaN/inf

  double betaMean = std::numeric_limits<double>::quiet_NaN();
  double betaMin = std::numeric_limits<double>::quiet_NaN();
  double betaMax = std::numeric_limits<double>::quiet_NaN();
  std::vector<Index> histogram;  // fixed bins over [0, 2]; bin b covers [2b/B, 2(b+1)/B), beta = 2 in the last

  Index saturated = 0;  // beta < 1e-3 or beta > betaCap - 1e-3
  double betaCap = 2;   // the residual's betaMax (its gate's range is (0, betaCap))
  // Tokens per DeltaRegime of beta rho, indexed by static_cast<int>(DeltaRegime); they sum to tokens.
  std::array<Index, kDeltaRegimeCount> regimes{};

  DirectionNorm norm = DirectionNorm::SqrtEps;
  double epsK = 0;
  double kTildeMin = std::numeric_limits<double>::quiet_NaN();   // min |k~|
  double kTildeMean = std::numeric_limits<double>::quiet_NaN();  // mean |k~|
  Index smallDirections = 0;                                     // |k~| < 10 eps_k
  double rhoMean = std::numeric_limits<double>::quiet_NaN();      // mean |k|^2

  double expectedRatioMean = std::numeric_limits<double>::quiet_NaN();  // mean |1 - beta rho| (Delta kind)
  double lambdaMin = std::numeric_limits<double>::quiet_NaN();   // min of 1 - beta rho (Delta kind)
  double lambdaMean = std::numeric_limits<double>::quiet_NaN();  // mean of 1 - beta rho
  double lambdaMax = std::numeric_limits<double>::quiet_NaN();   // max of 1 - beta rho
  // Measured on the block output Y (see auditGate); NaN and 0 tokens when Y was not given or the kind is
  // not Delta. Tokens whose |e_pre| is rounding noise (below sqrt(eps_S) (|v| + |X^T k|)) are left out.
  Index errorRatioTokens = 0;
  double errorRatioMean = std::numeric_limits<double>::quiet_NaN();          // mean |e_post| / |e_pre|
  double errorRatioMaxDeviation = std::numeric_limits<double>::quiet_NaN();  // max | ratio - |1 - beta rho| |

  // |v| per token (always) and |k^T X| (readoutTokens of them; 0 for the write-only control without X).
  double valueNormMean = std::numeric_limits<double>::quiet_NaN();
  double valueNormMax = std::numeric_limits<double>::quiet_NaN();
  Index readoutTokens = 0;
  double readoutNormMean = std::numeric_limits<double>::quiet_NaN();
  double readoutNormMax = std::numeric_limits<double>::quiet_NaN();

  Index regimeCount(DeltaRegime r) const { return regimes[static_cast<std::size_t>(r)]; }
  double regimeFraction(DeltaRegime r) const { return fraction(regimeCount(r)); }
  double saturatedFraction() const { return fraction(saturated); }
  double smallDirectionFraction() const { return fraction(smallDirections); }
  bool errorRatioMeasured() const { return errorRatioTokens > 0; }

 private:
  double fraction(Index count) const {
    return tokens > 0 ? static_cast<double>(count) / static_cast<double>(tokens) : std::numeric_limits<double>::quiet_NaN();
  }
};

// Running sums of GateStats over any number of batches of one block (e.g. a whole epoch).
class GateAccumulator {
 public:
  // bins >= 1 fixed histogram bins over [0, 2].
  explicit GateAccumulator(Index bins = 20) : m_hist(checkedBins(bins), 0) {}

  // Adds the last forward of r. Throws ValueError for the additive baseline and Error when no forward
  // ran. Without Y the error ratio is not measured.
  template <class S>
  void add(const DeltaResidual<S>& r) {
    addImpl<S>(r, nullptr, nullptr);
  }
  // Same, measuring |e_post| / |e_pre| on Y: (d, dv*N), the output of r's last forward (Delta kind;
  // for the write-only control Y is checked but not used).
  template <class S, class DY>
  void add(const DeltaResidual<S>& r, const Eigen::MatrixBase<DY>& Y) {
    static_assert(std::is_same<typename DY::Scalar, S>::value, "ddl::GateAccumulator::add: Y must have the residual's scalar");
    const Eigen::Ref<const MatX<S>> ref(Y.derived());
    addImpl<S>(r, nullptr, &ref);
  }
  // Same with the input state X: (d, dv*N) of that forward as well: the readout k^T X and e_pre are
  // measured on X (also for the write-only control), e_post on Y.
  template <class S, class DX, class DY>
  void add(const DeltaResidual<S>& r, const Eigen::MatrixBase<DX>& X, const Eigen::MatrixBase<DY>& Y) {
    static_assert(std::is_same<typename DX::Scalar, S>::value && std::is_same<typename DY::Scalar, S>::value,
                  "ddl::GateAccumulator::add: X and Y must have the residual's scalar");
    const Eigen::Ref<const MatX<S>> refX(X.derived()), refY(Y.derived());
    addImpl<S>(r, &refX, &refY);
  }

  // Adds another accumulator of the same block (same bins).
  void merge(const GateAccumulator& o) {
    const char* fn = "ddl::GateAccumulator::merge";
    if (o.m_hist.size() != m_hist.size())
      throw ValueError(message(fn, "histograms differ: ", m_hist.size(), " bins here, ", o.m_hist.size(), " in the other"));
    if (o.m_tokens > 0 && m_tokens > 0 && (o.m_norm != m_norm || o.m_epsK != m_epsK))
      throw ValueError(message(fn, "the other accumulator saw a different direction guard (", toString(o.m_norm),
                               ", eps_k = ", o.m_epsK, ") than this one (", toString(m_norm), ", eps_k = ", m_epsK, ")"));
    if (o.m_tokens > 0 && m_tokens > 0 && o.m_cap != m_cap)
      throw ValueError(message(fn, "the other accumulator saw a gate cap betaMax = ", o.m_cap, ", this one ", m_cap));
    if (m_tokens == 0 && o.m_tokens > 0) {
      m_cap = o.m_cap;
      m_norm = o.m_norm;
      m_epsK = o.m_epsK;
    }
    m_tokens += o.m_tokens;
    m_nonFinite += o.m_nonFinite;
    m_betaSum += o.m_betaSum;
    m_betaMin = std::min(m_betaMin, o.m_betaMin);
    m_betaMax = std::max(m_betaMax, o.m_betaMax);
    for (std::size_t b = 0; b < m_hist.size(); ++b) m_hist[b] += o.m_hist[b];
    m_saturated += o.m_saturated;
    for (std::size_t i = 0; i < m_regimes.size(); ++i) m_regimes[i] += o.m_regimes[i];
    m_kTildeSum += o.m_kTildeSum;
    m_kTildeMin = std::min(m_kTildeMin, o.m_kTildeMin);
    m_small += o.m_small;
    m_rhoSum += o.m_rhoSum;
    m_expectedTokens += o.m_expectedTokens;
    m_expectedSum += o.m_expectedSum;
    m_lambdaSum += o.m_lambdaSum;
    m_lambdaMin = std::min(m_lambdaMin, o.m_lambdaMin);
    m_lambdaMax = std::max(m_lambdaMax, o.m_lambdaMax);
    m_valueSum += o.m_valueSum;
    m_valueMax = std::max(m_valueMax, o.m_valueMax);
    m_readoutTokens += o.m_readoutTokens;
    m_readoutSum += o.m_readoutSum;
    m_readoutMax = std::max(m_readoutMax, o.m_readoutMax);
    m_ratioTokens += o.m_ratioTokens;
    m_ratioSum += o.m_ratioSum;
    m_ratioMaxDev = std::max(m_ratioMaxDev, o.m_ratioMaxDev);
  }

  // The statistics so far (NaN means and no histogram mass when nothing was added).
  GateStats stats() const {
    GateStats s;
    s.tokens = m_tokens;
    s.nonFinite = m_nonFinite;
    s.histogram = m_hist;
    s.norm = m_norm;
    s.epsK = m_epsK;
    s.betaCap = m_cap;
    if (m_tokens > 0) {
      const double n = static_cast<double>(m_tokens);
      s.betaMean = m_betaSum / n;
      s.betaMin = m_betaMin;
      s.betaMax = m_betaMax;
      s.kTildeMin = m_kTildeMin;
      s.kTildeMean = m_kTildeSum / n;
      s.rhoMean = m_rhoSum / n;
      s.valueNormMean = m_valueSum / n;
      s.valueNormMax = m_valueMax;
    }
    s.saturated = m_saturated;
    s.regimes = m_regimes;
    s.smallDirections = m_small;
    if (m_expectedTokens > 0) {
      const double n = static_cast<double>(m_expectedTokens);
      s.expectedRatioMean = m_expectedSum / n;
      s.lambdaMean = m_lambdaSum / n;
      s.lambdaMin = m_lambdaMin;
      s.lambdaMax = m_lambdaMax;
    }
    s.readoutTokens = m_readoutTokens;
    if (m_readoutTokens > 0) {
      s.readoutNormMean = m_readoutSum / static_cast<double>(m_readoutTokens);
      s.readoutNormMax = m_readoutMax;
    }
    s.errorRatioTokens = m_ratioTokens;
    if (m_ratioTokens > 0) {
      s.errorRatioMean = m_ratioSum / static_cast<double>(m_ratioTokens);
      s.errorRatioMaxDeviation = m_ratioMaxDev;
    }
    return s;
  }

  Index tokens() const { return m_tokens; }
  Index bins() const { return static_cast<Index>(m_hist.size()); }
  // Back to no tokens, keeping the bins and their memory (no allocation).
  void reset() {
    std::vector<Index> hist = std::move(m_hist);
    std::fill(hist.begin(), hist.end(), Index(0));
    *this = GateAccumulator(std::move(hist));
  }

 private:
  explicit GateAccumulator(std::vector<Index>&& zeroedHistogram) : m_hist(std::move(zeroedHistogram)) {}
  static std::size_t checkedBins(Index bins) {
    require(bins >= 1, "ddl::GateAccumulator", "bins must be >= 1, got ", bins);
    return static_cast<std::size_t>(bins);
  }

  template <class S>
  void addImpl(const DeltaResidual<S>& r, const Eigen::Ref<const MatX<S>>* X, const Eigen::Ref<const MatX<S>>* Y) {
    const char* fn = "ddl::GateAccumulator::add";
    const DeltaResidualOptions& opt = r.options();
    if (opt.residual == ResidualKind::Additive)
      throw ValueError(message(fn, "the residual is additive (X' = X + h): it has no gate, direction or value to audit"));
    const RowX<S>& beta = r.beta();
    if (beta.size() == 0) throw Error(message(fn, "no forward has run on this residual yet; nothing to audit"));
    const MatX<S>& K = r.directions();
    const RowX<S>& nrm = r.directionNorms();
    const MatX<S>& V = r.values();
    const Index N = beta.cols(), d = K.rows(), dv = V.rows();
    // A forward that threw half-way can leave caches of two batches; refuse rather than misread them.
    checkShape(fn, "directionNorms", nrm, 1, N);
    checkShape(fn, "directions", K, -1, N);
    checkShape(fn, "values", V, -1, N);
    const bool delta = opt.residual == ResidualKind::Delta;
    const MatX<S>& D = r.discrepancy();
    if (delta) checkShape(fn, "discrepancy", D, dv, N);
    if (X) checkShape(fn, "X (the input of the audited forward)", *X, d, dv * N);
    if (Y) checkShape(fn, "Y (the output of the audited forward)", *Y, d, dv * N);
    if (m_tokens > 0 && (opt.norm != m_norm || opt.epsK != m_epsK))
      throw ValueError(message(fn, "this residual guards its direction with ", toString(opt.norm), ", eps_k = ", opt.epsK,
                               " but the accumulator has seen ", toString(m_norm), ", eps_k = ", m_epsK));
    if (m_tokens > 0 && opt.betaMax != m_cap)
      throw ValueError(message(fn, "this residual caps its gate at betaMax = ", opt.betaMax,
                               " but the accumulator has seen betaMax = ", m_cap));
    m_norm = opt.norm;
    m_epsK = opt.epsK;
    m_cap = opt.betaMax;
    const double eps = opt.epsK;
    const double noise = std::sqrt(static_cast<double>(Eigen::NumTraits<S>::epsilon()));
    const Index B = bins();
    for (Index t = 0; t < N; ++t) {
      const double b = static_cast<double>(beta(0, t));
      const double n = static_cast<double>(nrm(0, t));
      const double rho = static_cast<double>(K.col(t).template cast<double>().squaredNorm());
      if (!std::isfinite(b) || !std::isfinite(n) || !std::isfinite(rho)) {
        ++m_nonFinite;
        continue;
      }
      ++m_tokens;
      // gate
      m_betaSum += b;
      m_betaMin = std::min(m_betaMin, b);
      m_betaMax = std::max(m_betaMax, b);
      const Index bin = std::min<Index>(B - 1, std::max<Index>(0, static_cast<Index>(std::floor(b / 2.0 * static_cast<double>(B)))));
      ++m_hist[static_cast<std::size_t>(bin)];
      if (b < GateThresholds::saturation || b > m_cap - GateThresholds::saturation) ++m_saturated;
      ++m_regimes[static_cast<std::size_t>(classifyRegime(b * rho))];
      // direction
      const double kt = opt.norm == DirectionNorm::SqrtEps ? std::sqrt(std::max(0.0, n * n - eps * eps)) : n;
      m_kTildeSum += kt;
      m_kTildeMin = std::min(m_kTildeMin, kt);
      if (kt < GateThresholds::smallDirection * eps) ++m_small;
      m_rhoSum += rho;
      // magnitudes: |v| always, the readout p = k^T X from X (or v - discrepancy, Delta kind)
      double v2 = 0, p2 = 0, pre2 = 0, post2 = 0;
      for (Index j = 0; j < dv; ++j) {
        const double vj = static_cast<double>(V(j, t));
        const double pj = X ? dotInDouble(K, t, *X, j * N + t) : delta ? vj - static_cast<double>(D(j, t)) : 0.0;
        v2 += vj * vj;
        p2 += pj * pj;
        pre2 += (pj - vj) * (pj - vj);  // e_pre = k^T X - v^T
        if (delta && Y) {
          const double post = dotInDouble(K, t, *Y, j * N + t) - vj;
          post2 += post * post;
        }
      }
      const double vNorm = std::sqrt(v2), pNorm = std::sqrt(p2);
      m_valueSum += vNorm;
      m_valueMax = std::max(m_valueMax, vNorm);
      if (X || delta) {
        ++m_readoutTokens;
        m_readoutSum += pNorm;
        m_readoutMax = std::max(m_readoutMax, pNorm);
      }
      if (!delta) continue;
      // write: e_post = (1 - beta rho) e_pre, lambda = 1 - beta rho the k-eigenvalue
      const double lambda = 1.0 - b * rho;
      const double expected = std::abs(lambda);
      ++m_expectedTokens;
      m_expectedSum += expected;
      m_lambdaSum += lambda;
      m_lambdaMin = std::min(m_lambdaMin, lambda);
      m_lambdaMax = std::max(m_lambdaMax, lambda);
      if (!Y) continue;
      const double pre = std::sqrt(pre2);
      if (!(pre > noise * (vNorm + pNorm))) continue;
      const double ratio = std::sqrt(post2) / pre;
      ++m_ratioTokens;
      m_ratioSum += ratio;
      m_ratioMaxDev = std::max(m_ratioMaxDev, std::abs(ratio - expected));
    }
  }

  // k_t^T M.col(c) in double.
  template <class S>
  static double dotInDouble(const MatX<S>& K, Index t, const Eigen::Ref<const MatX<S>>& M, Index c) {
    double sum = 0;
    for (Index i = 0; i < K.rows(); ++i) sum += static_cast<double>(K(i, t)) * static_cast<double>(M(i, c));
    return sum;
  }

  static constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<Index> m_hist;
  DirectionNorm m_norm = DirectionNorm::SqrtEps;
  double m_cap = 2;  // the audited residual's betaMax
  double m_epsK = 0;
  Index m_tokens = 0, m_nonFinite = 0;
  double m_betaSum = 0, m_betaMin = inf, m_betaMax = -inf;
  Index m_saturated = 0;
  std::array<Index, kDeltaRegimeCount> m_regimes{};
  double m_kTildeSum = 0, m_kTildeMin = inf;
  Index m_small = 0;
  double m_rhoSum = 0;
  Index m_expectedTokens = 0;
  double m_expectedSum = 0;
  double m_lambdaSum = 0, m_lambdaMin = inf, m_lambdaMax = -inf;
  double m_valueSum = 0, m_valueMax = -inf;
  Index m_readoutTokens = 0;
  double m_readoutSum = 0, m_readoutMax = -inf;
  Index m_ratioTokens = 0;
  double m_ratioSum = 0, m_ratioMaxDev = 0;
};

// One batch of one block: the last forward of r. Throws ValueError for the additive baseline and Error
// when no forward ran. bins >= 1 histogram bins over [0, 2].
template <class S>
GateStats auditGate(const DeltaResidual<S>& r, Index bins = 20) {
  GateAccumulator acc(bins);
  acc.add(r);
  return acc.stats();
}
// Same, measuring |e_post| / |e_pre| on Y: (d, dv*N), the output of r's last forward. For a DeltaBlock
// the block output is the residual output.
template <class S, class DY>
GateStats auditGate(const DeltaResidual<S>& r, const Eigen::MatrixBase<DY>& Y, Index bins = 20) {
  GateAccumulator acc(bins);
  acc.add(r, Y);
  return acc.stats();
}
// Same, with the input state X: (d, dv*N) of that forward too (readout and e_pre measured on X).
template <class S, class DX, class DY>
GateStats auditGate(const DeltaResidual<S>& r, const Eigen::MatrixBase<DX>& X, const Eigen::MatrixBase<DY>& Y,
                    Index bins = 20) {
  GateAccumulator acc(bins);
  acc.add(r, X, Y);
  return acc.stats();
}

}  // namespace ddl
