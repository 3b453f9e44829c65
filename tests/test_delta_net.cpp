// The Delta stack (nn/delta_residual, compressor, expansion, delta_block, delta_net): central-difference
// checks in double of every input and named parameter, under every option combination, per preset and
// per residual kind; configuration errors with their messages; determinism.
#include <random>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "fd_check.hpp"
#include "ddl/nn/models/conv_delta_net_config.hpp"
#include "ddl/nn/models/delta_lm_config.hpp"
#include "ddl/nn/models/delta_net.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_delta_net {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl::testing::numericGrad;
using ddl::testing::relErr;

namespace {

// Every valid combination of the rewrite options (the additive baseline once).
std::vector<ddl::DeltaResidualOptions> allResidualOptions() {
  std::vector<ddl::DeltaResidualOptions> all;
  ddl::DeltaResidualOptions additive;
  additive.residual = ddl::ResidualKind::Additive;
  all.push_back(additive);
  for (auto kind : {ddl::ResidualKind::Delta, ddl::ResidualKind::WriteOnly})
    for (auto dir : {ddl::DirectionSource::BranchOutput, ddl::DirectionSource::AuxiliaryMlp})
      for (auto norm : {ddl::DirectionNorm::SqrtEps, ddl::DirectionNorm::AddEps})
        for (auto gate : {ddl::GateKind::Linear, ddl::GateKind::TwoLayerTanh})
          for (auto value : {ddl::ValueKind::SigmoidScaled, ddl::ValueKind::LinearOnC, ddl::ValueKind::FromBranch,
                             ddl::ValueKind::Constant}) {
            if (dir == ddl::DirectionSource::BranchOutput && value == ddl::ValueKind::FromBranch) continue;
            ddl::DeltaResidualOptions o;
            o.residual = kind;
            o.direction = dir;
            o.norm = norm;
            o.gate = gate;
            o.gateHidden = 3;
            o.value = value;
            o.auxHidden = 2;
            all.push_back(o);
          }
  // The authors' linear value on the raw input, last: the cases above keep their indices and so their shapes.
  for (auto kind : {ddl::ResidualKind::Delta, ddl::ResidualKind::WriteOnly})
    for (auto dir : {ddl::DirectionSource::BranchOutput, ddl::DirectionSource::AuxiliaryMlp})
      for (auto norm : {ddl::DirectionNorm::SqrtEps, ddl::DirectionNorm::AddEps})
        for (auto gate : {ddl::GateKind::Linear, ddl::GateKind::TwoLayerTanh}) {
          ddl::DeltaResidualOptions o;
          o.residual = kind;
          o.direction = dir;
          o.norm = norm;
          o.gate = gate;
          o.gateHidden = 3;
          o.value = ddl::ValueKind::LinearOnInput;
          o.auxHidden = 2;
          all.push_back(o);
        }
  return all;
}

std::string describe(const ddl::DeltaResidualOptions& o) {
  return std::string(ddl::toString(o.residual)) + "/" + ddl::toString(o.direction) + "/" + ddl::toString(o.norm) +
         "/" + ddl::toString(o.gate) + "/" + ddl::toString(o.value);
}

// Checks the analytic gradient of every named parameter of m against central differences of loss.
template <class Module, class Loss>
void checkParams(Module& m, Loss&& loss) {
  m.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    CAPTURE(name);
    FD_CHECK(p.grad, numericGrad(p.value, loss));
  });
}

// Checks DeltaResidual's backward (the inputs' and every parameter's gradient) against central differences
// of L = <W, Y> at the given operands; returns the forward's output Y.
MatX<double> checkResidualGradients(ddl::DeltaResidual<double>& res, MatX<double>& X, MatX<double>& Xin,
                                    MatX<double>& C, MatX<double>& H, const MatX<double>& W) {
  auto loss = [&] {
    MatX<double> Yl;
    res.forward(X, Xin, C, H, Yl);
    return (W.array() * Yl.array()).sum();
  };
  MatX<double> Y, dX, dXin, dC, dH;
  res.forward(X, Xin, C, H, Y);
  ddl::zeroGrad(res);
  res.backward(W, dX, dXin, dC, dH);
  FD_CHECK(dX, numericGrad(X, loss));
  FD_CHECK(dXin, numericGrad(Xin, loss));
  FD_CHECK(dC, numericGrad(C, loss));
  FD_CHECK(dH, numericGrad(H, loss));
  res.forward(X, Xin, C, H, Y);
  checkParams(res, loss);
  return Y;
}

}  // namespace

