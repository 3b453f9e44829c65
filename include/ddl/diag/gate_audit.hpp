#pragma once
// ddl/diag/gate_audit.hpp: per-block statistics of the gate, the direction and the write (SPEC §6),
// read from what a DeltaResidual kept of its last forward. Nothing here changes a module.
//
// Per block and batch (GateStats):
//   beta        mean / min / max, a histogram of fixed bins over [0, 2], the fraction saturated
//               (beta < 1e-3 or beta > 2 - 1e-3) and the regime counts on beta: identity-like
//               beta < 0.1, projection-like |beta - 1| < 0.1, reflection-like beta > 1.9, other
//   |k~|        against eps_k, recovered from the stored norm n (SqrtEps: |k~| = sqrt(n^2 - eps^2),
//               AddEps: n = |k~|): min, mean, and how many tokens have |k~| < 10 eps_k
//   rho         mean |k|^2 (1 for a unit k, < 1 where the guard bites)
//   error ratio |e_post| / |e_pre| per token, which must equal |1 - beta rho| (SPEC §1). e_pre =
//               k^T X - v^T = -discrepancy; e_post = k^T Y - v^T is measured on the real output Y of
//               the same forward when the caller passes it. Delta kind only (the write-only control
//               has no such identity); the mean of |1 - beta rho| is reported without Y as well.
// GateAccumulator sums the same quantities over many batches (an epoch); auditGate is one batch of it.
// Every sum is taken in double, token by token in order, so an accumulator over consecutive batches
// equals one audit of the concatenated batch up to the forward's own rounding.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/delta_net.hpp"
#include "ddl/nn/delta_residual.hpp"
#include "ddl/ops/direction.hpp"

namespace ddl {

// Thresholds of SPEC §6.
struct GateThresholds {
  static constexpr double saturation = 1e-3;   // beta < 1e-3 or beta > 2 - 1e-3
  static constexpr double identity = 0.1;      // beta < 0.1
  static constexpr double projection = 0.1;    // |beta - 1| < 0.1
  static constexpr double reflection = 1.9;    // beta > 1.9
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

  Index saturated = 0;       // beta < 1e-3 or beta > 2 - 1e-3
  Index identityLike = 0;    // beta < 0.1
  Index projectionLike = 0;  // |beta - 1| < 0.1
  Index reflectionLike = 0;  // beta > 1.9
  Index otherRegime = 0;     // none of the three

  DirectionNorm norm = DirectionNorm::SqrtEps;
  double epsK = 0;
  double kTildeMin = std::numeric_limits<double>::quiet_NaN();   // min |k~|
  double kTildeMean = std::numeric_limits<double>::quiet_NaN();  // mean |k~|
  Index smallDirections = 0;                                     // |k~| < 10 eps_k
  double rhoMean = std::numeric_limits<double>::quiet_NaN();      // mean |k|^2

  double expectedRatioMean = std::numeric_limits<double>::quiet_NaN();  // mean |1 - beta rho| (Delta kind)
  // Measured on the block output Y (see auditGate); NaN and 0 tokens when Y was not given or the kind is
  // not Delta. Tokens whose |e_pre| is rounding noise (below sqrt(eps_S) (|v| + |X^T k|)) are left out.
  Index errorRatioTokens = 0;
  double errorRatioMean = std::numeric_limits<double>::quiet_NaN();          // mean |e_post| / |e_pre|
  double errorRatioMaxDeviation = std::numeric_limits<double>::quiet_NaN();  // max | ratio - |1 - beta rho| |

  double saturatedFraction() const { return fraction(saturated); }
  double identityFraction() const { return fraction(identityLike); }
  double projectionFraction() const { return fraction(projectionLike); }
  double reflectionFraction() const { return fraction(reflectionLike); }
  double otherFraction() const { return fraction(otherRegime); }
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
    addImpl<S>(r, nullptr);
  }
  // Same, measuring |e_post| / |e_pre| on Y: (d, dv*N), the output of r's last forward (Delta kind;
  // for the write-only control Y is checked but not used).
  template <class S, class DY>
  void add(const DeltaResidual<S>& r, const Eigen::MatrixBase<DY>& Y) {
    static_assert(std::is_same<typename DY::Scalar, S>::value, "ddl::GateAccumulator::add: Y must have the residual's scalar");
    const Eigen::Ref<const MatX<S>> ref(Y.derived());
    addImpl<S>(r, &ref);
  }

