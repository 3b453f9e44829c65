// diag/gate_audit and diag/spectral: statistics against hand-computed values on residuals whose gate is
// set so every beta is known, the measured |e_post|/|e_pre| against |1 - beta rho|, accumulation over
// batches against one audit of the concatenated batch, the net-level audit and its table, errors.
#include <array>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/diag/net_gate_audit.hpp"
#include "ddl/diag/spectral.hpp"

namespace test_diag {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;

namespace {

// Sets the gate to z = w c + b with the given w (1, d) and b; the other parameters keep their init.
void setGate(ddl::DeltaResidual<double>& r, const MatX<double>& w, double b) {
  r.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    if (name == "gate.weight") p.value = w;
    if (name == "gate.bias") p.value(0, 0) = b;
  });
}

double logit(double p) { return std::log(p / (1 - p)); }

struct Run {
  MatX<double> X, Xin, C, H, Y;
};

// One forward of r on the given C and H with random X (d, dv*N); Xin = X for dv = 1.
Run forward(ddl::DeltaResidual<double>& r, Index dv, const MatX<double>& C, const MatX<double>& H) {
  Run run;
  const Index d = H.rows(), N = H.cols();
  run.X = MatX<double>::Random(d, dv * N);
  run.Xin = dv == 1 ? run.X : MatX<double>::Random(d, N);
  run.C = C;
  run.H = H;
  r.forward(run.X, run.Xin, run.C, run.H, run.Y);
  return run;
}

// DeltaResidual options of a residual kind; every other option is the default.
ddl::DeltaResidualOptions residualOptionsOfKind(ddl::ResidualKind kind) {
  ddl::DeltaResidualOptions opt;
  opt.residual = kind;
  return opt;
}

// DeltaResidual options with the direction guard eps_k; every other option is the default.
ddl::DeltaResidualOptions residualOptionsWithEpsK(double epsK) {
  ddl::DeltaResidualOptions opt;
  opt.epsK = epsK;
  return opt;
}

}  // namespace

TEST_CASE("the audit uses the residual's cap: at betaMax 1 a pinned gate is saturated projection, never reflection",
          "[diag][gate_audit][beta_max]") {
  // Gates pinned near the top of their range (z = 12: sigma = 1 - 6e-6) with unit directions (|k~| >> eps).
  const Index d = 4, N = 6;
  MatX<double> H = MatX<double>::Random(d, N) + MatX<double>::Constant(d, N, 3.0);
  for (const double cap : {1.0, 2.0}) {
    CAPTURE(cap);
    ddl::DeltaResidualOptions opt;
    opt.betaMax = cap;
    opt.beta0 = cap / 2;
    ddl::DeltaResidual<double> r(d, 1, opt);
    ddl::Rng rng(5);
    r.init(rng);
    setGate(r, MatX<double>::Zero(1, d), 12.0);
    const Run run = forward(r, 1, MatX<double>::Random(d, N), H);
    const ddl::GateStats g = ddl::auditGate(r, run.Y);
    CHECK(g.betaCap == cap);
    CHECK(ddl_test::contains(ddl::formatGateSummary({g}, {"block 0"}),
                             cap == 1.0 ? "(beta = 1 sigma(z) in [0, 1];" : "(beta = 2 sigma(z) in [0, 2];"));
    CHECK(g.betaMax == Approx(cap).epsilon(1e-4));
    CHECK(g.saturated == N);  // beta > betaMax - 1e-3 at either cap
    if (cap == 1.0) {
      CHECK(g.regimeCount(ddl::DeltaRegime::Projection) == N);
      CHECK(g.regimeCount(ddl::DeltaRegime::Reflection) == 0);
      CHECK(g.regimeCount(ddl::DeltaRegime::PartialReflection) == 0);
      CHECK(g.lambdaMin >= 0);  // 1 - beta rho with beta rho <= 1: no negative eigenvalue
      CHECK(g.expectedRatioMean < 1e-4);  // |1 - beta rho| ~ 0: the write overwrites
    } else {
      CHECK(g.regimeCount(ddl::DeltaRegime::Reflection) == N);
      CHECK(g.lambdaMax < -0.99);
      CHECK(g.expectedRatioMean == Approx(1).margin(1e-4));  // |1 - beta rho| ~ 1: the mirror
    }
    REQUIRE(g.errorRatioMeasured());
    CHECK(g.errorRatioMaxDeviation < 1e-9);  // measured |e_post|/|e_pre| = |1 - beta rho| under the cap too
    // A gate at half its range is not saturated at cap 1 (0.5 < 1 - 1e-3), nor at cap 2.
    setGate(r, MatX<double>::Zero(1, d), 0.0);
    forward(r, 1, MatX<double>::Random(d, N), H);
    CHECK(ddl::auditGate(r).saturated == 0);
  }
  // One accumulator never mixes caps.
  ddl::DeltaResidualOptions one, two;
  one.betaMax = 1.0;
  one.beta0 = 0.5;
  ddl::DeltaResidual<double> r1(d, 1, one), r2(d, 1, two);
  ddl::Rng rng(6);
  r1.init(rng);
  r2.init(rng);
  forward(r1, 1, MatX<double>::Random(d, N), H);
  forward(r2, 1, MatX<double>::Random(d, N), H);
  ddl::GateAccumulator acc;
  acc.add(r1);
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([&] { acc.add(r2); }),
                           "this residual caps its gate at betaMax = 2 but the accumulator has seen betaMax = 1"));
}