TEST_CASE("DeltaResidual backward matches central differences under every option", "[nn][delta_residual][grad]") {
  const auto options = allResidualOptions();
  REQUIRE(options.size() == 73);
  const auto which = GENERATE(range(0, 73));
  ddl::DeltaResidualOptions opt = options[static_cast<std::size_t>(which)];
  std::mt19937 rng(1000u + static_cast<unsigned>(which));
  std::srand(static_cast<unsigned>(which) + 1u);
  const Index d = std::uniform_int_distribution<int>(1, 5)(rng), N = std::uniform_int_distribution<int>(1, 3)(rng);
  // For d = 1 the normalized direction is +-1 up to eps^2: its true gradient (~eps^2) is below the
  // resolution of central differences, so d = 1 runs with a large guard, where the gradient is O(1).
  if (d == 1) opt.epsK = 0.5;
  const Index dv = which % 2 ? 1 : 3;
  CAPTURE(describe(opt), d, N, dv);
  ddl::DeltaResidual<double> res(d, dv, opt);
  ddl::Rng init(which);
  res.init(init);
  MatX<double> X = MatX<double>::Random(d, dv * N), Xin = MatX<double>::Random(d, N);
  MatX<double> C = MatX<double>::Random(d, N), H = MatX<double>::Random(d, N);
  const MatX<double> W = MatX<double>::Random(d, dv * N);
  checkResidualGradients(res, X, Xin, C, H, W);
}

TEST_CASE("Compressor and Expansion backward match central differences", "[nn][compressor][grad]") {
  const auto kind = GENERATE(ddl::CompressorKind::Free, ddl::CompressorKind::Structured);
  const Index dv = GENERATE(1, 3, 4);
  std::srand(static_cast<unsigned>(dv) * 7u);
  const Index d = 3, N = 2;
  CAPTURE(ddl::toString(kind), dv);
  ddl::Compressor<double> cc(d, dv, kind, 3);
  cc.visitParams("", [](const std::string&, ddl::Param<double>& p) { p.value += 0.3 * MatX<double>::Random(p.value.rows(), p.value.cols()); });
  MatX<double> X = MatX<double>::Random(d, dv * N), W = MatX<double>::Random(d, N), Y, dX;
  auto loss = [&] { MatX<double> Yl; cc.forward(X, Yl); return (W.array() * Yl.array()).sum(); };
  cc.forward(X, Y);
  cc.backward(W, dX);
  FD_CHECK(dX, numericGrad(X, loss));
  checkParams(cc, loss);

  ddl::Expansion<double> ec(d, dv, true);
  ec.visitParams("", [](const std::string&, ddl::Param<double>& p) { p.value += 0.3 * MatX<double>::Random(p.value.rows(), p.value.cols()); });
  MatX<double> x = MatX<double>::Random(d, N), We = MatX<double>::Random(d, dv * N), Xe, dx;
  auto lossE = [&] { MatX<double> Yl; ec.forward(x, Yl); return (We.array() * Yl.array()).sum(); };
  ec.forward(x, Xe);
  ec.backward(We, dx);
  FD_CHECK(dx, numericGrad(x, lossE));
  checkParams(ec, lossE);
}

TEST_CASE("Compressors start as the mean over channels, expansion as repetition", "[nn][compressor]") {
  const Index d = 2, dv = 4, N = 3;
  MatX<double> x = MatX<double>::Random(d, N), X, back;
  ddl::Expansion<double> ec(d, dv, true);
  ec.forward(x, X);
  for (auto kind : {ddl::CompressorKind::Free, ddl::CompressorKind::Structured}) {
    ddl::Compressor<double> cc(d, dv, kind, 3);
    cc.forward(X, back);
    CHECK(relErr(back, x) < 1e-15);
  }
}