  // Adds another accumulator of the same block (same bins).
  void merge(const GateAccumulator& o) {
    const char* fn = "ddl::GateAccumulator::merge";
    if (o.m_hist.size() != m_hist.size())
      throw ValueError(message(fn, "histograms differ: ", m_hist.size(), " bins here, ", o.m_hist.size(), " in the other"));
    if (o.m_tokens > 0 && m_tokens > 0 && (o.m_norm != m_norm || o.m_epsK != m_epsK))
      throw ValueError(message(fn, "the other accumulator saw a different direction guard (", toString(o.m_norm),
                               ", eps_k = ", o.m_epsK, ") than this one (", toString(m_norm), ", eps_k = ", m_epsK, ")"));
    if (m_tokens == 0 && o.m_tokens > 0) {
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
    m_identity += o.m_identity;
    m_projection += o.m_projection;
    m_reflection += o.m_reflection;
    m_other += o.m_other;
    m_kTildeSum += o.m_kTildeSum;
    m_kTildeMin = std::min(m_kTildeMin, o.m_kTildeMin);
    m_small += o.m_small;
    m_rhoSum += o.m_rhoSum;
    m_expectedTokens += o.m_expectedTokens;
    m_expectedSum += o.m_expectedSum;
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
    if (m_tokens > 0) {
      const double n = static_cast<double>(m_tokens);
      s.betaMean = m_betaSum / n;
      s.betaMin = m_betaMin;
      s.betaMax = m_betaMax;
      s.kTildeMin = m_kTildeMin;
      s.kTildeMean = m_kTildeSum / n;
      s.rhoMean = m_rhoSum / n;
    }
    s.saturated = m_saturated;
    s.identityLike = m_identity;
    s.projectionLike = m_projection;
    s.reflectionLike = m_reflection;
    s.otherRegime = m_other;
    s.smallDirections = m_small;
    if (m_expectedTokens > 0) s.expectedRatioMean = m_expectedSum / static_cast<double>(m_expectedTokens);
    s.errorRatioTokens = m_ratioTokens;
    if (m_ratioTokens > 0) {
      s.errorRatioMean = m_ratioSum / static_cast<double>(m_ratioTokens);
      s.errorRatioMaxDeviation = m_ratioMaxDev;
    }
    return s;
  }

  Index tokens() const { return m_tokens; }
  Index bins() const { return static_cast<Index>(m_hist.size()); }
  void reset() { *this = GateAccumulator(bins()); }

 private:
  static std::size_t checkedBins(Index bins) {
    require(bins >= 1, "ddl::GateAccumulator", "bins must be >= 1, got ", bins);
    return static_cast<std::size_t>(bins);
  }

  template <class S>
  void addImpl(const DeltaResidual<S>& r, const Eigen::Ref<const MatX<S>>* Y) {
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
    if (Y) checkShape(fn, "Y (the output of the audited forward)", *Y, d, dv * N);
    if (m_tokens > 0 && (opt.norm != m_norm || opt.epsK != m_epsK))
      throw ValueError(message(fn, "this residual guards its direction with ", toString(opt.norm), ", eps_k = ", opt.epsK,
                               " but the accumulator has seen ", toString(m_norm), ", eps_k = ", m_epsK));
    m_norm = opt.norm;
    m_epsK = opt.epsK;
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
      if (b < GateThresholds::saturation || b > 2.0 - GateThresholds::saturation) ++m_saturated;
      if (b < GateThresholds::identity)
        ++m_identity;
      else if (std::abs(b - 1.0) < GateThresholds::projection)
        ++m_projection;
      else if (b > GateThresholds::reflection)
        ++m_reflection;
      else
        ++m_other;
      // direction
      const double kt = opt.norm == DirectionNorm::SqrtEps ? std::sqrt(std::max(0.0, n * n - eps * eps)) : n;
      m_kTildeSum += kt;
      m_kTildeMin = std::min(m_kTildeMin, kt);
      if (kt < GateThresholds::smallDirection * eps) ++m_small;
      m_rhoSum += rho;
      if (!delta) continue;
      // write: e_post = (1 - beta rho) e_pre
      const double expected = std::abs(1.0 - b * rho);
      ++m_expectedTokens;
      m_expectedSum += expected;
      if (!Y) continue;
      double pre2 = 0, post2 = 0, v2 = 0, p2 = 0;
      for (Index j = 0; j < dv; ++j) {
        const double vj = static_cast<double>(V(j, t)), dj = static_cast<double>(D(j, t));
        const double readout = static_cast<double>(K.col(t).template cast<double>().dot((*Y).col(j * N + t).template cast<double>()));
        pre2 += dj * dj;  // e_pre = -discrepancy
        post2 += (readout - vj) * (readout - vj);
        v2 += vj * vj;
        p2 += (vj - dj) * (vj - dj);  // X^T k = v - discrepancy
      }
      const double pre = std::sqrt(pre2);
      if (!(pre > noise * (std::sqrt(v2) + std::sqrt(p2)))) continue;
      const double ratio = std::sqrt(post2) / pre;
      ++m_ratioTokens;
      m_ratioSum += ratio;
      m_ratioMaxDev = std::max(m_ratioMaxDev, std::abs(ratio - expected));
    }
  }

