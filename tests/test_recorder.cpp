// diag/recorder and diag/audit_file: every recorded statistic against an independent recomputation of
// the net in double from its parameters (not from the layers' caches), the measured |e_post|/|e_pre|
// against |1 - beta rho|, the frozen-operator spectrum against the DeltaOperator's, the stage and state
// mapping of a ConvDeltaNet, epochs and errors, and the CSV / JSON files read back field by field.
// The zero-cost property (outputs and allocations without a recorder) is in test_recorder_alloc.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/diag/audit_file.hpp"
#include "ddl/diag/recorder.hpp"
#include "ddl/nn/models/conv_delta_net.hpp"
#include "ddl/nn/models/delta_net.hpp"
#include "ddl/train/epoch_audit.hpp"
#include "ddl/train/trainer.hpp"

namespace test_recorder {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using Mat = Eigen::MatrixXd;

namespace {

std::string tmpPath(const std::string& name) { return std::string(DDL_TEST_TMPDIR) + "/recorder_" + name; }

std::map<std::string, Mat> paramsOf(ddl::DeltaNet<double>& net) {
  std::map<std::string, Mat> p;
  net.visitParams("", [&](const std::string& name, ddl::Param<double>& q) { p[name] = q.value; });
  return p;
}

double sigmoid(double z) { return 1 / (1 + std::exp(-z)); }
double gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

// What one block computes per token, recomputed from the parameters in double.
struct BlockRef {
  Mat X, Y;        // block input and output (d, dv*N)
  Mat Kt, K, V;    // k~ = h (d, N), k (d, N), v (dv, N)
  Eigen::RowVectorXd beta;
};

// The forward of a DeltaNet of preset "code" (dv = 1: SqrtEps, linear gate, v = 4 sigma(W_v x + b_v))
// or "paper" (any dv: free CC, v = W_v c + b_v), written out from docs/spec.md §2-§3 for the test.
std::vector<BlockRef> referenceForward(ddl::DeltaNet<double>& net, const Mat& input) {
  const ddl::DeltaNetConfig& cfg = net.config();
  const auto P = paramsOf(net);
  const Index N = input.cols(), d = cfg.d, dv = cfg.dv;
  const double epsK = cfg.block.residual.epsK;
  const bool write = cfg.block.residual.residual == ddl::ResidualKind::Delta;
  Mat x = P.at("input.weight") * input;
  x.colwise() += P.at("input.bias").col(0);
  Mat X(d, dv * N);
  for (Index j = 0; j < dv; ++j) X.middleCols(j * N, N) = x;  // repetition (no EC)
  std::vector<BlockRef> out;
  for (Index b = 0; b < cfg.depth; ++b) {
    const std::string pre = "blocks." + std::to_string(b) + ".";
    BlockRef r;
    r.X = X;
    Mat xin(d, N);
    if (dv == 1) {
      xin = X;
    } else {
      const Mat& W = P.at(pre + "compress.weight");  // (d, dv)
      xin.setZero();
      for (Index j = 0; j < dv; ++j) xin += (W.col(j).asDiagonal() * X.middleCols(j * N, N));
    }
    Mat c(d, N);
    for (Index t = 0; t < N; ++t)
      c.col(t) = P.at(pre + "norm.weight").col(0).cwiseProduct(xin.col(t)) /
                 std::sqrt(xin.col(t).squaredNorm() / static_cast<double>(d) + cfg.block.normEps);
    Mat a = P.at(pre + "mlp.fc1.weight") * c;
    a.colwise() += P.at(pre + "mlp.fc1.bias").col(0);
    a = a.unaryExpr([](double v) { return gelu(v); });
    r.Kt = P.at(pre + "mlp.fc2.weight") * a;
    r.Kt.colwise() += P.at(pre + "mlp.fc2.bias").col(0);
    r.K = r.Kt;
    for (Index t = 0; t < N; ++t) r.K.col(t) /= std::sqrt(r.Kt.col(t).squaredNorm() + epsK * epsK);
    const Mat z = P.at(pre + "delta.gate.weight") * c;
    r.beta = (z.array() + P.at(pre + "delta.gate.bias")(0, 0)).unaryExpr([](double v) { return 2 * sigmoid(v); });
    if (cfg.block.residual.value == ddl::ValueKind::SigmoidScaled) {
      r.V = P.at(pre + "delta.value.weight") * xin;
      r.V.colwise() += P.at(pre + "delta.value.bias").col(0);
      r.V = r.V.unaryExpr([](double v) { return 4 * sigmoid(v); });
    } else {
      r.V = P.at(pre + "delta.value.weight") * c;
      r.V.colwise() += P.at(pre + "delta.value.bias").col(0);
    }
    r.Y = X;
    for (Index t = 0; t < N; ++t)
      for (Index j = 0; j < dv; ++j) {
        const Index col = j * N + t;
        const double target = r.V(j, t) - (write ? r.K.col(t).dot(X.col(col)) : 0.0);
        r.Y.col(col) += r.beta(t) * target * r.K.col(t);
      }
    X = r.Y;
    out.push_back(r);
  }
  return out;
}

ddl::DeltaNetConfig smallConfig(const std::string& preset, Index dv, ddl::ResidualKind kind) {
  return ddl_test::withPreset(ddl_test::deltaNetConfig(5, 3, 6, 2, 7, dv), preset, kind);
}

// Spreads the gates over [0, 2] so that several regimes and both halves of the histogram are hit.
void spreadGates(ddl::DeltaNet<double>& net, unsigned seed) {
  std::srand(seed);
  net.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    if (name.find("gate.weight") != std::string::npos) p.value = Mat::Random(p.value.rows(), p.value.cols()) * 3;
    if (name.find("gate.bias") != std::string::npos) p.value(0, 0) = 0.1;
  });
}