TEST_CASE("DeltaBlock backward matches central differences", "[nn][delta_block][grad]") {
  const Index dv = GENERATE(1, 4);
  const auto preset = GENERATE(as<std::string>{}, "code", "paper", "v1");
  const auto seed = GENERATE(take(2, random(1u, 100000u)));
  std::mt19937 rng(seed);
  std::srand(seed);
  const Index d = std::uniform_int_distribution<int>(1, 6)(rng), N = std::uniform_int_distribution<int>(1, 3)(rng);
  CAPTURE(dv, preset, seed, d, N);
  ddl::DeltaNetConfig cfg;
  cfg.d = d;
  cfg.dv = dv;
  ddl::applyPreset(cfg, preset);
  cfg.block.hidden = 5;
  cfg.block.residual.gateHidden = 4;
  if (d == 1) cfg.block.residual.epsK = 0.5;  // see the DeltaResidual test
  ddl::DeltaBlock<double> blk(d, dv, cfg.block);
  ddl::Rng init(seed);
  blk.init(init);
  MatX<double> X = MatX<double>::Random(d, dv * N), W = MatX<double>::Random(d, dv * N), Y, dX;
  auto loss = [&] { MatX<double> Yl; blk.forward(X, Yl); return (W.array() * Yl.array()).sum(); };
  blk.forward(X, Y);
  ddl::zeroGrad(blk);
  blk.backward(W, dX);
  FD_CHECK(dX, numericGrad(X, loss));
  checkParams(blk, loss);
}

TEST_CASE("DeltaResidual and DeltaBlock backward at betaMax 1 and 2 match central differences, edge cases included",
          "[nn][delta_residual][delta_block][grad][beta_max]") {
  struct Shape {
    Index d, dv, N;
  };
  // d = 1 (with a large guard, see the DeltaResidual test), dv > 1, a batch of one token, several tokens.
  const Shape shape = GENERATE(Shape{1, 1, 1}, Shape{1, 3, 2}, Shape{4, 3, 1}, Shape{3, 1, 4}, Shape{5, 2, 3});
  const double cap = GENERATE(1.0, 2.0);
  // The gate's logit: beta near 0 (sigma(-4) ~ 0.018 of the cap), at the middle, near the cap (0.982 of
  // it). Further out the gate's and the value's gradients (~ sigma' and ~ beta) fall below what central
  // differences of step 1e-6 resolve to 1e-6.
  const double bias = GENERATE(-4.0, 0.0, 4.0);
  const bool tinyK = GENERATE(false, true);  // |k~| ~ eps_k: the guard bites and rho < 1
  const auto kind = GENERATE(ddl::ResidualKind::Delta, ddl::ResidualKind::WriteOnly);
  const Index d = shape.d, dv = shape.dv, N = shape.N;
  CAPTURE(d, dv, N, cap, bias, tinyK, ddl::toString(kind));
  std::srand(static_cast<unsigned>(d * 97 + dv * 13 + N + static_cast<Index>(cap) * 7 + static_cast<Index>(bias + 4)));
  ddl::DeltaResidualOptions opt;
  opt.residual = kind;
  opt.betaMax = cap;
  opt.beta0 = cap / 2;
  opt.epsK = d == 1 ? 0.5 : tinyK ? 1e-2 : 1e-5;
  const double hScale = tinyK && d > 1 ? 2e-2 : 1.0;  // d = 1 has its large guard instead
  const auto setBias = [&](auto& module) {
    module.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
      if (name.size() >= 9 && name.compare(name.size() - 9, 9, "gate.bias") == 0) p.value(0, 0) = bias;
    });
  };

  ddl::DeltaResidual<double> res(d, dv, opt);
  ddl::Rng init(7);
  res.init(init);
  setBias(res);
  MatX<double> X = MatX<double>::Random(d, dv * N), Xin = MatX<double>::Random(d, N);
  MatX<double> C = MatX<double>::Random(d, N), H = hScale * MatX<double>::Random(d, N);
  const MatX<double> W = MatX<double>::Random(d, dv * N);
  checkResidualGradients(res, X, Xin, C, H, W);
  for (Index n = 0; n < N; ++n) CHECK((res.beta()(0, n) > 0 && res.beta()(0, n) < cap));

  if (tinyK) return;  // the block computes its own h: the shapes and gates above suffice for it
  ddl::DeltaNetConfig cfg;
  cfg.d = d;
  cfg.dv = dv;
  cfg.block.hidden = 5;
  cfg.block.residual = opt;
  ddl::DeltaBlock<double> blk(d, dv, cfg.block);
  ddl::Rng initB(8);
  blk.init(initB);
  setBias(blk);
  MatX<double> Xb = MatX<double>::Random(d, dv * N), Wb = MatX<double>::Random(d, dv * N), Yb, dXb;
  auto lossB = [&] {
    MatX<double> Yl;
    blk.forward(Xb, Yl);
    return (Wb.array() * Yl.array()).sum();
  };
  blk.forward(Xb, Yb);
  ddl::zeroGrad(blk);
  blk.backward(Wb, dXb);
  FD_CHECK(dXb, numericGrad(Xb, lossB));
  checkParams(blk, lossB);
}