  static constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<Index> m_hist;
  DirectionNorm m_norm = DirectionNorm::SqrtEps;
  double m_epsK = 0;
  Index m_tokens = 0, m_nonFinite = 0;
  double m_betaSum = 0, m_betaMin = inf, m_betaMax = -inf;
  Index m_saturated = 0, m_identity = 0, m_projection = 0, m_reflection = 0, m_other = 0;
  double m_kTildeSum = 0, m_kTildeMin = inf;
  Index m_small = 0;
  double m_rhoSum = 0;
  Index m_expectedTokens = 0;
  double m_expectedSum = 0;
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

namespace detail {
// Net: DeltaNet, ConvDeltaNet or any net whose config().block.residual names the residual kind.
template <class Net>
bool netHasGates(const Net& net) {
  return net.config().block.residual.residual != ResidualKind::Additive && !net.blocks().empty();
}
// states: depth + 1 entries, states[i] the input of block i and states[i + 1] its output.
template <class S>
void checkNetStates(const char* fn, const DeltaNet<S>& net, const std::vector<MatX<S>>& states) {
  if (states.size() != net.blocks().size() + 1)
    throw ShapeError(message(fn, "got ", states.size(), " states, expected depth + 1 = ", net.blocks().size() + 1,
                             " (states[i + 1] is the output of block i)"));
}
}  // namespace detail

// Every block of the last forward of net, in order; empty for an additive (plain residual) net.
template <class S>
std::vector<GateStats> auditNet(const DeltaNet<S>& net, Index bins = 20) {
  std::vector<GateStats> out;
  if (!detail::netHasGates(net)) return out;
  for (const auto& b : net.blocks()) out.push_back(auditGate(b.residual(), bins));
  return out;
}
// Same, measuring the error ratio on the block outputs: states has depth + 1 entries, states[i] the
// input of block i and states[i + 1] its output, each (d, dv*N), all from the last forward.
template <class S>
std::vector<GateStats> auditNet(const DeltaNet<S>& net, const std::vector<MatX<S>>& states, Index bins = 20) {
  std::vector<GateStats> out;
  if (!detail::netHasGates(net)) return out;
  detail::checkNetStates("ddl::auditNet", net, states);
  for (std::size_t i = 0; i < net.blocks().size(); ++i)
    out.push_back(auditGate(net.blocks()[i].residual(), states[i + 1], bins));
  return out;
}

// One GateAccumulator per block of a net, for statistics over an epoch. Adding an additive net is a
// no-op (stats() stays empty).
class NetGateAccumulator {
 public:
  explicit NetGateAccumulator(Index bins = 20) : m_bins(bins) {
    require(bins >= 1, "ddl::NetGateAccumulator", "bins must be >= 1, got ", bins);
  }