bool sameNumber(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

}  // namespace

TEST_CASE("recorded statistics equal an independent recomputation of the net in double", "[recorder]") {
  struct Case {
    const char* preset;
    Index dv;
    ddl::ResidualKind kind;
  };
  const Case c = GENERATE(Case{"code", 1, ddl::ResidualKind::Delta}, Case{"paper", 1, ddl::ResidualKind::Delta},
                          Case{"paper", 3, ddl::ResidualKind::Delta}, Case{"code", 1, ddl::ResidualKind::WriteOnly},
                          Case{"paper", 2, ddl::ResidualKind::WriteOnly});
  CAPTURE(c.preset, c.dv, ddl::toString(c.kind));
  ddl::DeltaNet<double> net(smallConfig(c.preset, c.dv, c.kind), 5);
  spreadGates(net, 3);
  std::srand(17);
  const Index N1 = 11, N2 = 6;
  const Mat in1 = Mat::Random(5, N1) * 2, in2 = Mat::Random(5, N2) * 2;
  const Index bins = 10;
  ddl::RecorderOptions ro;
  ro.bins = bins;
  ro.spectralTokens = 3;
  ddl::AuditRecorder rec(ro);
  MatX<double> logits;
  net.forward(in1, logits);
  rec.observe(net);
  net.forward(in2, logits);
  rec.observe(net);
  rec.endEpoch(1, net);
  REQUIRE(rec.rows().size() == 2);

  const std::vector<BlockRef> ref1 = referenceForward(net, in1), ref2 = referenceForward(net, in2);
  const bool write = c.kind == ddl::ResidualKind::Delta;
  for (std::size_t b = 0; b < 2; ++b) {
    CAPTURE(b);
    const ddl::AuditRow& row = rec.rows()[b];
    CHECK(row.epoch == 1);
    CHECK(row.block == static_cast<Index>(b));
    CHECK(row.stage == 0);
    // the net's block states are the reference's (the second forward is the last one)
    CHECK((net.blockInput(b) - ref2[b].X).cwiseAbs().maxCoeff() < 1e-12);
    CHECK((net.blockOutput(b) - ref2[b].Y).cwiseAbs().maxCoeff() < 1e-12);

    // independent sums over both batches
    Index tokens = 0, saturated = 0, small = 0;
    std::vector<Index> hist(bins, 0);
    std::array<Index, ddl::kDeltaRegimeCount> regimes{};
    double betaSum = 0, betaMin = 1e300, betaMax = -1e300, ktSum = 0, ktMin = 1e300, rhoSum = 0;
    double lamSum = 0, lamMin = 1e300, lamMax = -1e300, expSum = 0, ratioSum = 0, ratioDev = 0;
    double vSum = 0, vMax = 0, pSum = 0, pMax = 0;
    for (const BlockRef* r : {&ref1[b], &ref2[b]}) {
      const Index N = r->beta.size();
      for (Index t = 0; t < N; ++t) {
        ++tokens;
        const double beta = r->beta(t), rho = r->K.col(t).squaredNorm(), eff = beta * rho;
        betaSum += beta;
        betaMin = std::min(betaMin, beta);
        betaMax = std::max(betaMax, beta);
        ++hist[static_cast<std::size_t>(std::min<Index>(bins - 1, static_cast<Index>(beta / 2 * bins)))];
        if (beta < 1e-3 || beta > 2 - 1e-3) ++saturated;
        // docs/spec.md §6's thresholds on beta rho, and the two bands between them
        const int reg = eff < 0.1 ? 0 : std::abs(eff - 1) < 0.1 ? 2 : eff > 1.9 ? 4 : eff < 1 ? 1 : 3;
        ++regimes[static_cast<std::size_t>(reg)];
        const double kt = r->Kt.col(t).norm();
        ktSum += kt;
        ktMin = std::min(ktMin, kt);
        if (kt < 10 * 1e-5) ++small;
        rhoSum += rho;
        double v2 = 0, p2 = 0, pre2 = 0, post2 = 0;
        for (Index j = 0; j < c.dv; ++j) {
          const double p = r->K.col(t).dot(r->X.col(j * N + t)), v = r->V(j, t);
          const double post = r->K.col(t).dot(r->Y.col(j * N + t)) - v;
          v2 += v * v;
          p2 += p * p;
          pre2 += (p - v) * (p - v);
          post2 += post * post;
        }
        vSum += std::sqrt(v2);
        vMax = std::max(vMax, std::sqrt(v2));
        pSum += std::sqrt(p2);
        pMax = std::max(pMax, std::sqrt(p2));
        const double lambda = 1 - eff;
        lamSum += lambda;
        lamMin = std::min(lamMin, lambda);
        lamMax = std::max(lamMax, lambda);
        expSum += std::abs(lambda);
        const double ratio = std::sqrt(post2 / pre2);
        ratioSum += ratio;
        ratioDev = std::max(ratioDev, std::abs(ratio - std::abs(lambda)));
      }
    }
    const double n = static_cast<double>(tokens);
    const ddl::GateStats& g = row.gate;
    CHECK(g.tokens == tokens);
    CHECK(g.nonFinite == 0);
    CHECK(g.betaMean == Approx(betaSum / n).epsilon(1e-12));
    CHECK(g.betaMin == Approx(betaMin).epsilon(1e-12));
    CHECK(g.betaMax == Approx(betaMax).epsilon(1e-12));
    CHECK(g.histogram == hist);
    CHECK(g.saturated == saturated);
    CHECK(g.regimes == regimes);
    CHECK(g.norm == ddl::DirectionNorm::SqrtEps);
    CHECK(g.epsK == 1e-5);
    CHECK(g.kTildeMin == Approx(ktMin).epsilon(1e-9));
    CHECK(g.kTildeMean == Approx(ktSum / n).epsilon(1e-9));
    CHECK(g.smallDirections == small);
    CHECK(g.rhoMean == Approx(rhoSum / n).epsilon(1e-12));
    CHECK(g.valueNormMean == Approx(vSum / n).epsilon(1e-12));
    CHECK(g.valueNormMax == Approx(vMax).epsilon(1e-12));
    CHECK(g.readoutTokens == tokens);  // measured on the block input, also for the write-only control
    CHECK(g.readoutNormMean == Approx(pSum / n).epsilon(1e-10));
    CHECK(g.readoutNormMax == Approx(pMax).epsilon(1e-10));
    if (write) {
      CHECK(g.lambdaMean == Approx(lamSum / n).epsilon(1e-12).margin(1e-14));
      CHECK(g.lambdaMin == Approx(lamMin).epsilon(1e-12).margin(1e-14));
      CHECK(g.lambdaMax == Approx(lamMax).epsilon(1e-12).margin(1e-14));
      CHECK(g.expectedRatioMean == Approx(expSum / n).epsilon(1e-12));
      // the measured ratio is |1 - beta rho| to rounding, token by token
      CHECK(g.errorRatioTokens == tokens);
      CHECK(g.errorRatioMaxDeviation < 1e-12);
      CHECK(ratioDev < 1e-12);
      CHECK(g.errorRatioMean == Approx(ratioSum / n).epsilon(1e-12));
      CHECK(g.errorRatioMean == Approx(g.expectedRatioMean).epsilon(1e-12));
    } else {
      CHECK_FALSE(g.errorRatioMeasured());
      CHECK(std::isnan(g.lambdaMean));
      CHECK(std::isnan(g.expectedRatioMean));
    }
    Index regimeTotal = 0;
    for (Index r : g.regimes) regimeTotal += r;
    CHECK(regimeTotal == tokens);

    // spectrum of the frozen block on the sample tokens t_i = i N / 3 of the last forward
    const ddl::SpectralSample& s = row.spectral;
    if (!write) {
      CHECK(s.tokens == 0);
      CHECK(std::isnan(s.eigenvalueError));
      continue;
    }
    REQUIRE(s.tokens == 3);
    double sLamMin = 1e300, sLamMax = -1e300, normMax = 0, orthMax = 0, condMax = 0;
    for (Index i = 0; i < 3; ++i) {
      const Index t = i * N2 / 3;
      const double lambda = 1 - ref2[b].beta(t) * ref2[b].K.col(t).squaredNorm();
      sLamMin = std::min(sLamMin, lambda);
      sLamMax = std::max(sLamMax, lambda);
      normMax = std::max(normMax, std::max(1.0, std::abs(lambda)));
      orthMax = std::max(orthMax, std::abs(lambda * lambda - 1));
      condMax = std::max(condMax, std::max(1.0, std::abs(lambda)) / std::min(1.0, std::abs(lambda)));
      // and the dense operator of the reference, decomposed independently, has that spectrum
      const Mat A = Mat::Identity(6, 6) - ref2[b].beta(t) * ref2[b].K.col(t) * ref2[b].K.col(t).transpose();
      const Eigen::VectorXd ev = Eigen::SelfAdjointEigenSolver<Mat>(A).eigenvalues();
      CHECK(std::abs(ev.minCoeff() - std::min(1.0, lambda)) < 1e-12);
      CHECK(std::abs(ev.maxCoeff() - std::max(1.0, lambda)) < 1e-12);
    }
    CHECK(s.lambdaMin == Approx(sLamMin).epsilon(1e-12).margin(1e-14));
    CHECK(s.lambdaMax == Approx(sLamMax).epsilon(1e-12).margin(1e-14));
    CHECK(s.eigenvalueError < 1e-12);
    CHECK(s.asymmetry < 1e-15);
    CHECK(s.normPredicted == Approx(normMax).epsilon(1e-12));
    CHECK(s.normMeasured == Approx(normMax).epsilon(1e-12));
    CHECK(s.conditionPredicted == Approx(condMax).epsilon(1e-9));
    CHECK(s.conditionMeasured == Approx(condMax).epsilon(1e-9));
    CHECK(s.determinantError < 1e-12);
    CHECK(s.orthogonalityPredicted == Approx(orthMax).epsilon(1e-12).margin(1e-14));
    CHECK(s.orthogonalityMeasured == Approx(orthMax).epsilon(1e-10).margin(1e-13));
    CHECK(s.singular == 0);
  }
}