TEST_CASE("constant gate beta0: beta, histogram, |k~| and rho match hand-computed values", "[diag][gate_audit]") {
  const auto norm = GENERATE(ddl::DirectionNorm::SqrtEps, ddl::DirectionNorm::AddEps);
  CAPTURE(ddl::toString(norm));
  std::srand(11);
  const Index d = 3, N = 5;
  ddl::DeltaResidualOptions opt;
  opt.norm = norm;
  opt.epsK = 1e-5;
  ddl::DeltaResidual<double> r(d, 1, opt);
  ddl::Rng rng(3);
  r.init(rng);
  const double beta0 = 0.5;
  setGate(r, MatX<double>::Zero(1, d), ddl::gateBiasFromBeta0(beta0));
  // |k~| per token: 5, 1, 2, 3e-5 (below 10 eps_k), 13
  MatX<double> H(d, N);
  H << 3, 0, 0, 3e-5, 5,  //
      4, 1, 0, 0, 12,     //
      0, 0, -2, 0, 0;
  const double kt[N] = {5, 1, 2, 3e-5, 13};
  const Run run = forward(r, 1, MatX<double>::Random(d, N), H);

  const ddl::GateStats g = ddl::auditGate(r);
  CHECK(g.tokens == N);
  CHECK(g.nonFinite == 0);
  CHECK(g.betaMean == Approx(beta0).epsilon(1e-12));
  CHECK(g.betaMin == Approx(beta0).epsilon(1e-12));
  CHECK(g.betaMax == Approx(beta0).epsilon(1e-12));
  REQUIRE(g.histogram.size() == 20);
  for (std::size_t b = 0; b < 20; ++b) CHECK(g.histogram[b] == (b == 5 ? N : 0));  // 0.5 in [0.5, 0.6)
  CHECK(g.saturated == 0);
  // regimes of b = beta rho: 0.5 rho with rho ~ 1 is a contraction, and so is 0.5 * 0.9 (|k~| = 3e-5)
  CHECK(g.regimeCount(ddl::DeltaRegime::Contraction) == N);
  Index regimeTotal = 0;
  for (Index c : g.regimes) regimeTotal += c;
  CHECK(regimeTotal == N);
  CHECK(g.norm == norm);
  CHECK(g.epsK == 1e-5);

  double ktSum = 0, rhoSum = 0, expSum = 0;
  for (double t : kt) {
    const double rho = norm == ddl::DirectionNorm::SqrtEps ? t * t / (t * t + 1e-10) : std::pow(t / (t + 1e-5), 2);
    ktSum += t;
    rhoSum += rho;
    expSum += std::abs(1 - beta0 * rho);
  }
  CHECK(g.kTildeMin == Approx(3e-5).epsilon(1e-9));  // sqrt(n^2 - eps^2) loses a few digits at |k~| ~ eps
  CHECK(g.kTildeMean == Approx(ktSum / N).epsilon(1e-12));
  CHECK(g.smallDirections == 1);
  CHECK(g.smallDirectionFraction() == Approx(0.2));
  CHECK(g.rhoMean == Approx(rhoSum / N).epsilon(1e-12));
  CHECK(g.expectedRatioMean == Approx(expSum / N).epsilon(1e-12));
  // no Y: the ratio is not measured
  CHECK_FALSE(g.errorRatioMeasured());
  CHECK(std::isnan(g.errorRatioMean));

  const ddl::GateStats gy = ddl::auditGate(r, run.Y);
  CHECK(gy.errorRatioTokens == N);
  CHECK(gy.errorRatioMaxDeviation < 1e-12);
  CHECK(gy.errorRatioMean == Approx(expSum / N).epsilon(1e-12));
}