  // Net: DeltaNet<S>, ConvDeltaNet<S> (blocks() in order, each with residual()).
  template <class Net>
  void add(const Net& net) {
    if (!detail::netHasGates(net)) return;
    resizeFor("ddl::NetGateAccumulator::add", net.blocks().size());
    for (std::size_t i = 0; i < net.blocks().size(); ++i) m_blocks[i].add(net.blocks()[i].residual());
  }
  // states as for auditNet(net, states).
  template <class S>
  void add(const DeltaNet<S>& net, const std::vector<MatX<S>>& states) {
    const char* fn = "ddl::NetGateAccumulator::add";
    if (!detail::netHasGates(net)) return;
    detail::checkNetStates(fn, net, states);
    resizeFor(fn, net.blocks().size());
    for (std::size_t i = 0; i < net.blocks().size(); ++i) m_blocks[i].add(net.blocks()[i].residual(), states[i + 1]);
  }

  std::vector<GateStats> stats() const {
    std::vector<GateStats> out;
    for (const auto& a : m_blocks) out.push_back(a.stats());
    return out;
  }
  const std::vector<GateAccumulator>& blocks() const { return m_blocks; }
  void reset() { m_blocks.clear(); }

 private:
  void resizeFor(const char* fn, std::size_t depth) {
    if (m_blocks.empty()) m_blocks.assign(depth, GateAccumulator(m_bins));
    if (m_blocks.size() != depth)
      throw ShapeError(message(fn, "net has ", depth, " blocks but the accumulator holds ", m_blocks.size()));
  }
  Index m_bins;
  std::vector<GateAccumulator> m_blocks;
};

namespace detail {
inline std::string formatNumber(const char* fmt, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, x);
  return buf;
}
inline std::string formatPercent(double fraction) {
  return std::isnan(fraction) ? std::string("     -") : formatNumber("%6.1f", 100.0 * fraction);
}
}  // namespace detail

// A readable table for the end of training: a title, a header, then one line per block starting
// "block <i>": tokens, beta mean/min/max, % saturated, % identity/projection/reflection/other,
// min |k~|, % |k~| < 10 eps_k, the measured mean |e_post|/|e_pre| ("-" when not measured) and, in
// parentheses, the mean |1 - beta rho| it should equal. An empty vector gives one line saying so.
inline std::string formatGateSummary(const std::vector<GateStats>& blocks) {
  using detail::formatNumber;
  using detail::formatPercent;
  std::string s;
  if (blocks.empty()) return "gate audit: no gated blocks (additive residual)\n";
  s += "gate audit (beta = 2 sigma(z) in [0, 2]; regimes: identity beta<0.1, projection |beta-1|<0.1, "
       "reflection beta>1.9)\n";
  char header[256];
  std::snprintf(header, sizeof header, "%-10s %7s  %9s %8s %8s %6s %6s %6s %6s %6s  %9s %11s  %8s (%s)\n", "block", "tokens",
                "beta_mean", "beta_min", "beta_max", "%sat", "%ident", "%proj", "%refl", "%other", "min|k~|",
                "%|k~|<10eps", "e_ratio", "|1-beta*rho|");
  s += header;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const GateStats& g = blocks[i];
    char head[48];
    std::snprintf(head, sizeof head, "block %-4lld %7lld", static_cast<long long>(i), static_cast<long long>(g.tokens));
    s += head;
    s += formatNumber("  %9.4f", g.betaMean) + formatNumber(" %8.4f", g.betaMin) + formatNumber(" %8.4f", g.betaMax);
    s += " " + formatPercent(g.saturatedFraction()) + " " + formatPercent(g.identityFraction()) + " " +
         formatPercent(g.projectionFraction()) + " " + formatPercent(g.reflectionFraction()) + " " +
         formatPercent(g.otherFraction());
    s += formatNumber("  %9.3e", g.kTildeMin) + "      " + formatPercent(g.smallDirectionFraction());
    if (g.errorRatioMeasured())
      s += formatNumber("  %8.4f", g.errorRatioMean) + formatNumber(" (%.4f)", g.expectedRatioMean);
    else if (!std::isnan(g.expectedRatioMean))
      s += "         -" + formatNumber(" (%.4f)", g.expectedRatioMean);
    else
      s += "         -";
    if (g.nonFinite > 0) s += "  [" + std::to_string(g.nonFinite) + " non-finite tokens skipped]";
    s += "\n";
  }
  return s;
}

}  // namespace ddl