TEST_CASE("frozen-operator spectrum: the measured Jacobian sees projection and reflection", "[recorder][spectral]") {
  // gates pinned near beta = 1 (projector onto k-perp) and beta = 2 (Householder mirror)
  const double beta0 = GENERATE(1.0, 1.999999);
  CAPTURE(beta0);
  ddl::DeltaResidualOptions opt;
  opt.beta0 = beta0;
  const Index d = 5, N = 4;
  ddl::DeltaResidual<double> r(d, 1, opt);
  ddl::Rng rng(2);
  r.init(rng);
  r.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    if (name == "gate.weight") p.value.setZero();
  });
  std::srand(4);
  const Mat X = Mat::Random(d, N), H = Mat::Random(d, N) * 3;
  Mat Y;
  r.forward(X, X, Mat::Random(d, N), H, Y);
  const ddl::SpectralSample s = ddl::sampleSpectrum(r, 10);
  CHECK(s.tokens == N);  // at most the tokens of the forward
  CHECK(s.eigenvalueError < 1e-12);
  CHECK(s.determinantError < 1e-12);
  if (beta0 == 1.0) {
    CHECK(std::abs(s.lambdaMax) < 1e-9);  // rho = 1 - eps^2/|h|^2
    CHECK(s.conditionMeasured > 1e8);
    CHECK(s.orthogonalityMeasured == Approx(1.0).epsilon(1e-8));
  } else {
    CHECK(s.lambdaMin == Approx(-1.0).epsilon(1e-5));
    CHECK(s.orthogonalityMeasured < 1e-5);
    CHECK(s.normMeasured == Approx(1.0).epsilon(1e-12));
  }
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([&] { ddl::sampleSpectrum(r, -1); }),
                           "tokens must be >= 0, got -1"));
}