TEST_CASE("constructed betas: saturation, regime counts and histogram bins", "[diag][gate_audit]") {
  std::srand(5);
  const Index d = 2;
  const std::vector<double> betas = {0.0005, 0.05, 0.95, 1.0, 1.05, 0.55, 1.55, 1.95, 1.9995, 1.25};
  const Index N = static_cast<Index>(betas.size());
  ddl::DeltaResidual<double> r(d, 1, ddl::DeltaResidualOptions{});
  ddl::Rng rng(4);
  r.init(rng);
  MatX<double> w(1, d);
  w << 1, 0;
  setGate(r, w, 0.0);
  MatX<double> C = MatX<double>::Random(d, N);
  for (Index t = 0; t < N; ++t) C(0, t) = logit(betas[static_cast<std::size_t>(t)] / 2);  // beta = 2 sigma(z)
  forward(r, 1, C, MatX<double>::Random(d, N));
  for (Index t = 0; t < N; ++t) REQUIRE(r.beta()(0, t) == Approx(betas[static_cast<std::size_t>(t)]).epsilon(1e-12));

  const ddl::GateStats g = ddl::auditGate(r);
  CHECK(g.tokens == N);
  CHECK(g.saturated == 2);       // 0.0005, 1.9995
  // the operator's taxonomy on beta rho (rho = 1 - 1e-10 or closer: no beta sits near a band edge)
  using R = ddl::DeltaRegime;
  CHECK(g.regimeCount(R::Identity) == 2);           // 0.0005, 0.05
  CHECK(g.regimeCount(R::Contraction) == 1);        // 0.55
  CHECK(g.regimeCount(R::Projection) == 3);         // 0.95, 1.0, 1.05
  CHECK(g.regimeCount(R::PartialReflection) == 2);  // 1.55, 1.25
  CHECK(g.regimeCount(R::Reflection) == 2);         // 1.95, 1.9995
  CHECK(g.regimeCount(R::Expansion) == 0);          // needs beta rho outside [0, 2]
  // every token is classified exactly as the operator of that token classifies itself
  std::array<Index, ddl::kDeltaRegimeCount> byOperator{};
  for (Index t = 0; t < N; ++t) {
    const ddl::VecX<double> k = r.directions().col(t);
    ++byOperator[static_cast<std::size_t>(ddl::deltaOperator(k, r.beta()(0, t)).regime())];
  }
  CHECK(g.regimes == byOperator);
  CHECK(g.saturatedFraction() == Approx(0.2));
  CHECK(g.regimeFraction(R::Projection) == Approx(0.3));
  double sum = 0;
  for (double b : betas) sum += b;
  CHECK(g.betaMean == Approx(sum / static_cast<double>(N)).epsilon(1e-12));
  CHECK(g.betaMin == Approx(0.0005).epsilon(1e-12));
  CHECK(g.betaMax == Approx(1.9995).epsilon(1e-12));
  std::vector<Index> expected(20, 0);
  expected[0] = 2;   // 0.0005, 0.05
  expected[5] = 1;   // 0.55
  expected[9] = 1;   // 0.95
  expected[10] = 2;  // 1.0, 1.05
  expected[12] = 1;  // 1.25
  expected[15] = 1;  // 1.55
  expected[19] = 2;  // 1.95, 1.9995
  CHECK(g.histogram == expected);

  // any bin count: the histogram holds every token
  const Index bins = GENERATE(1, 3, 7, 64);
  const ddl::GateStats gb = ddl::auditGate(r, bins);
  REQUIRE(gb.histogram.size() == static_cast<std::size_t>(bins));
  Index total = 0;
  for (Index c : gb.histogram) total += c;
  CHECK(total == N);
}

