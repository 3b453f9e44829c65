// The gate audit of DeltaLM (diag/gated_sublayers.hpp): two rows per block (attention, then SwiGLU),
// gathered over NextTokenTask's held-out windows, equal to a direct computation from the sublayers'
// caches and states; none for the additive baseline.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "ddl/diag/net_gate_audit.hpp"
#include "ddl/diag/recorder.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/train/next_token_task.hpp"

namespace test_lm_audit {  // each test file in its own namespace: a group of files compiles as one unit

namespace {
using ddl::Index;
using ddl::MatX;

ddl::DeltaLMConfig tinyConfig(Index depth) {
  ddl::DeltaLMConfig c;
  c.d = 8;
  c.heads = 2;
  c.depth = depth;
  c.context = 6;
  c.hidden = 12;
  ddl::applyVariant(c, "dv1");
  return c;
}

std::vector<std::uint8_t> randomText(std::size_t n, std::uint64_t seed) {
  ddl::Rng rng(seed);
  std::vector<std::uint8_t> t(n);
  for (auto& b : t) b = static_cast<std::uint8_t>(32 + rng.below(95));
  return t;
}

// Sums of one sublayer over the windows, straight from its DeltaResidual and the states around it.
struct Direct {
  Index tokens = 0;
  double betaSum = 0, betaMin = 1e300, betaMax = -1e300, rhoSum = 0, expectedSum = 0, ratioSum = 0, readoutSum = 0;
  void add(const ddl::DeltaResidual<double>& r, const MatX<double>& X, const MatX<double>& Y) {
    const MatX<double>& K = r.directions();
    const MatX<double>& V = r.values();
    for (Index t = 0; t < K.cols(); ++t) {
      const double beta = r.beta()(t), rho = K.col(t).squaredNorm();
      const double pre = K.col(t).dot(X.col(t)) - V(0, t), post = K.col(t).dot(Y.col(t)) - V(0, t);
      ++tokens;
      betaSum += beta;
      betaMin = std::min(betaMin, beta);
      betaMax = std::max(betaMax, beta);
      rhoSum += rho;
      expectedSum += std::abs(1 - beta * rho);
      ratioSum += std::abs(post) / std::abs(pre);
      readoutSum += std::abs(K.col(t).dot(X.col(t)));
    }
  }
};

void checkClose(double a, double b, double tol) {
  INFO(a << " vs " << b);
  CHECK(std::abs(a - b) <= tol * std::max(1.0, std::abs(b)));
}
}  // namespace

TEST_CASE("DeltaLM's gate audit: two rows per block over the held-out windows, equal to its caches", "[lm][diag][audit]") {
  const Index depth = 2;
  ddl::DeltaLM<double> lm(tinyConfig(depth), 3);
  const std::vector<std::uint8_t> text = randomText(40, 5);  // 39 predicted bytes: windows of 6 and one of 3
  ddl::NextTokenTask<double> task;
  MatX<double> scratch;
  ddl::NetGateAccumulator gates;
  std::vector<Direct> direct(static_cast<std::size_t>(2 * depth));
  const ddl::EvalResult r = task.evaluate(lm, text, 2, scratch, [&] {
    gates.add(lm);
    for (Index l = 0; l < depth; ++l) {  // by the block's own accessors, not the sublayer interface
      const auto& b = lm.blocks()[static_cast<std::size_t>(l)];
      direct[static_cast<std::size_t>(2 * l)].add(b.attentionResidual(), lm.states()[static_cast<std::size_t>(l)], b.middle());
      direct[static_cast<std::size_t>(2 * l + 1)].add(b.mlpResidual(), b.middle(), lm.states()[static_cast<std::size_t>(l + 1)]);
    }
  });
  REQUIRE(r.count == 39);
  const std::vector<ddl::GateStats> stats = gates.stats();
  REQUIRE(stats.size() == 4);
  CHECK(ddl::gatedLabels(lm) == std::vector<std::string>{"block 0 attn", "block 0 mlp", "block 1 attn", "block 1 mlp"});
  for (std::size_t i = 0; i < stats.size(); ++i) {
    INFO("sublayer " << i);
    const ddl::GateStats& g = stats[i];
    const Direct& d = direct[i];
    CHECK(g.tokens == r.count);
    CHECK(d.tokens == r.count);
    CHECK(g.nonFinite == 0);
    CHECK(g.betaMin > 0.0);
    CHECK(g.betaMax < 2.0);
    const double n = static_cast<double>(d.tokens);
    checkClose(g.betaMean, d.betaSum / n, 1e-12);
    CHECK(g.betaMin == d.betaMin);
    CHECK(g.betaMax == d.betaMax);
    checkClose(g.rhoMean, d.rhoSum / n, 1e-12);
    checkClose(g.expectedRatioMean, d.expectedSum / n, 1e-12);
    REQUIRE(g.errorRatioTokens == r.count);
    checkClose(g.errorRatioMean, d.ratioSum / n, 1e-9);
    checkClose(g.errorRatioMean, g.expectedRatioMean, 1e-8);  // |e_post| / |e_pre| = |1 - beta rho| (spec §1)
    REQUIRE(g.readoutTokens == r.count);
    checkClose(g.readoutNormMean, d.readoutSum / n, 1e-12);
    Index regimes = 0;
    for (Index c : g.regimes) regimes += c;
    CHECK(regimes == g.tokens);
  }

  // The recorder's rows: block l, stage 0 (attention) and 1 (SwiGLU), the same statistics.
  ddl::AuditRecorder rec;
  rec.endEpoch(7, stats, lm);
  REQUIRE(rec.rows().size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(rec.rows()[i].epoch == 7);
    CHECK(rec.rows()[i].block == static_cast<Index>(i / 2));
    CHECK(rec.rows()[i].stage == static_cast<Index>(i % 2));
    CHECK(rec.rows()[i].gate.betaMean == stats[i].betaMean);
  }
  const std::string table = ddl::formatGateSummary(stats, ddl::gatedLabels(lm));
  CHECK(table.find("\nblock 0 attn ") != std::string::npos);
  CHECK(table.find("\nblock 1 mlp  ") != std::string::npos);
  CHECK_THROWS_AS(lm.sublayerResidual(4), ddl::ValueError);
}

TEST_CASE("DeltaLM's gate audit: the additive baseline has nothing to audit", "[lm][diag][audit]") {
  ddl::DeltaLMConfig cfg = tinyConfig(2);
  cfg.block.residual.residual = ddl::ResidualKind::Additive;
  ddl::DeltaLM<double> lm(cfg, 3);
  ddl::NextTokenTask<double> task;
  MatX<double> scratch;
  ddl::NetGateAccumulator gates;
  task.evaluate(lm, randomText(20, 1), 2, scratch, [&] { gates.add(lm); });
  CHECK(gates.stats().empty());
  CHECK(ddl::gatedLabels(lm).empty());
  CHECK(ddl::formatGateSummary(gates.stats(), ddl::gatedLabels(lm)) == "gate audit: no gated blocks (additive residual)\n");
  ddl::AuditRecorder rec;
  rec.endEpoch(1, gates.stats(), lm);
  CHECK(rec.rows().empty());
}

}  // namespace test_lm_audit
