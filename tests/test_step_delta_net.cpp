// The depth-as-time net (nn/blocks/step_delta_block.hpp, nn/models/step_delta_net.hpp): central-difference
// checks in double of every parameter and the input for each residual kind and gate cap, on shapes down to
// d = 1, one sample and one output; the inference forward; equal shared parameters across kinds of one
// seed; the clamp; refusals.
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fd_check.hpp"
#include "fixtures.hpp"
#include "ddl/nn/models/step_delta_net.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_step_delta_net {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl::testing::numericGrad;

namespace {

struct Shape {
  Index prefix, stepWidth, steps, d, hidden, outputs, N;
};

ddl::StepDeltaNetConfig stepConfig(const Shape& s, ddl::ResidualKind kind, double betaMax) {
  ddl::StepDeltaNetConfig c;
  c.prefixDim = s.prefix;
  c.stepWidth = s.stepWidth;
  c.steps = s.steps;
  c.d = s.d;
  c.outputs = s.outputs;
  c.block.hidden = s.hidden;
  c.block.residual.residual = kind;
  c.block.residual.betaMax = betaMax;
  c.block.residual.beta0 = betaMax / 2;  // gate bias 0, as the claim protocol starts it
  return c;
}

MatX<double> randomMatrix(Index rows, Index cols, std::uint64_t seed) {
  std::mt19937 gen(static_cast<unsigned>(seed));
  std::normal_distribution<double> nd(0.0, 1.0);
  MatX<double> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = nd(gen);
  return m;
}

}  // namespace

TEST_CASE("StepDeltaNet backward matches central differences for every residual kind, gate cap, readout and tying",
          "[nn][step_delta_net][grad]") {
  const std::vector<Shape> shapes = {
      {3, 2, 3, 4, 5, 3, 4},  // a prefix, several features and samples
      {0, 1, 2, 1, 2, 1, 1},  // no prefix (x_0 = b_0), d = 1, one output, one sample
      {2, 3, 1, 1, 1, 2, 2},  // one step, d = 1
  };
  for (const Shape& s : shapes)
    for (auto kind : {ddl::ResidualKind::Delta, ddl::ResidualKind::WriteOnly, ddl::ResidualKind::Additive})
      for (double betaMax : {1.0, 2.0})
      for (auto readout : {ddl::StepReadout::Final, ddl::StepReadout::EveryStep})
      for (bool tied : {false, true}) {
        CAPTURE(s.prefix, s.stepWidth, s.steps, s.d, s.outputs, s.N, ddl::toString(kind), betaMax,
                ddl::toString(readout), tied);
        ddl::StepDeltaNetConfig config = stepConfig(s, kind, betaMax);
        config.readout = readout;
        config.tied = tied;
        if (s.d == 1) {
          // One feature: RMSNorm is x / sqrt(x^2 + eps) and k = h / sqrt(h^2 + eps_k), steps of width
          // sqrt(eps) near 0 that central differences cannot follow at the default eps; larger eps keep
          // the same formulas smooth at the step h = 1e-6.
          config.block.normEps = config.finalNormEps = 0.5;
          config.block.residual.epsK = 0.5;
        }
        // One sample of one feature: the tiny gradients' rounding at h = 1e-6 reaches 2e-6 relative, while
        // the truncation error at h = 1e-4 (order h^2) stays far below the tolerance.
        const double h = s.d == 1 ? 1e-4 : 1e-6;
        ddl::StepDeltaNet<double> net(config, 7);
        ddl_test::perturbSmallParams(net, 11);
        MatX<double> X = randomMatrix(net.inputDim(), s.N, 3);
        const MatX<double> R = randomMatrix(s.outputs, net.readouts() * s.N, 5);
        MatX<double> out, dX;
        auto loss = [&] {
          net.forward(X, out);
          return (out.array() * R.array()).sum();
        };
        loss();
        ddl::zeroGrad(net);
        net.backward(R, &dX);
        FD_CHECK(dX, numericGrad(X, loss, h));
        std::vector<std::string> names;
        net.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
          CAPTURE(name);
          names.push_back(name);
          FD_CHECK(p.grad, numericGrad(p.value, loss, h));
        });
        CHECK(names.front() == (s.prefix > 0 ? "input.weight" : "start.bias"));
        CHECK(names.back() == "head.bias");
      }
}

TEST_CASE("StepDeltaNet names its parameters per block", "[nn][step_delta_net]") {
  ddl::StepDeltaNet<double> net(stepConfig({3, 2, 2, 4, 5, 3, 1}, ddl::ResidualKind::Delta, 2.0), 1);
  const auto params = ddl_test::namedParams(net);
  for (const char* name : {"input.weight", "input.bias", "blocks.0.step.weight", "blocks.1.step.weight",
                           "blocks.1.norm.weight", "blocks.1.mlp.fc1.weight", "blocks.1.delta.gate.weight",
                           "blocks.1.delta.value.weight", "norm.weight", "head.weight"}) {
    CAPTURE(name);
    CHECK(params.count(name) == 1);
  }
  CHECK(params.count("blocks.0.step.bias") == 0);  // the step projection has no bias
  CHECK(params.at("blocks.0.step.weight")->value.rows() == 4);
  CHECK(params.at("blocks.0.step.weight")->value.cols() == 2);
}