TEST_CASE("whole DeltaNet backward matches central differences per preset and residual kind", "[nn][delta_net][grad]") {
  const auto preset = GENERATE(as<std::string>{}, "code", "paper", "v1");
  const auto kind = GENERATE(ddl::ResidualKind::Delta, ddl::ResidualKind::WriteOnly, ddl::ResidualKind::Additive);
  const Index dv = GENERATE(1, 3);
  CAPTURE(preset, ddl::toString(kind), dv);
  ddl::DeltaNetConfig cfg = ddl_test::withPreset(ddl_test::deltaNetConfig(5, 3, 4, 2, /*hidden=*/6, dv), preset, kind);
  cfg.learnedExpansion = dv > 1;
  cfg.block.residual.gateHidden = 3;
  ddl::DeltaNet<double> net(cfg, 42);
  std::srand(5);
  // Move off the initial point: there all value channels are equal, and since RMSNorm is scale
  // invariant the compressor's true gradient is ~eps_norm, below central-difference resolution.
  net.visitParams("", [](const std::string&, ddl::Param<double>& p) {
    p.value += 0.2 * MatX<double>::Random(p.value.rows(), p.value.cols());
  });
  MatX<double> X = MatX<double>::Random(5, 3), W = MatX<double>::Random(3, 3), logits, dX;
  auto loss = [&] { MatX<double> l; net.forward(X, l); return (W.array() * l.array()).sum(); };
  net.forward(X, logits);
  ddl::zeroGrad(net);
  net.backward(W, &dX);
  FD_CHECK(dX, numericGrad(X, loss));
  checkParams(net, loss);
}

TEST_CASE("DeltaNet::init(seed) after training equals a new net of that seed, every parameter", "[nn][delta_net][init]") {
  // Before: init re-drew only Linear, gate and value parameters; RMSNorm gains, compressor and expansion
  // weights kept their trained values.
  ddl::DeltaNetConfig cfg = ddl_test::deltaNetConfig(5, 10, 4, 2, ddl_test::kDefaultHidden, 3);
  cfg.learnedExpansion = true;
  ddl::DeltaNet<float> net(cfg, 7);
  net.visitParams("", [](const std::string&, ddl::Param<float>& p) {  // "training" moved every entry
    p.value.array() += 0.25f;
    p.grad.setConstant(1.0f);
  });
  net.init(7);
  ddl::DeltaNet<float> fresh(cfg, 7);
  std::vector<ddl::MatX<float>> a, b, ga;
  net.visitParams("", [&](const std::string&, ddl::Param<float>& p) {
    a.push_back(p.value);
    ga.push_back(p.grad);
  });
  fresh.visitParams("", [&](const std::string&, ddl::Param<float>& p) { b.push_back(p.value); });
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(a[i] == b[i]);
    CHECK(ga[i].isZero(0));
  }
}