TEST_CASE("ConvDeltaNet: rows carry the stage, block states map through the transitions", "[recorder][conv]") {
  const ddl::ConvDeltaNetConfig cfg = ddl_test::convNetConfig(2, 6, 6, 3, {4, 6}, {2, 1}, GENERATE(1, 2));
  CAPTURE(cfg.dv);
  ddl::ConvDeltaNet<double> net(cfg, 3);
  std::srand(6);
  const Mat X = Mat::Random(cfg.inputDim(), 3);
  MatX<double> logits;
  net.forward(X, logits);
  ddl::AuditRecorder rec;
  rec.observe(net);
  rec.endEpoch(1, net);
  REQUIRE(rec.rows().size() == 3);
  const Index stages[] = {0, 0, 1};
  for (std::size_t b = 0; b < 3; ++b) {
    CAPTURE(b);
    const ddl::AuditRow& row = rec.rows()[b];
    CHECK(row.stage == stages[b]);
    CHECK(row.block == static_cast<Index>(b));
    // the recorded error ratio is measured on blockInput/blockOutput; it can only hold when they are the
    // real input and output of block b (a state off by one through a transition breaks it)
    CHECK(row.gate.errorRatioTokens == row.gate.tokens);
    CHECK(row.gate.errorRatioMaxDeviation < 1e-12);
    const ddl::GateStats fromCache = ddl::auditGate(net.blocks()[b].residual(), 20);  // readout = v - discrepancy
    CHECK(row.gate.readoutNormMean == Approx(fromCache.readoutNormMean).epsilon(1e-12));
    CHECK(row.spectral.tokens == 4);
    CHECK(row.spectral.eigenvalueError < 1e-12);
    const Index w = cfg.widths[static_cast<std::size_t>(stages[b])];
    CHECK(net.blockInput(b).rows() == w);
    CHECK(net.blockOutput(b).rows() == w);
  }
  // a state of a transition is not a block input: the wrong pairing is detectable
  ddl::GateAccumulator wrong;
  wrong.add(net.blocks()[2].residual(), net.blockInput(2), net.blockInput(2));
  CHECK(wrong.stats().errorRatioMaxDeviation > 1e-3);
}