TEST_CASE("measured |e_post|/|e_pre| equals |1 - beta rho| on the real output (double)", "[diag][gate_audit]") {
  const auto seed = GENERATE(1u, 2u, 3u, 4u);
  const Index dv = GENERATE(1, 3);
  const double epsK = GENERATE(1e-5, 0.7);  // 0.7: a strong guard, rho well below 1
  CAPTURE(seed, dv, epsK);
  std::srand(seed);
  const Index d = 4, N = 9;
  ddl::DeltaResidual<double> r(d, dv, residualOptionsWithEpsK(epsK));
  ddl::Rng rng(seed);
  r.init(rng);
  // a spread of gates across [0, 2]
  setGate(r, MatX<double>::Random(1, d) * 3, 0.2);
  const Run run = forward(r, dv, MatX<double>::Random(d, N), MatX<double>::Random(d, N));
  const ddl::GateStats g = ddl::auditGate(r, run.Y);
  CHECK(g.errorRatioTokens == N);
  CHECK(g.errorRatioMaxDeviation < 1e-12);
  CHECK(g.errorRatioMean == Approx(g.expectedRatioMean).epsilon(1e-12));
  if (epsK > 0.1) CHECK(g.rhoMean < 0.95);

  // the check can fail: the input state is not the output
  const ddl::GateStats wrong = ddl::auditGate(r, run.X);
  CHECK(wrong.errorRatioMaxDeviation > 1e-3);
}

TEST_CASE("write-only control: gate and direction audited, no error-ratio identity", "[diag][gate_audit]") {
  std::srand(8);
  ddl::DeltaResidual<double> r(3, 1, residualOptionsOfKind(ddl::ResidualKind::WriteOnly));
  ddl::Rng rng(8);
  r.init(rng);
  const Run run = forward(r, 1, MatX<double>::Random(3, 6), MatX<double>::Random(3, 6));
  const ddl::GateStats g = ddl::auditGate(r, run.Y);
  CHECK(g.tokens == 6);
  CHECK(std::isfinite(g.betaMean));
  CHECK(std::isfinite(g.rhoMean));
  CHECK_FALSE(g.errorRatioMeasured());
  CHECK(std::isnan(g.expectedRatioMean));
}

TEST_CASE("tokens with a non-finite gate are counted apart and left out", "[diag][gate_audit]") {
  std::srand(13);
  const Index d = 3, N = 4;
  ddl::DeltaResidual<double> r(d, 1, ddl::DeltaResidualOptions{});
  ddl::Rng rng(13);
  r.init(rng);
  MatX<double> w(1, d);
  w << 1, 0, 0;
  setGate(r, w, ddl::gateBiasFromBeta0(1.5));
  MatX<double> C = MatX<double>::Zero(d, N);
  C(0, 2) = std::numeric_limits<double>::quiet_NaN();  // beta of token 2 is NaN
  const Run run = forward(r, 1, C, MatX<double>::Random(d, N));
  const ddl::GateStats g = ddl::auditGate(r, run.Y);
  CHECK(g.nonFinite == 1);
  CHECK(g.tokens == 3);
  CHECK(g.betaMean == Approx(1.5).epsilon(1e-12));
  CHECK(g.betaMax == Approx(1.5).epsilon(1e-12));
  CHECK(g.regimeCount(ddl::DeltaRegime::PartialReflection) == 3);  // beta = 1.5
  CHECK(g.errorRatioTokens == 3);
  CHECK(g.errorRatioMaxDeviation < 1e-12);
  CHECK(ddl_test::contains(ddl::formatGateSummary({g}), "[1 non-finite tokens skipped]"));
}

