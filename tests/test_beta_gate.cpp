// The gate as one object (nn/layers/beta_gate.hpp): every form's names in configurations and checkpoints,
// its parameters, its start from beta0, its backward against central differences in double (with the
// default cap 2 and a lower one), the default cap's bits equal to ops/gate.hpp's, bad options.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fd_check.hpp"
#include "ddl/nn/layers/beta_gate.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_beta_gate {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::BetaGate;
using ddl::GateKind;
using ddl::GateOptions;
using ddl::Index;
using ddl::MatX;
using ddl::Param;
using ddl::RowX;

const GateKind kAllKinds[] = {GateKind::Linear, GateKind::TwoLayerTanh};

std::map<std::string, std::vector<Index>> shapesOf(BetaGate<double>& g) {
  std::map<std::string, std::vector<Index>> out;
  g.visitParams("gate", [&](const std::string& name, Param<double>& p) { out[name] = p.shape; });
  return out;
}

TEST_CASE("every gate form has a name that parses back and PyTorch's parameter names", "[nn][gate]") {
  for (GateKind k : kAllKinds) CHECK(ddl::parseGateKind(ddl::toString(k)) == k);
  CHECK(std::string(ddl::toString(GateKind::Linear)) == "linear");
  CHECK(std::string(ddl::toString(GateKind::TwoLayerTanh)) == "two_layer_tanh");
  const std::string msg = ddl_test::thrownMessage<ddl::ValueError>([] { ddl::parseGateKind("tanh"); });
  CHECK(ddl_test::contains(msg, "ddl::parseGateKind: unknown value 'tanh', expected one of linear, two_layer_tanh"));

  GateOptions opt;
  opt.hidden = 3;
  BetaGate<double> linear(5, opt);
  CHECK(shapesOf(linear) == std::map<std::string, std::vector<Index>>{{"gate.weight", {1, 5}}, {"gate.bias", {1}}});
  opt.kind = GateKind::TwoLayerTanh;
  BetaGate<double> twoLayer(5, opt);
  CHECK(shapesOf(twoLayer) == std::map<std::string, std::vector<Index>>{
                                  {"gate.fc1.weight", {3, 5}}, {"gate.fc2.weight", {1, 3}}, {"gate.fc2.bias", {1}}});

  // gateTensors (what a checkpoint holds, known before building) is the walk's list, in its order.
  for (GateKind k : kAllKinds) {
    opt.kind = k;
    BetaGate<double> g(5, opt);
    std::vector<std::string> walked, listed;
    g.visitParams("gate", [&](const std::string& name, Param<double>&) { walked.push_back(name); });
    for (const ddl::GateTensor& t : ddl::gateTensors(5, opt)) {
      listed.push_back("gate." + std::string(t.name));
      CHECK(shapesOf(g)[listed.back()] == t.shape);
    }
    CHECK(walked == listed);
  }
}

TEST_CASE("the gate starts at beta0 of its cap and stays in (0, betaMax)", "[nn][gate]") {
  for (GateKind k : kAllKinds) {
    for (double betaMax : {2.0, 0.5}) {
      GateOptions opt;
      opt.kind = k;
      opt.hidden = 4;
      opt.betaMax = betaMax;
      opt.beta0 = 0.3 * betaMax;
      CAPTURE(ddl::toString(k), betaMax);
      BetaGate<double> g(6, opt);
      ddl::Rng rng(11);
      g.init(rng);
      g.visitParams("", [&](const std::string& name, Param<double>& p) {
        if (name == "bias" || name == "fc2.bias") CHECK(betaMax * ddl::stableSigmoid(p.value(0, 0)) == Approx(opt.beta0));
        if (name != "bias" && name != "fc2.bias") p.value.setZero();  // z = b: every token at beta0
      });
      BetaGate<double>::Tensors t;
      const MatX<double> C = MatX<double>::Random(6, 3);
      g.forward(C, t);
      for (Index n = 0; n < 3; ++n) CHECK(t.beta(0, n) == Approx(opt.beta0));
      MatX<double> Z(1, 2);
      Z << 40, -40;
      RowX<double> beta;
      ddl::gateFromLogits(Z, beta, betaMax);
      CHECK(beta(0, 0) <= betaMax);
      CHECK(beta(0, 0) > 0.99 * betaMax);
      CHECK(beta(0, 1) >= 0);
      CHECK(beta(0, 1) < 1e-10);
    }
  }
}

TEST_CASE("the gate's backward matches central differences for every form and cap", "[nn][gate][grad]") {
  const auto seed = GENERATE(take(4, random(1u, 1000000u)));
  std::mt19937 rng(seed);
  const Index d = std::uniform_int_distribution<int>(1, 7)(rng), N = std::uniform_int_distribution<int>(1, 5)(rng);
  for (GateKind k : kAllKinds) {
    for (double betaMax : {2.0, 0.7}) {
      GateOptions opt;
      opt.kind = k;
      opt.hidden = std::uniform_int_distribution<int>(1, 5)(rng);
      opt.betaMax = betaMax;
      opt.beta0 = 0.5 * betaMax;
      CAPTURE(seed, d, N, ddl::toString(k), betaMax);
      BetaGate<double> g(d, opt);
      ddl::Rng init(seed);
      g.init(init);
      MatX<double> C = MatX<double>::Random(d, N), dC;
      const RowX<double> Wl = RowX<double>::Random(1, N);  // L = <Wl, beta>
      const auto loss = [&] {
        BetaGate<double>::Tensors t;
        g.forward(C, t);
        return (Wl.array() * t.beta.array()).sum();
      };
      BetaGate<double>::Tensors t;
      g.forward(C, t);
      g.backward(C, t, Wl, dC);
      FD_CHECK(dC, ddl::testing::numericGrad(C, loss));
      g.visitParams("gate", [&](const std::string& name, Param<double>& p) {
        CAPTURE(name);
        FD_CHECK(p.grad, ddl::testing::numericGrad(p.value, loss));
      });
    }
  }
}