TEST_CASE("StepDeltaNet forwardInference gives forward's output and leaves backward's caches alone",
          "[nn][step_delta_net][inference]") {
  const Shape s{3, 2, 3, 4, 5, 3, 6};
  ddl::StepDeltaNet<double> net(stepConfig(s, ddl::ResidualKind::Delta, 2.0), 2);
  const MatX<double> X = randomMatrix(net.inputDim(), s.N, 1), other = randomMatrix(net.inputDim(), 2, 9);
  const MatX<double> R = randomMatrix(s.outputs, s.N, 4);
  MatX<double> out, outInf, scratch;
  net.forward(X, out);
  ddl::zeroGrad(net);
  net.backward(R);
  const auto grads = ddl_test::paramGrads(net);
  net.forwardInference(X, outInf);
  CHECK(outInf == out);
  net.forward(X, out);
  net.forwardInference(other, scratch);  // a different batch between forward and backward
  ddl::zeroGrad(net);
  net.backward(R);
  CHECK(ddl_test::checkGradsEqual(net, grads) == grads.size());
}

TEST_CASE("StepDeltaNet's every-step readout reads each state: its last block is the final readout",
          "[nn][step_delta_net][readout]") {
  const Shape s{3, 2, 4, 4, 5, 3, 5};
  ddl::StepDeltaNetConfig config = stepConfig(s, ddl::ResidualKind::Delta, 2.0);
  ddl::StepDeltaNet<double> last(config, 4);
  config.readout = ddl::StepReadout::EveryStep;
  ddl::StepDeltaNet<double> every(config, 4);
  CHECK(every.readouts() == s.steps);
  const MatX<double> X = randomMatrix(every.inputDim(), s.N, 6);
  MatX<double> outLast, outEvery, outInf;
  last.forward(X, outLast);
  every.forward(X, outEvery);
  REQUIRE(outEvery.cols() == s.steps * s.N);
  CHECK(outEvery.rightCols(s.N) == outLast);
  every.forwardInference(X, outInf);
  CHECK(outInf == outEvery);
  // Block t reads x_t: a net of t steps with the same parameters (steps 1..t of the same columns) reads it last.
  for (Index t = 1; t < s.steps; ++t) {
    ddl::StepDeltaNetConfig shorter = stepConfig({3, 2, t, 4, 5, 3, 5}, ddl::ResidualKind::Delta, 2.0);
    ddl::StepDeltaNet<double> prefix(shorter, 4);
    const auto from = ddl_test::namedParams(every);
    prefix.visitParams("", [&](const std::string& name, ddl::Param<double>& p) { p.value = from.at(name)->value; });
    MatX<double> out;
    prefix.forward(X.topRows(prefix.inputDim()), out);
    CAPTURE(t);
    CHECK(out.isApprox(outEvery.middleCols((t - 1) * s.N, s.N), 1e-14));
  }
  MatX<double> wrong = MatX<double>::Zero(s.outputs, s.N);
  CHECK_THROWS_AS(every.backward(wrong), ddl::ShapeError);
}

TEST_CASE("A tied StepDeltaNet is the untied net with block 0's cell in every block",
          "[nn][step_delta_net][tied]") {
  const Shape s{3, 2, 3, 4, 5, 3, 4};
  ddl::StepDeltaNetConfig config = stepConfig(s, ddl::ResidualKind::Delta, 2.0);
  ddl::StepDeltaNet<double> untied(config, 8);
  config.tied = true;
  ddl::StepDeltaNet<double> tied(config, 8);
  const auto named = ddl_test::namedParams(tied);
  CHECK(named.count("blocks.0.mlp.fc1.weight") == 1);
  CHECK(named.count("blocks.2.step.weight") == 1);
  CHECK(named.count("blocks.1.mlp.fc1.weight") == 0);
  CHECK(named.count("blocks.2.delta.gate.weight") == 0);
  CHECK(ddl::numParams(tied) < ddl::numParams(untied));
  ddl_test::perturbSmallParams(tied, 3);
  // The untied net with every block's cell set to the tied net's block 0 and the same P_t, input and head.
  const auto from = ddl_test::namedParams(tied);
  untied.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    std::string key = name;
    if (name.rfind("blocks.", 0) == 0 && name.find(".step.") == std::string::npos)
      key = "blocks.0" + name.substr(name.find('.', 7));
    p.value = from.at(key)->value;
  });
  const MatX<double> X = randomMatrix(tied.inputDim(), s.N, 2), R = randomMatrix(s.outputs, s.N, 3);
  MatX<double> a, b;
  tied.forward(X, a);
  untied.forward(X, b);
  CHECK(a == b);
  ddl::zeroGrad(tied);
  ddl::zeroGrad(untied);
  tied.backward(R);
  untied.backward(R);
  // block 0's cell gradient in the tied net is the sum over the untied net's blocks.
  const auto u = ddl_test::namedParams(untied);
  const auto& g = from.at("blocks.0.mlp.fc2.weight")->grad;
  const MatX<double> sum = u.at("blocks.0.mlp.fc2.weight")->grad + u.at("blocks.1.mlp.fc2.weight")->grad +
                           u.at("blocks.2.mlp.fc2.weight")->grad;
  CHECK(g.isApprox(sum, 1e-13));
  CHECK(from.at("blocks.1.step.weight")->grad == u.at("blocks.1.step.weight")->grad);
  ddl::zeroGrad(tied);  // a second backward accumulates from zero: nothing was left in blocks 1..L-1
  tied.forward(X, a);
  tied.backward(R);
  CHECK(g.isApprox(sum, 1e-13));
}