TEST_CASE("float residual (the training precision): the ratio identity holds to float rounding", "[diag][gate_audit]") {
  std::srand(17);
  const Index d = 16, dv = 2, N = 32;
  ddl::DeltaResidual<float> r(d, dv, ddl::DeltaResidualOptions{});
  ddl::Rng rng(17);
  r.init(rng);
  const MatX<float> X = MatX<float>::Random(d, dv * N), Xin = MatX<float>::Random(d, N);
  const MatX<float> C = MatX<float>::Random(d, N), H = MatX<float>::Random(d, N);
  MatX<float> Y;
  r.forward(X, Xin, C, H, Y);
  const ddl::GateStats g = ddl::auditGate(r, Y, 10);
  CHECK(g.tokens == N);
  CHECK(g.errorRatioTokens > N / 2);
  CHECK(g.errorRatioMaxDeviation < 1e-4);
  const auto s = ddl::spectralSummary(r, 3);
  CHECK(s.beta == Approx(static_cast<double>(r.beta()(0, 3))));
  CHECK(s.dv == dv);
}

TEST_CASE("accumulator over batches equals one audit of the concatenated batch", "[diag][gate_audit]") {
  std::srand(21);
  const Index d = 3, dv = 2, N1 = 4, N2 = 7, N = N1 + N2;
  ddl::DeltaResidual<double> r(d, dv, residualOptionsWithEpsK(0.3));
  ddl::Rng rng(21);
  r.init(rng);
  setGate(r, MatX<double>::Random(1, d) * 4, -0.3);
  const MatX<double> X = MatX<double>::Random(d, dv * N), Xin = MatX<double>::Random(d, N);
  const MatX<double> C = MatX<double>::Random(d, N), H = MatX<double>::Random(d, N);
  // columns [first, first + n) of every value channel of X
  auto channels = [&](Index first, Index n) {
    MatX<double> part(d, dv * n);
    for (Index j = 0; j < dv; ++j) part.middleCols(j * n, n) = X.middleCols(j * N + first, n);
    return part;
  };
  MatX<double> Y;
  ddl::GateAccumulator acc(13);
  r.forward(channels(0, N1), Xin.leftCols(N1), C.leftCols(N1), H.leftCols(N1), Y);
  acc.add(r, Y);
  r.forward(channels(N1, N2), Xin.rightCols(N2), C.rightCols(N2), H.rightCols(N2), Y);
  acc.add(r, Y);
  r.forward(X, Xin, C, H, Y);
  const ddl::GateStats whole = ddl::auditGate(r, Y, 13);
  const ddl::GateStats sum = acc.stats();

  CHECK(acc.tokens() == N);
  CHECK(sum.tokens == whole.tokens);
  CHECK(sum.histogram == whole.histogram);
  CHECK(sum.saturated == whole.saturated);
  CHECK(sum.regimes == whole.regimes);
  CHECK(sum.smallDirections == whole.smallDirections);
  CHECK(sum.errorRatioTokens == whole.errorRatioTokens);
  CHECK(sum.betaMean == Approx(whole.betaMean).epsilon(1e-12));
  CHECK(sum.betaMin == Approx(whole.betaMin).epsilon(1e-12));
  CHECK(sum.betaMax == Approx(whole.betaMax).epsilon(1e-12));
  CHECK(sum.kTildeMin == Approx(whole.kTildeMin).epsilon(1e-12));
  CHECK(sum.kTildeMean == Approx(whole.kTildeMean).epsilon(1e-12));
  CHECK(sum.rhoMean == Approx(whole.rhoMean).epsilon(1e-12));
  CHECK(sum.expectedRatioMean == Approx(whole.expectedRatioMean).epsilon(1e-12));
  CHECK(sum.errorRatioMean == Approx(whole.errorRatioMean).epsilon(1e-12));
  CHECK(sum.errorRatioMaxDeviation < 1e-12);

  // merge of two accumulators is the same as adding both batches to one
  ddl::GateAccumulator a(13), b(13);
  r.forward(channels(0, N1), Xin.leftCols(N1), C.leftCols(N1), H.leftCols(N1), Y);
  a.add(r, Y);
  r.forward(channels(N1, N2), Xin.rightCols(N2), C.rightCols(N2), H.rightCols(N2), Y);
  b.add(r, Y);
  a.merge(b);
  CHECK(a.stats().histogram == sum.histogram);
  CHECK(a.stats().betaMean == Approx(sum.betaMean).epsilon(1e-12));
  CHECK(a.stats().errorRatioTokens == sum.errorRatioTokens);

  acc.reset();
  CHECK(acc.tokens() == 0);
  CHECK(std::isnan(acc.stats().betaMean));
  CHECK(acc.bins() == 13);
}