TEST_CASE("DeltaNet parameter names are stable and dotted", "[nn][delta_net]") {
  ddl::DeltaNetConfig cfg = ddl_test::deltaNetConfig(4, 10, 3, 2, ddl_test::kDefaultHidden, 2);
  cfg.learnedExpansion = true;
  ddl::DeltaNet<float> net(cfg, 1);
  std::vector<std::string> names;
  net.visitParams("", [&](const std::string& n, ddl::Param<float>&) { names.push_back(n); });
  const std::vector<std::string> expected = {
      "input.weight", "input.bias", "expand.weight",
      "blocks.0.compress.conv.weight", "blocks.0.compress.read.weight", "blocks.0.norm.weight",
      "blocks.0.mlp.fc1.weight", "blocks.0.mlp.fc1.bias", "blocks.0.mlp.fc2.weight", "blocks.0.mlp.fc2.bias",
      "blocks.0.delta.gate.weight", "blocks.0.delta.gate.bias", "blocks.0.delta.value.weight",
      "blocks.0.delta.value.bias",
      "blocks.1.compress.conv.weight", "blocks.1.compress.read.weight", "blocks.1.norm.weight",
      "blocks.1.mlp.fc1.weight", "blocks.1.mlp.fc1.bias", "blocks.1.mlp.fc2.weight", "blocks.1.mlp.fc2.bias",
      "blocks.1.delta.gate.weight", "blocks.1.delta.gate.bias", "blocks.1.delta.value.weight",
      "blocks.1.delta.value.bias",
      "readout.conv.weight", "readout.read.weight", "norm.weight", "head.weight", "head.bias"};
  CHECK(names == expected);
}

TEST_CASE("same seed gives bit-identical parameters, gate bias starts at logit(beta0/2)", "[nn][delta_net]") {
  ddl::DeltaNetConfig cfg = ddl_test::deltaNetConfig(6, 10, 4, 2, ddl_test::kDefaultHidden);
  cfg.block.residual.beta0 = 0.5;
  ddl::DeltaNet<float> a(cfg, 9), b(cfg, 9), c(cfg, 10);
  const std::vector<MatX<float>> pa = ddl_test::paramValues(a), pb = ddl_test::paramValues(b),
                                 pc = ddl_test::paramValues(c);
  CHECK(pa == pb);
  CHECK(pa != pc);
  a.visitParams("", [&](const std::string& n, ddl::Param<float>& p) {
    if (n.find("gate.bias") != std::string::npos) CHECK(p.value(0, 0) == Approx(std::log(0.25 / 0.75)));
  });
}

TEST_CASE("bad configurations throw ddl::Error naming the option", "[nn][errors]") {
  auto msgFor = [](auto edit) {
    return ddl_test::thrownMessage<ddl::Error>([&] {
      ddl::DeltaNetConfig cfg = ddl_test::deltaNetConfig(4, 10, 4, 1, ddl_test::kDefaultHidden);
      edit(cfg);
      ddl::DeltaNet<float> net(cfg, 0);
    });
  };
  CHECK(ddl_test::contains(msgFor([](ddl::DeltaNetConfig& c) { c.d = 0; }), "d must be >= 1, got 0"));
  CHECK(ddl_test::contains(msgFor([](ddl::DeltaNetConfig& c) { c.dv = 0; }), "dv must be >= 1, got 0"));
  CHECK(ddl_test::contains(msgFor([](ddl::DeltaNetConfig& c) { c.block.residual.epsK = -1; }), "epsK must be finite and >= 0, got -1"));
  CHECK(ddl_test::contains(msgFor([](ddl::DeltaNetConfig& c) { c.block.residual.beta0 = 2.5; }), "beta0 must lie in [0, 2], got 2.5"));
  CHECK(ddl_test::contains(msgFor([](ddl::DeltaNetConfig& c) { c.block.residual.beta0 = -0.1; }), "beta0 must lie in [0, 2]"));
  CHECK(ddl_test::contains(msgFor([](ddl::DeltaNetConfig& c) { c.block.residual.value = ddl::ValueKind::FromBranch; }),
                           "value 'from_branch' needs direction 'aux_mlp'"));
  const std::string presetMsg = ddl_test::thrownMessage<ddl::ValueError>([] {
    ddl::DeltaNetConfig c;
    ddl::applyPreset(c, "v2");
  });
  CHECK(ddl_test::contains(presetMsg, "ddl::applyPreset: unknown preset 'v2'"));
  ddl::DeltaNet<float> net(ddl_test::deltaNetConfig(4, 10, 4, 1, ddl_test::kDefaultHidden), 0);
  MatX<float> X = MatX<float>::Zero(5, 2), logits;
  const std::string shapeMsg = ddl_test::thrownMessage<ddl::ShapeError>([&] { net.forward(X, logits); });
  CHECK(ddl_test::contains(shapeMsg, "ddl::DeltaNet::forward: X has shape (5, 2), expected (4, any)"));
}