TEST_CASE("the clamp at evaluation caps beta, has zero slope where it binds, and matches differences", "[nn][gate][grad]") {
  const auto seed = GENERATE(take(4, random(1u, 1000000u)));
  std::mt19937 rng(seed);
  const Index d = std::uniform_int_distribution<int>(1, 6)(rng), N = std::uniform_int_distribution<int>(2, 8)(rng);
  for (GateKind k : kAllKinds) {
    GateOptions opt;
    opt.kind = k;
    opt.hidden = 3;
    CAPTURE(seed, d, N, ddl::toString(k));
    BetaGate<double> g(d, opt);
    ddl::Rng init(seed);
    g.init(init);
    MatX<double> C = 3 * MatX<double>::Random(d, N), dC;
    BetaGate<double>::Tensors t;
    g.forward(C, t);
    std::vector<double> sorted(t.beta.data(), t.beta.data() + N);
    std::sort(sorted.begin(), sorted.end());
    const double c = 0.5 * (sorted[N / 2 - 1] + sorted[N / 2]);  // binds for about half the tokens
    CAPTURE(c);
    const RowX<double> unclamped = t.beta;
    g.setClamp(c);
    CHECK(g.clamp() == c);
    g.forward(C, t);
    for (Index n = 0; n < N; ++n) CHECK(t.beta(0, n) == std::min(unclamped(0, n), c));
    const RowX<double> Wl = RowX<double>::Random(1, N);
    const auto loss = [&] {
      BetaGate<double>::Tensors tt;
      g.forward(C, tt);
      return (Wl.array() * tt.beta.array()).sum();
    };
    g.backward(C, t, Wl, dC);
    if (sorted[N / 2] - sorted[N / 2 - 1] > 1e-4) {  // no token within the differences' step of the kink
      FD_CHECK(dC, ddl::testing::numericGrad(C, loss));
      g.visitParams("gate", [&](const std::string& name, Param<double>& p) {
        CAPTURE(name);
        FD_CHECK(p.grad, ddl::testing::numericGrad(p.value, loss));
      });
    }
    g.setClamp(std::numeric_limits<double>::infinity());
    g.forward(C, t);
    CHECK(t.beta == unclamped);
  }
  BetaGate<double> g(3, GateOptions{});
  for (double bad : {0.0, -1.0, std::nan("")})
    CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([&] { g.setClamp(bad); }),
                             "ddl::BetaGate::setClamp: the clamp must be > 0"));
}

TEST_CASE("the gate with the default cap gives ops/gate.hpp's bits", "[nn][gate]") {
  GateOptions opt;
  BetaGate<float> g(6, opt);
  ddl::Rng rng(5);
  g.init(rng);
  MatX<float> w, b;
  g.visitParams("", [&](const std::string& name, Param<float>& p) { (name == "weight" ? w : b) = p.value; });
  const MatX<float> C = MatX<float>::Random(6, 9);
  RowX<float> Z, beta, dZ, dBeta = RowX<float>::Random(1, 9);
  ddl::linearGateLogits(w, b(0, 0), C, Z);
  ddl::gateFromLogits(Z, beta);
  BetaGate<float>::Tensors t;
  g.forward(C, t);
  CHECK(t.beta == beta);
  ddl::gateFromLogitsBackward(Z, dBeta, dZ);
  MatX<float> dC, dCRef, dw = MatX<float>::Zero(1, 6), db = MatX<float>::Zero(1, 1);
  ddl::linearGateLogitsBackward(w, C, dZ, dCRef, dw, db);
  g.backward(C, t, dBeta, dC);
  CHECK(dC == dCRef);
}

TEST_CASE("gate options out of range are rejected with their names", "[nn][gate][errors]") {
  const auto msgFor = [](auto change) {
    GateOptions opt;
    change(opt);
    return ddl_test::thrownMessage<ddl::ValueError>([&] { opt.validate("ddl::test"); });
  };
  CHECK(ddl_test::contains(msgFor([](GateOptions& o) { o.betaMax = 0; }), "ddl::test: betaMax must lie in (0, 2], got 0"));
  CHECK(ddl_test::contains(msgFor([](GateOptions& o) { o.betaMax = 2.5; }), "betaMax must lie in (0, 2], got 2.5"));
  CHECK(ddl_test::contains(msgFor([](GateOptions& o) { o.beta0 = 1.5, o.betaMax = 1; }),
                           "beta0 must lie in [0, 1], got 1.5"));
  CHECK(ddl_test::contains(msgFor([](GateOptions& o) { o.hidden = 0; }), "gateHidden must be >= 1, got 0"));
}

}  // namespace test_beta_gate