TEST_CASE("audit errors name the function and the reason", "[diag][gate_audit][errors]") {
  std::srand(2);
  ddl::DeltaResidual<double> add(3, 1, residualOptionsOfKind(ddl::ResidualKind::Additive));
  ddl::Rng rng(1);
  add.init(rng);
  forward(add, 1, MatX<double>::Random(3, 2), MatX<double>::Random(3, 2));
  std::string msg = ddl_test::thrownMessage<ddl::Error>([&] { ddl::auditGate(add); });
  CHECK(ddl_test::contains(msg, "ddl::GateAccumulator::add"));
  CHECK(ddl_test::contains(msg, "additive"));
  msg = ddl_test::thrownMessage<ddl::ValueError>([&] { ddl::spectralSummary(add, 0); });
  CHECK(ddl_test::contains(msg, "ddl::spectralSummary"));
  CHECK(ddl_test::contains(msg, "additive"));

  ddl::DeltaResidual<double> fresh(3, 1, ddl::DeltaResidualOptions{});
  fresh.init(rng);
  msg = ddl_test::thrownMessage<ddl::Error>([&] { ddl::auditGate(fresh); });
  CHECK(ddl_test::contains(msg, "ddl::GateAccumulator::add"));
  CHECK(ddl_test::contains(msg, "no forward"));
  msg = ddl_test::thrownMessage<ddl::Error>([&] { ddl::spectralSummary(fresh, 0, 1); });
  CHECK(ddl_test::contains(msg, "no forward"));

  const Run run = forward(fresh, 1, MatX<double>::Random(3, 4), MatX<double>::Random(3, 4));
  msg = ddl_test::thrownMessage<ddl::ShapeError>([&] { ddl::auditGate(fresh, MatX<double>(run.Y.leftCols(3))); });
  CHECK(ddl_test::contains(msg, "Y (the output of the audited forward) has shape (3, 3), expected (3, 4)"));
  msg = ddl_test::thrownMessage<ddl::ValueError>([&] { ddl::auditGate(fresh, 0); });
  CHECK(ddl_test::contains(msg, "bins must be >= 1, got 0"));
  msg = ddl_test::thrownMessage<ddl::ValueError>([&] { ddl::spectralSummary(fresh, 4, 1); });
  CHECK(ddl_test::contains(msg, "token 4 is outside [0, 4)"));

  // a forward that threw half-way (zero direction with eps_k = 0) leaves caches of two batch sizes
  ddl::DeltaResidual<double> broken(3, 1, residualOptionsWithEpsK(0));
  broken.init(rng);
  forward(broken, 1, MatX<double>::Random(3, 4), MatX<double>::Random(3, 4));
  CHECK_THROWS_AS(forward(broken, 1, MatX<double>::Random(3, 2), MatX<double>::Zero(3, 2)), ddl::MathError);
  msg = ddl_test::thrownMessage<ddl::ShapeError>([&] { ddl::auditGate(broken); });
  CHECK(ddl_test::contains(msg, "directionNorms has shape (1, 2), expected (1, 4)"));

  // an accumulator refuses to mix direction guards or histogram sizes
  ddl::DeltaResidual<double> r2(3, 1, residualOptionsWithEpsK(0.5));
  r2.init(rng);
  forward(r2, 1, MatX<double>::Random(3, 4), MatX<double>::Random(3, 4));
  ddl::GateAccumulator acc;
  acc.add(fresh);
  msg = ddl_test::thrownMessage<ddl::ValueError>([&] { acc.add(r2); });
  CHECK(ddl_test::contains(msg, "eps_k = 0.5"));
  ddl::GateAccumulator acc7(7);
  msg = ddl_test::thrownMessage<ddl::ValueError>([&] { acc.merge(acc7); });
  CHECK(ddl_test::contains(msg, "20 bins here, 7 in the other"));
}

