#pragma once
// ddl/diag/net_gate_audit.hpp: the gate audit of a whole net (diag/gate_audit.hpp per sublayer):
// auditNet for one forward, NetGateAccumulator over an epoch of them, formatGateSummary for the end
// of training. The gated sublayers are one per block of DeltaNet and ConvDeltaNet and two per block
// of DeltaLM (diag/gated_sublayers.hpp).
#include <cstdio>
#include <string>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/diag/gate_audit.hpp"
#include "ddl/diag/gated_sublayers.hpp"
#include "ddl/nn/models/delta_net.hpp"

namespace ddl {

namespace detail {
// Net: any net with gated sublayers (diag/gated_sublayers.hpp).
template <class Net>
bool netHasGates(const Net& net) {
  return gatedSublayerCount(net) > 0;
}
// states: depth + 1 entries, states[i] the input of block i and states[i + 1] its output.
template <class S>
void checkNetStates(const char* fn, const DeltaNet<S>& net, const std::vector<MatX<S>>& states) {
  if (states.size() != net.blocks().size() + 1)
    throw ShapeError(message(fn, "got ", states.size(), " states, expected depth + 1 = ", net.blocks().size() + 1,
                             " (states[i + 1] is the output of block i)"));
}
}  // namespace detail

// Every gated sublayer of the last forward of net, in order, measured on the sublayer inputs and
// outputs the net kept; empty for an additive (plain residual) net.
// Net: DeltaNet<S>, ConvDeltaNet<S> (one per block) or DeltaLM<S> (two per block): see
// diag/gated_sublayers.hpp.
template <class Net>
std::vector<GateStats> auditNet(const Net& net, Index bins = 20) {
  std::vector<GateStats> out;
  const std::size_t n = gatedSublayerCount(net);
  for (std::size_t i = 0; i < n; ++i)
    out.push_back(auditGate(gatedResidual(net, i), gatedInput(net, i), gatedOutput(net, i), bins));
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

// One GateAccumulator per gated sublayer of a net (per block for DeltaNet / ConvDeltaNet, two per
// block for DeltaLM: diag/gated_sublayers.hpp), for statistics over an epoch. Adding an additive net
// is a no-op (stats() stays empty).
class NetGateAccumulator {
 public:
  explicit NetGateAccumulator(Index bins = 20) : m_bins(bins) {
    require(bins >= 1, "ddl::NetGateAccumulator", "bins must be >= 1, got ", bins);
  }

  // The last forward of net, measured on its sublayer inputs and outputs (as auditNet(net)).
  // Net: DeltaNet<S>, ConvDeltaNet<S>, DeltaLM<S> (diag/gated_sublayers.hpp).
  template <class Net>
  void add(const Net& net) {
    const std::size_t n = gatedSublayerCount(net);
    if (n == 0) return;
    resizeFor("ddl::NetGateAccumulator::add", n);
    for (std::size_t i = 0; i < n; ++i) m_blocks[i].add(gatedResidual(net, i), gatedInput(net, i), gatedOutput(net, i));
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
  // Zeroes every block's sums in place (no allocation); the next net must have the same depth.
  void reset() {
    for (GateAccumulator& a : m_blocks) a.reset();
  }
  // Tokens seen so far (of block 0; every block sees the same forwards).
  Index tokens() const { return m_blocks.empty() ? 0 : m_blocks.front().tokens(); }

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
// "block <i>": tokens, beta mean/min/max, % saturated, % of tokens in each DeltaRegime of beta rho
// (identity, contraction, projection, partial reflection, reflection, expansion), min |k~|, % |k~| < 10 eps_k, the measured mean |e_post|/|e_pre| ("-" when not measured) and, in
// parentheses, the mean |1 - beta rho| it should equal. An empty vector gives one line saying so.
// labels: one per entry of blocks (gatedLabels(net), e.g. "block 0 attn"), in place of "block <i>";
// the first column is as wide as the longest label (at least 10).
inline std::string formatGateSummary(const std::vector<GateStats>& blocks, const std::vector<std::string>& labels) {
  using detail::formatNumber;
  using detail::formatPercent;
  std::string s;
  if (labels.size() != blocks.size())
    throw ShapeError(message("ddl::formatGateSummary", "got ", labels.size(), " labels for ", blocks.size(), " blocks"));
  if (blocks.empty()) return "gate audit: no gated blocks (additive residual)\n";
  int width = 10;
  for (const std::string& l : labels) width = std::max(width, static_cast<int>(l.size()));
  char cap[32];  // the residuals' cap (one per net): "2" for the paper's range
  std::snprintf(cap, sizeof cap, "%g", blocks[0].betaCap);
  s += std::string("gate audit (beta = ") + cap + " sigma(z) in [0, " + cap + "]; regimes of b = beta*rho: identity b<0.1, "
       "contraction, projection |b-1|<0.1, partial reflection, reflection b>1.9, expansion outside [0, 2])\n";
  char header[256];
  std::snprintf(header, sizeof header, "%-*s %7s  %9s %8s %8s %6s %6s %6s %6s %6s %6s %6s  %9s %11s  %8s (%s)\n", width, "block",
                "tokens", "beta_mean", "beta_min", "beta_max", "%sat", "%ident", "%contr", "%proj", "%prefl", "%refl",
                "%expan", "min|k~|", "%|k~|<10eps", "e_ratio", "|1-beta*rho|");
  s += header;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const GateStats& g = blocks[i];
    char count[32];
    std::snprintf(count, sizeof count, " %7lld", static_cast<long long>(g.tokens));
    s += labels[i] + std::string(static_cast<std::size_t>(width) - labels[i].size(), ' ') + count;
    s += formatNumber("  %9.4f", g.betaMean) + formatNumber(" %8.4f", g.betaMin) + formatNumber(" %8.4f", g.betaMax);
    s += " " + formatPercent(g.saturatedFraction());
    for (int r = 0; r < kDeltaRegimeCount; ++r) s += " " + formatPercent(g.regimeFraction(static_cast<DeltaRegime>(r)));
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

// Same with the labels "block <i>".
inline std::string formatGateSummary(const std::vector<GateStats>& blocks) {
  std::vector<std::string> labels;
  for (std::size_t i = 0; i < blocks.size(); ++i) labels.push_back("block " + std::to_string(i));
  return formatGateSummary(blocks, labels);
}

}  // namespace ddl