TEST_CASE("beta_max in the configurations: written only when not 2, absent reads 2, refused unless 0 < betaMax <= 2",
          "[nn][delta_net][beta_max]") {
  // The default writes no key, so every configuration and checkpoint of the paper's range keeps its bytes.
  ddl::DeltaNetConfig net = ddl_test::deltaNetConfig(12, 10, 8, 2, ddl_test::kDefaultHidden, 1);
  ddl::ConvDeltaNetConfig conv;
  ddl::DeltaLMConfig lm;
  CHECK(net.toKeyValues().count("beta_max") == 0);
  CHECK(conv.toKeyValues().count("beta_max") == 0);
  CHECK(lm.toKeyValues().count("beta_max") == 0);
  CHECK(ddl::DeltaNetConfig::fromKeyValues(net.toKeyValues()).block.residual.betaMax == 2.0);
  CHECK(ddl::ConvDeltaNetConfig::fromKeyValues(conv.toKeyValues()).block.residual.betaMax == 2.0);
  CHECK(ddl::DeltaLMConfig::fromKeyValues(lm.toKeyValues()).block.residual.betaMax == 2.0);
  // Another cap round-trips in all three.
  for (const double cap : {1.0, 0.25, 1.9999999999999998}) {
    CAPTURE(cap);
    net.block.residual.betaMax = conv.block.residual.betaMax = lm.block.residual.betaMax = cap;
    net.block.residual.beta0 = conv.block.residual.beta0 = lm.block.residual.beta0 = cap / 2;
    const ddl::KeyValues kn = net.toKeyValues(), kc = conv.toKeyValues(), kl = lm.toKeyValues();
    REQUIRE(kn.count("beta_max") == 1);
    CHECK(ddl::DeltaNetConfig::fromKeyValues(kn).block.residual.betaMax == cap);
    CHECK(ddl::DeltaNetConfig::fromKeyValues(kn).toKeyValues() == kn);
    CHECK(ddl::ConvDeltaNetConfig::fromKeyValues(kc).block.residual.betaMax == cap);
    CHECK(ddl::DeltaLMConfig::fromKeyValues(kl).block.residual.betaMax == cap);
    CHECK(ddl::DeltaLMConfig::fromKeyValues(kl).toKeyValues() == kl);
  }
  // A saved cap outside (0, 2], or not a number, is refused naming the key or the option.
  ddl::KeyValues bad = net.toKeyValues();
  for (const char* text : {"0", "2.5", "-1", "nan"}) {
    CAPTURE(text);
    bad["beta_max"] = text;
    bad["beta0"] = "0";
    const std::string m = ddl_test::thrownMessage<ddl::ValueError>([&] { ddl::DeltaNetConfig::fromKeyValues(bad); });
    CHECK((ddl_test::contains(m, "betaMax must lie in (0, 2]") || ddl_test::contains(m, "key 'beta_max'")));
  }
  // beta0 is checked against the cap: 1.5 fits 2 but not 1.
  bad["beta_max"] = "1";
  bad["beta0"] = "1.5";
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([&] { ddl::DeltaNetConfig::fromKeyValues(bad); }),
                           "beta0 must lie in [0, 1], got 1.5"));
}

TEST_CASE("config survives its key/value form", "[nn][delta_net]") {
  ddl::DeltaNetConfig cfg =
      ddl_test::withPreset(ddl_test::deltaNetConfig(12, 10, 8, 3, ddl_test::kDefaultHidden, 3), "v1", ddl::ResidualKind::WriteOnly);
  cfg.block.residual.beta0 = 0.3;
  const auto kv = cfg.toKeyValues();
  const ddl::DeltaNetConfig back = ddl::DeltaNetConfig::fromKeyValues(kv);
  CHECK(back.toKeyValues() == kv);
  CHECK(back.preset == ddl::Preset::V1);
  CHECK(back.block.residual.residual == ddl::ResidualKind::WriteOnly);
  CHECK(back.block.residual.beta0 == 0.3);
  auto broken = kv;
  broken.erase("dv");
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([&] { ddl::DeltaNetConfig::fromKeyValues(broken); }),
                           "missing key 'dv'"));
}

}  // namespace test_delta_net