TEST_CASE("StepDeltaNet kinds of one seed start with equal shared parameters", "[nn][step_delta_net][init]") {
  const Shape s{3, 2, 3, 4, 5, 3, 1};
  ddl::StepDeltaNet<double> delta(stepConfig(s, ddl::ResidualKind::Delta, 2.0), 5);
  ddl::StepDeltaNet<double> capped(stepConfig(s, ddl::ResidualKind::Delta, 1.0), 5);
  ddl::StepDeltaNet<double> additive(stepConfig(s, ddl::ResidualKind::Additive, 2.0), 5);
  const auto d = ddl_test::namedParams(delta), c = ddl_test::namedParams(capped), a = ddl_test::namedParams(additive);
  for (const auto& [name, p] : a) {
    CAPTURE(name);
    CHECK(d.at(name)->value == p->value);
  }
  for (const auto& [name, p] : c) {
    CAPTURE(name);
    CHECK(d.at(name)->value == p->value);  // the caps draw alike: only beta's range differs
  }
  CHECK(d.size() > a.size());
  ddl::StepDeltaNet<double> again(stepConfig(s, ddl::ResidualKind::Delta, 2.0), 99);
  again.init(5);
  CHECK(ddl_test::bitIdentical(ddl_test::paramValues(again), ddl_test::paramValues(delta)));
}

TEST_CASE("StepDeltaNet clamps beta per block at evaluation", "[nn][step_delta_net][clamp]") {
  const Shape s{3, 2, 3, 4, 5, 3, 50};
  ddl::StepDeltaNet<double> net(stepConfig(s, ddl::ResidualKind::Delta, 2.0), 3);
  const MatX<double> X = 3 * randomMatrix(net.inputDim(), s.N, 2);
  MatX<double> before, after;
  net.forwardInference(X, before);
  REQUIRE(net.blocks()[1].residual().beta().maxCoeff() > 1.0);  // the start beta0 = 1 spreads both ways
  net.setBetaClamp(1, 1.0);
  net.forwardInference(X, after);
  CHECK(net.blocks()[1].residual().beta().maxCoeff() <= 1.0);
  CHECK(net.blocks()[0].residual().beta().maxCoeff() > 1.0);
  CHECK(after != before);
  net.setBetaClamp(1, std::numeric_limits<double>::infinity());
  net.forwardInference(X, after);
  CHECK(after == before);
  CHECK_THROWS_AS(net.setBetaClamp(3, 1.0), ddl::ValueError);
}

TEST_CASE("StepDeltaNet refuses bad configurations and inputs by name", "[nn][step_delta_net][errors]") {
  ddl::StepDeltaNetConfig c = stepConfig({3, 2, 3, 4, 5, 3, 1}, ddl::ResidualKind::Delta, 2.0);
  c.steps = 0;
  CHECK_THROWS_AS(ddl::StepDeltaNet<double>(c), ddl::ValueError);
  c.steps = 3;
  c.block.residual.betaMax = 2.5;
  CHECK_THROWS_AS(ddl::StepDeltaNet<double>(c), ddl::ValueError);
  c.block.residual.betaMax = 2.0;
  ddl::StepDeltaNet<double> net(c, 1);
  MatX<double> out;
  CHECK_THROWS_AS(net.forward(MatX<double>::Zero(net.inputDim() + 1, 2), out), ddl::ShapeError);
  ddl::StepDeltaNet<double> fresh(c, 1);
  CHECK_THROWS_AS(fresh.backward(MatX<double>::Zero(3, 2)), ddl::Error);
  ddl::StepDeltaNetConfig additive = c;
  additive.block.residual.residual = ddl::ResidualKind::Additive;
  ddl::StepDeltaNet<double> plain(additive, 1);
  CHECK_THROWS_AS(plain.setBetaClamp(0, 1.0), ddl::ValueError);
}

}  // namespace test_step_delta_net