TEST_CASE("recorder epochs: sums restart, additive nets give no rows, errors name the cause", "[recorder]") {
  ddl::DeltaNet<double> net(smallConfig("code", 1, ddl::ResidualKind::Delta), 1);
  std::srand(8);
  const Mat X = Mat::Random(5, 9);
  MatX<double> logits;
  ddl::AuditRecorder rec;
  net.forward(X, logits);
  rec.observe(net);
  rec.observe(net);
  rec.endEpoch(1, net);
  net.forward(X.leftCols(4), logits);
  rec.observe(net);
  rec.endEpoch(2, net);
  REQUIRE(rec.rows().size() == 4);
  CHECK(rec.rows()[0].gate.tokens == 18);
  CHECK(rec.rows()[2].epoch == 2);
  CHECK(rec.rows()[2].gate.tokens == 4);
  std::string msg = ddl_test::thrownMessage<ddl::Error>([&] { rec.endEpoch(3, net); });
  CHECK(ddl_test::contains(msg, "ddl::AuditRecorder::endEpoch"));
  CHECK(ddl_test::contains(msg, "epoch 3: no forward was observed"));
  msg = ddl_test::thrownMessage<ddl::ShapeError>([&] { rec.endEpoch(3, std::vector<ddl::GateStats>(1), net); });
  CHECK(ddl_test::contains(msg, "statistics of 1 blocks for a net with 2 gated blocks"));
  // statistics gathered elsewhere (the Trainer's evaluation) give the same row as observing
  ddl::NetGateAccumulator acc;
  acc.add(net);
  rec.endEpoch(3, acc.stats(), net);
  CHECK(rec.rows().size() == 6);
  CHECK(rec.rows()[4].gate.histogram == rec.rows()[2].gate.histogram);
  CHECK(rec.rows()[4].gate.errorRatioMean == rec.rows()[2].gate.errorRatioMean);
  // a resumed run keeps the epochs it does not repeat
  ddl::AuditRecorder resumed;
  resumed.restore(rec.rows(), 2);
  CHECK(resumed.rows().size() == 4);

  ddl::DeltaNet<double> plain(smallConfig("code", 1, ddl::ResidualKind::Additive), 1);
  plain.forward(X, logits);
  ddl::AuditRecorder none;
  none.observe(plain);
  none.endEpoch(1, plain);
  CHECK(none.rows().empty());

  ddl::RecorderOptions bad;
  bad.bins = 0;
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([&] { ddl::AuditRecorder r(bad); }), "bins must be >= 1"));
}