TEST_CASE("auditNet, NetGateAccumulator and formatGateSummary", "[diag][gate_audit][net]") {
  const ddl::DeltaNetConfig cfg = ddl_test::deltaNetConfig(5, 3, 4, 3, 6);
  std::srand(9);
  const Index N = 8;
  const MatX<double> X = MatX<double>::Random(cfg.inputDim, N);
  MatX<double> logits;

  ddl::DeltaNet<double> net(cfg, 7);
  net.forward(X, logits);
  const std::vector<ddl::GateStats> stats = ddl::auditNet(net);
  REQUIRE(stats.size() == 3);
  for (const auto& g : stats) {
    CHECK(g.tokens == N);
    CHECK(g.betaMean == Approx(1.0).margin(0.5));  // beta0 = 1 at init, weights small
  }

  // the block states, rebuilt with copies of the net's blocks (same parameters, same forward)
  std::vector<MatX<double>> states(4);
  MatX<double> Win, bin;
  net.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    if (name == "input.weight") Win = p.value;
    if (name == "input.bias") bin = p.value;
  });
  states[0] = Win * X;
  states[0].colwise() += bin.col(0);
  for (std::size_t i = 0; i < 3; ++i) {
    ddl::DeltaBlock<double> copy = net.blocks()[i];
    copy.forward(states[i], states[i + 1]);
  }
  const std::vector<ddl::GateStats> measured = ddl::auditNet(net, states);
  REQUIRE(measured.size() == 3);
  for (const auto& g : measured) {
    CHECK(g.errorRatioTokens == N);
    CHECK(g.errorRatioMaxDeviation < 1e-12);
  }
  std::vector<MatX<double>> tooFew(states.begin(), states.end() - 1);
  const std::string msg = ddl_test::thrownMessage<ddl::ShapeError>([&] { ddl::auditNet(net, tooFew); });
  CHECK(ddl_test::contains(msg, "got 3 states, expected depth + 1 = 4"));

  ddl::NetGateAccumulator epoch;
  epoch.add(net);
  net.forward(X.leftCols(3), logits);
  epoch.add(net);
  const std::vector<ddl::GateStats> total = epoch.stats();
  REQUIRE(total.size() == 3);
  for (const auto& g : total) CHECK(g.tokens == N + 3);

  const std::string table = ddl::formatGateSummary(stats);
  CAPTURE(table);
  std::istringstream lines(table);
  std::string line;
  int blockLines = 0;
  while (std::getline(lines, line))
    if (line.rfind("block ", 0) == 0 && line.find("tokens") == std::string::npos) ++blockLines;
  CHECK(blockLines == 3);
  CHECK(ddl_test::contains(table, "block 0 "));
  CHECK(ddl_test::contains(table, "block 2 "));
  CHECK(ddl_test::contains(table, "%sat"));

  ddl::DeltaNetConfig plain = cfg;
  plain.block.residual.residual = ddl::ResidualKind::Additive;
  ddl::DeltaNet<double> baseline(plain, 7);
  baseline.forward(X, logits);
  CHECK(ddl::auditNet(baseline).empty());
  ddl::NetGateAccumulator none;
  none.add(baseline);
  CHECK(none.stats().empty());
  CHECK(ddl_test::contains(ddl::formatGateSummary({}), "no gated blocks"));
}