TEST_CASE("audit CSV and JSON hold every field and read back exactly", "[recorder][audit_file]") {
  ddl::DeltaNet<double> net(smallConfig("paper", 2, ddl::ResidualKind::Delta), 4);
  spreadGates(net, 9);
  std::srand(10);
  MatX<double> logits;
  ddl::RecorderOptions ro;
  ro.bins = 7;
  ddl::AuditRecorder rec(ro);
  for (int e = 1; e <= 2; ++e) {
    net.forward(Mat::Random(5, 10), logits);
    rec.observe(net);
    rec.endEpoch(e, net);
  }
  std::vector<ddl::AuditRow> rows = rec.rows();
  // non-finite values survive too: NaN (not measured) and an infinite condition number
  rows[1].gate.errorRatioMean = std::numeric_limits<double>::quiet_NaN();
  rows[1].spectral.conditionPredicted = std::numeric_limits<double>::infinity();
  rows[1].gate.norm = ddl::DirectionNorm::AddEps;
  std::filesystem::create_directories(DDL_TEST_TMPDIR);
  const std::string json = tmpPath("audit.json"), csv = tmpPath("audit.csv");
  ddl::writeAuditJson(json, rows);
  ddl::writeAuditCsv(csv, rows);

  const std::vector<ddl::AuditRow> back = ddl::readAuditJson(json);
  REQUIRE(back.size() == rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(i);
    CHECK(back[i].gate.histogram == rows[i].gate.histogram);
    CHECK(back[i].gate.norm == rows[i].gate.norm);
    std::vector<double> a, b;
    ddl::detail::visitAuditFields(rows[i], [&](const char*, const auto& v) { a.push_back(static_cast<double>(v)); });
    ddl::detail::visitAuditFields(back[i], [&](const char*, const auto& v) { b.push_back(static_cast<double>(v)); });
    REQUIRE(a.size() == b.size());
    for (std::size_t f = 0; f < a.size(); ++f) {
      CAPTURE(f, a[f], b[f]);
      CHECK(sameNumber(a[f], b[f]));
    }
  }

  // CSV: header of the documented columns, one line per row, every number back to the same double
  std::ifstream in(csv);
  std::string line;
  std::vector<std::vector<std::string>> table;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    table.push_back(cells);
  }
  REQUIRE(table.size() == rows.size() + 1);
  const std::vector<std::string> cols = ddl::auditCsvColumns(7);
  CHECK(table[0] == cols);
  CHECK(cols.back() == "beta_hist_6");
  CHECK(std::count(cols.begin(), cols.end(), "regime_partial_reflection") == 1);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(i);
    const std::vector<std::string>& cells = table[i + 1];
    REQUIRE(cells.size() == cols.size());
    std::map<std::string, std::string> byName;
    for (std::size_t k = 0; k < cols.size(); ++k) byName[cols[k]] = cells[k];
    ddl::detail::visitAuditFields(rows[i], [&](const char* name, const auto& v) {
      CAPTURE(name, byName[name]);
      CHECK(sameNumber(std::strtod(byName[name].c_str(), nullptr), static_cast<double>(v)));
    });
    CHECK(byName["k_norm"] == ddl::toString(rows[i].gate.norm));
    for (std::size_t h = 0; h < 7; ++h)
      CHECK(std::stoll(byName["beta_hist_" + std::to_string(h)]) == rows[i].gate.histogram[h]);
  }
  CHECK(table[2][std::find(cols.begin(), cols.end(), "spectral_condition_predicted") - cols.begin()] == "inf");
  CHECK(table[2][std::find(cols.begin(), cols.end(), "error_ratio_mean") - cols.begin()] == "nan");

  // atomic: no temporary left behind; a missing folder is an IoError naming the file
  for (const auto& e : std::filesystem::directory_iterator(DDL_TEST_TMPDIR))
    CHECK(e.path().filename().string().find("recorder_audit.json.tmp") == std::string::npos);
  CHECK_THROWS_AS(ddl::writeAuditCsv(tmpPath("no/such/dir/audit.csv"), rows), ddl::IoError);
  std::ofstream(tmpPath("notaudit.json")) << "{\"format\": \"other\"}";
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::IoError>([&] { ddl::readAuditJson(tmpPath("notaudit.json")); }),
                           "not a ddl audit file"));
  // Fields of the wrong JSON type are IoErrors too, not nlohmann's type_error.
  std::ofstream(tmpPath("numformat.json")) << "{\"format\": 3, \"rows\": []}";
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::IoError>([&] { ddl::readAuditJson(tmpPath("numformat.json")); }),
                           "not a ddl audit file"));
  std::ofstream(tmpPath("strversion.json")) << "{\"format\": \"ddl-audit\", \"version\": \"1\", \"rows\": []}";
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::IoError>([&] { ddl::readAuditJson(tmpPath("strversion.json")); }),
                           "unsupported version \"1\""));
  // A version nested 200 000 levels crashed the message's dump; nesting is limited (core/json_text.hpp).
  std::ofstream(tmpPath("deepversion.json")) << "{\"format\": \"ddl-audit\", \"rows\": [], \"version\": "
                                             << std::string(200000, '[') << std::string(200000, ']') << "}";
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::IoError>([&] { ddl::readAuditJson(tmpPath("deepversion.json")); }),
                           "JSON nested deeper than 128 levels"));
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::IoError>([&] { ddl::readAuditJson(tmpPath("missing.json")); }),
                           "cannot open"));
  std::vector<ddl::AuditRow> mixed = rows;
  mixed[0].gate.histogram.push_back(0);
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([&] { ddl::writeAuditJson(json, mixed); }),
                           "histograms of 8 and 7 bins"));
}

TEST_CASE("auditEveryEpoch: files after every epoch, the onEpoch before it still called, resume keeps rows",
          "[recorder][trainer]") {
  // Gaussian blobs: class c has its mean at +3 on feature c
  auto blobs = [](Index n, std::uint64_t seed) {
    ddl::Rng rng(seed);
    ddl::Dataset<float> d;
    d.numClasses = 3;
    d.shape = ddl::ImageShape{1, 1, 8};
    d.images.resize(8, n);
    d.labels.resize(static_cast<std::size_t>(n));
    for (Index j = 0; j < n; ++j) {
      const int y = static_cast<int>(rng.below(3));
      d.labels[static_cast<std::size_t>(j)] = y;
      for (Index i = 0; i < 8; ++i) d.images(i, j) = static_cast<float>(rng.normal() + (i == y ? 3.0 : 0.0));
    }
    return d;
  };
  const ddl::Dataset<float> train = blobs(64, 1), test = blobs(40, 2);
  const ddl::DeltaNetConfig cfg = ddl_test::deltaNetConfig(8, 3, 8, 2, 16);
  ddl::TrainerOptions opt;
  opt.epochs = 3;
  opt.batchSize = 32;
  opt.warmupSteps = 1;
  opt.threads = 1;
  opt.outDir = tmpPath("trainer");
  std::filesystem::remove_all(opt.outDir);
  {
    ddl::DeltaNet<float> net(cfg, 2);
    ddl::Trainer<float> t(net, train, opt, nullptr, &test);
    int seen = 0;
    t.onEpoch = [&](const ddl::EpochMetrics& m) {
      ++seen;
      if (m.epoch == 1) throw std::runtime_error("stop after epoch 1");  // a crash after the audit files
    };
    ddl::AuditRecorder audit;
    ddl::auditEveryEpoch(t, t.gates(), net, audit, opt.outDir);
    CHECK_THROWS_WITH(t.run(), "stop after epoch 1");
    CHECK(seen == 1);
    const std::vector<ddl::AuditRow> rows = ddl::readAuditJson(opt.outDir + "/audit.json");
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].epoch == 1);
    CHECK(rows[0].gate.tokens == 40);  // the test set, as the Trainer evaluated it
    CHECK(rows[1].gate.errorRatioMeasured());
  }
  ddl::DeltaNet<float> net(cfg, 9);
  ddl::Trainer<float> t(net, train, opt, nullptr, &test);
  t.resume(t.checkpointPath());
  ddl::AuditRecorder audit;
  ddl::auditEveryEpoch(t, t.gates(), net, audit, opt.outDir);
  CHECK(audit.rows().size() == 2);  // epoch 1 from the file
  const ddl::EpochMetrics last = t.run();
  REQUIRE(audit.rows().size() == 6);
  const std::vector<ddl::AuditRow> rows = ddl::readAuditJson(opt.outDir + "/audit.json");
  REQUIRE(rows.size() == 6);
  for (std::size_t i = 0; i < 6; ++i) {
    CHECK(rows[i].epoch == static_cast<int>(i / 2 + 1));
    CHECK(rows[i].block == static_cast<Index>(i % 2));
  }
  // the last rows are the statistics the Trainer reported for its last epoch
  CHECK(rows[4].gate.betaMean == t.gates().stats()[0].betaMean);
  CHECK(rows[5].gate.histogram == t.gates().stats()[1].histogram);
  CHECK(last.extra.size() == 4);
  std::ifstream csv(opt.outDir + "/audit.csv");
  std::string line;
  int lines = 0;
  while (std::getline(csv, line)) ++lines;
  CHECK(lines == 7);
}

}  // namespace test_recorder