TEST_CASE("spectral summary of a frozen operator", "[diag][spectral]") {
  SECTION("operators built directly: identity, projector, reflection, contraction") {
    ddl::VecX<double> k(3);
    k << 2, -1, 2;
    k /= 3;  // unit
    const auto id = ddl::spectralSummary(ddl::deltaOperator(k, 0.0), 2);
    CHECK(id.kEigenvalue == Approx(1));
    CHECK(id.isOrthogonal);
    CHECK(id.conditionNumber == Approx(1));
    CHECK(id.regime == ddl::DeltaRegime::Identity);
    const auto refl = ddl::spectralSummary(ddl::deltaOperator(k, 2.0), 3);
    CHECK(refl.kEigenvalue == Approx(-1));
    CHECK(refl.determinant == Approx(-1));
    CHECK(refl.determinantOnState == Approx(-1));  // (-1)^3
    CHECK(refl.isOrthogonal);
    CHECK_FALSE(refl.singular);
    CHECK(refl.regime == ddl::DeltaRegime::Reflection);
    const auto proj = ddl::spectralSummary(ddl::deltaOperator(k, 1.0), 1);
    CHECK(proj.singular);
    CHECK(std::isinf(proj.conditionNumber));
    CHECK(proj.determinant == Approx(0).margin(1e-15));
    CHECK_FALSE(proj.isOrthogonal);
    CHECK(proj.regime == ddl::DeltaRegime::Projection);
    const auto half = ddl::spectralSummary(ddl::deltaOperator(k, 0.5), 3);
    CHECK(half.conditionNumber == Approx(2));
    CHECK(half.determinantOnState == Approx(0.125));
    CHECK(half.regime == ddl::DeltaRegime::Contraction);
    CHECK(ddl_test::contains(ddl::formatSpectralSummary(proj), "singular"));
    CHECK(ddl_test::contains(ddl::formatSpectralSummary(refl), "regime=reflection"));
    const std::string msg = ddl_test::thrownMessage<ddl::ValueError>([&] { ddl::spectralSummary(ddl::deltaOperator(k, 0.5), 0); });
    CHECK(ddl_test::contains(msg, "dv must be >= 1, got 0"));
  }
  SECTION("one token of a residual: guarded k reports 1 - beta rho") {
    std::srand(4);
    const Index d = 3, dv = 2, N = 3;
    ddl::DeltaResidual<double> r(d, dv, residualOptionsWithEpsK(1.0));  // |k~| = 1 gives rho = 1/2
    ddl::Rng rng(4);
    r.init(rng);
    MatX<double> w(1, d);
    w << 1, 0, 0;
    setGate(r, w, 0.0);
    MatX<double> C = MatX<double>::Random(d, N);
    C.row(0) << logit(0.25), 0, logit(0.9);  // beta = 0.5, 1, 1.8
    MatX<double> H(d, N);
    H << 1, 0, 3,  //
        0, 1, 4,   //
        0, 0, 0;   // |k~| = 1, 1, 5
    forward(r, dv, C, H);
    const auto s0 = ddl::spectralSummary(r, 0);
    CHECK(s0.d == d);
    CHECK(s0.dv == dv);
    CHECK(s0.beta == Approx(0.5).epsilon(1e-12));
    CHECK(s0.rho == Approx(0.5).epsilon(1e-12));
    CHECK(s0.kEigenvalue == Approx(0.75).epsilon(1e-12));
    CHECK(s0.determinantOnState == Approx(0.75 * 0.75).epsilon(1e-12));
    CHECK(s0.conditionNumber == Approx(1 / 0.75).epsilon(1e-12));
    CHECK(s0.regime == ddl::DeltaRegime::Contraction);  // effective gate beta rho = 0.25
    const auto s1 = ddl::spectralSummary(r, 1, 5);
    CHECK(s1.kEigenvalue == Approx(0.5).epsilon(1e-12));  // beta 1, rho 1/2: not a projector
    CHECK_FALSE(s1.singular);
    CHECK(s1.determinantOnState == Approx(std::pow(0.5, 5)).epsilon(1e-12));
    const auto s2 = ddl::spectralSummary(r, 2);
    const double rho2 = 25.0 / 26.0;
    CHECK(s2.kEigenvalue == Approx(1 - 1.8 * rho2).epsilon(1e-12));
    CHECK(s2.regime == ddl::classifyRegime(1.8 * rho2));
  }
}

}  // namespace test_diag
