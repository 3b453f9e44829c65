// The authors' Delta-write and initialisation options of their GPTConfig in DeltaLM (nn/models/delta_lm_config.hpp,
// docs/spec.md §8): the linear value on the raw compressor output (ddl_v_sigmoid = False), the constant value,
// the two-layer gate, beta's start, k's eps, the read vectors' start for CC and TC, separate TC / CC and EC
// kernels, and the initialisation (embedding_init_std, hidden_init_std_factor, init = authors). Every
// gradient against central differences in double (dv 1, dv > 1, batch 1), cached decoding against the full
// forward, the key-values with and without the new keys, and the refusals.
#include "eigen_guard.hpp"  // first: live allocation checks even with NDEBUG

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fd_check.hpp"
#include "fixtures.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_batch.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/nn/blocks/delta_residual.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_delta_lm_authors {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl::TokenLayout;
using ddl_test::contains;
using ddl_test::thrownMessage;
using ddl_test::randomTokenBatch;
using ddl_test::perturbSmallParams;
using ddl_test::backwardOfRandomReadout;

namespace {

struct AuthorsCase {
  std::string name;
  std::function<void(ddl::DeltaLMConfig&)> set;
};

// The small model of tests/fixtures.hpp (vocab 11, d 12, depth 2, context 6) of a variant, then the case's options.
ddl::DeltaLMConfig configOf(const std::string& variant, const std::function<void(ddl::DeltaLMConfig&)>& set) {
  ddl::DeltaLMConfig c = ddl_test::smallLMConfig(ddl_test::LmCase{variant});
  set(c);
  c.validate();
  return c;
}

struct Built {
  std::string name;
  ddl::DeltaLMConfig cfg;
};

std::vector<Built> authorsCases() {
  using ddl::DeltaLMConfig;
  using ddl::GateKind;
  using ddl::ValueKind;
  std::vector<Built> out;
  out.push_back({"dv1 linear_on_input", configOf("dv1", [](DeltaLMConfig& c) { c.block.residual.value = ValueKind::LinearOnInput; })});
  out.push_back({"cc dv3 linear_on_input", configOf("cc", [](DeltaLMConfig& c) {
                   c.dv = 3;
                   c.block.residual.value = ValueKind::LinearOnInput;
                 })});
  out.push_back({"tc-ec dv2 linear_on_input, TC K 3, EC K 2, read 0.4", configOf("tc-ec", [](DeltaLMConfig& c) {
                   c.dv = 2;
                   c.convKernel = 3;
                   c.inputEmbedKernel = 2;
                   c.block.compressorReadInit = 0.4;
                   c.block.residual.value = ValueKind::LinearOnInput;
                 })});
  out.push_back({"cc-ec dv4 two-layer gate, beta0 0.6, eps_k 1e-3", configOf("cc-ec", [](DeltaLMConfig& c) {
                   c.block.residual.gate = GateKind::TwoLayerTanh;
                   c.block.residual.gateHidden = 5;
                   c.block.residual.beta0 = 0.6;
                   c.block.residual.epsK = 1e-3;
                 })});
  out.push_back({"dv1 two-layer gate, constant value 1.5", configOf("dv1", [](DeltaLMConfig& c) {
                   c.block.residual.gate = GateKind::TwoLayerTanh;
                   c.block.residual.gateHidden = 3;
                   c.block.residual.value = ValueKind::Constant;
                   c.block.residual.valueConstant = 1.5;
                 })});
  out.push_back({"tc dv3 constant value 0.7, TC K 2", configOf("tc", [](DeltaLMConfig& c) {
                   c.dv = 3;
                   c.convKernel = 2;
                   c.block.residual.value = ValueKind::Constant;
                   c.block.residual.valueConstant = 0.7;
                 })});
  out.push_back({"cc dv2 value scale 2.5, CC K 2, read -0.3, init authors", configOf("cc", [](DeltaLMConfig& c) {
                   c.dv = 2;
                   c.block.compressorKernel = 2;
                   c.block.compressorReadInit = -0.3;
                   c.block.residual.valueScale = 2.5;
                   c.init = ddl::LmInit::Authors;
                 })});
  out.push_back({"cc-ec dv2 EC K 1, two-layer gate, linear_on_input, init authors", configOf("cc-ec", [](DeltaLMConfig& c) {
                   c.dv = 2;
                   c.inputEmbedKernel = 1;
                   c.block.residual.gate = GateKind::TwoLayerTanh;
                   c.block.residual.gateHidden = 4;
                   c.block.residual.value = ValueKind::LinearOnInput;
                   c.init = ddl::LmInit::Authors;
                 })});
  return out;
}

// The five-point central difference (f(-2h) - 8 f(-h) + 8 f(h) - f(2h)) / 12h, h = 1e-4: truncation O(h^4)
// and rounding (~1e-15 of the logits' sum / h) near 1e-11. The three-point one of ddl::testing::numericGrad
// (h = 1e-6) leaves ~1e-6 of rounding on the small gradients of the two-layer gates (~1e-2 against
// |loss| ~ 5), and at h = 1e-5 its truncation reaches 1e-6 on these strongly non-linear small models.
template <class Loss>
MatX<double> numericGrad4(MatX<double>& P, Loss&& loss, double h = 1e-4) {
  MatX<double> g(P.rows(), P.cols());
  for (Index i = 0; i < P.size(); ++i) {
    const double saved = P.data()[i];
    double f[4];
    const double steps[4] = {-2 * h, -h, h, 2 * h};
    for (int s = 0; s < 4; ++s) {
      P.data()[i] = saved + steps[s];
      f[s] = loss();
    }
    P.data()[i] = saved;
    g.data()[i] = (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * h);
  }
  return g;
}

template <class S>
std::map<std::string, MatX<S>> paramsOf(ddl::DeltaLM<S>& lm) {
  std::map<std::string, MatX<S>> out;
  lm.visitParams("", [&](const std::string& name, ddl::Param<S>& p) { out[name] = p.value; });
  return out;
}

template <class S>
std::vector<Index> shapeOf(ddl::DeltaLM<S>& lm, const std::string& wanted) {
  std::vector<Index> shape;
  lm.visitParams("", [&](const std::string& name, ddl::Param<S>& p) {
    if (name == wanted) shape = p.shape;
  });
  return shape;
}

}  // namespace

TEST_CASE("DeltaLM with the authors' Delta options: backward matches central differences", "[grad][delta_lm][authors]") {
  double worst = 0;
  for (const Built& k : authorsCases()) {
    double worstOfCase = 0;
    for (const auto& shape : std::vector<std::pair<Index, Index>>{{1, 1}, {1, 4}, {2, 3}}) {
      const Index B = shape.first, T = shape.second;
      CAPTURE(k.name, B, T);
      ddl::DeltaLM<double> lm(k.cfg, 11);
      perturbSmallParams(lm, 12);
      // The embedding at unit scale (at N(0, 0.02²) the first RMSNorm's curvature makes FD's truncation
      // error as large as the tolerance), and EC's taps off their copy of the current token.
      lm.visitParams("", [](const std::string& name, ddl::Param<double>& p) {
        if (name == "embed.weight") p.value *= 50.0;
        if (name == "expand.weight") p.value.array() += 0.3 * MatX<double>::Random(p.value.rows(), p.value.cols()).array();
      });
      const auto loss = backwardOfRandomReadout(lm, randomTokenBatch(B, T, 11, 13 + static_cast<std::uint64_t>(B * T)));
      lm.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
        CAPTURE(name);
        const MatX<double> num = numericGrad4(p.value, loss);
        if (p.grad.isZero(0)) {  // the loss cannot see it (attention's q and k with one token): only rounding
          CHECK(num.cwiseAbs().maxCoeff() < 1e-9);
          return;
        }
        FD_CHECK(p.grad, num);
        worstOfCase = std::max(worstOfCase, ddl::testing::relErr(p.grad, num));
      });
    }
    WARN(k.name << ": largest relative FD error " << worstOfCase);
    worst = std::max(worst, worstOfCase);
  }
  WARN("largest relative FD error over the authors' options: " << worst);
}

TEST_CASE("DeltaLM with the authors' Delta options: cached decoding gives the full forward's logits", "[delta_lm][decode][authors]") {
  for (const Built& k : authorsCases()) {
    CAPTURE(k.name);
    const ddl::TokenBatch batch = randomTokenBatch(1, 6, 11, 33);
    const auto check = [&](auto& lm, auto tol) {
      using S = decltype(tol);
      MatX<S> full, step;
      lm.forwardInference(batch, full);
      ddl::LmDecoder<S> decoder(lm);
      decoder.start(6);
      for (Index t = 0; t < 6; ++t) {
        decoder.step(batch.ids[static_cast<std::size_t>(t)], step);
        CAPTURE(t);
        CHECK((step.col(0) - full.col(t)).cwiseAbs().maxCoeff() <= tol * full.cwiseAbs().maxCoeff());
      }
    };
    ddl::DeltaLM<double> ld(k.cfg, 31);
    perturbSmallParams(ld, 32);
    check(ld, 1e-12);
    ddl::DeltaLM<float> lf(k.cfg, 31);
    check(lf, 1e-5f);
    // and the inference forward is the training forward, bit for bit
    MatX<float> a, b;
    const ddl::TokenBatch many = randomTokenBatch(3, 5, 11, 4);
    lf.forward(many, a);
    lf.forwardInference(many, b);
    CHECK(a == b);
  }
}

TEST_CASE("linear_on_input is v = W_v x_in + b_v on the raw input, not on c", "[delta_lm][authors]") {
  for (const Index dv : {Index(1), Index(3)}) {
    CAPTURE(dv);
    const Index d = 5, N = 4;
    ddl::DeltaResidualOptions o;
    o.value = ddl::ValueKind::LinearOnInput;
    ddl::DeltaResidual<double> r(d, dv, o);
    ddl::Rng rng(3);
    r.init(rng);
    r.initValueBiasAsLinear(rng);
    MatX<double> Wv, bv;
    r.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
      if (name == "value.weight") Wv = p.value;
      if (name == "value.bias") bv = p.value;
    });
    REQUIRE(Wv.rows() == dv);
    REQUIRE(Wv.cols() == d);
    CHECK(bv.cwiseAbs().maxCoeff() > 0);  // nn.Linear's start, not 0
    CHECK(bv.cwiseAbs().maxCoeff() <= 1 / std::sqrt(double(d)));
    const MatX<double> X = MatX<double>::Random(d, dv * N), Xin = MatX<double>::Random(d, N);
    const MatX<double> C = MatX<double>::Random(d, N), H = MatX<double>::Random(d, N);
    MatX<double> Y, Y2;
    r.forward(X, Xin, C, H, Y);
    const MatX<double> expected = (Wv * Xin).colwise() + bv.col(0);
    CHECK((r.values() - expected).cwiseAbs().maxCoeff() < 1e-14);
    r.forwardInference(X, Xin, MatX<double>::Random(d, N), H, Y2);  // another c moves beta, not v
    CHECK((r.values() - expected).cwiseAbs().maxCoeff() < 1e-14);
    // The residual's own gradients (dX, dXin, dC, dH and the value head) against central differences.
    const MatX<double> G = MatX<double>::Random(d, dv * N);
    MatX<double> Xv = X, Xinv = Xin, Cv = C, Hv = H;
    auto loss = [&] {
      MatX<double> Yl;
      r.forwardInference(Xv, Xinv, Cv, Hv, Yl);
      return (G.array() * Yl.array()).sum();
    };
    r.forward(Xv, Xinv, Cv, Hv, Y);
    ddl::zeroGrad(r);
    MatX<double> dX, dXin, dC, dH;
    r.backward(G, dX, dXin, dC, dH);
    FD_CHECK(dX, ddl::testing::numericGrad(Xv, loss));
    FD_CHECK(dXin, ddl::testing::numericGrad(Xinv, loss));
    FD_CHECK(dC, ddl::testing::numericGrad(Cv, loss));
    FD_CHECK(dH, ddl::testing::numericGrad(Hv, loss));
    r.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
      CAPTURE(name);
      FD_CHECK(p.grad, ddl::testing::numericGrad(p.value, loss));
    });
  }
  CHECK(ddl::parseValueKind("linear_on_input") == ddl::ValueKind::LinearOnInput);
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::parseValueKind("linear"); }), "linear_on_input"));
}

TEST_CASE("DeltaLM's separate kernels and read vector starts reach TC, CC and EC", "[delta_lm][authors]") {
  ddl::DeltaLMConfig c = configOf("tc-ec", [](ddl::DeltaLMConfig& x) {
    x.dv = 2;
    x.convKernel = 3;
    x.inputEmbedKernel = 2;
    x.block.compressorReadInit = 0.4;
  });
  ddl::DeltaLM<double> lm(c, 1);
  CHECK(shapeOf(lm, "expand.weight") == std::vector<Index>{24, 1, 2});
  CHECK(shapeOf(lm, "blocks.0.compress.conv.weight") == std::vector<Index>{24, 1, 3});
  CHECK(shapeOf(lm, "readout.conv.weight") == std::vector<Index>{24, 1, 3});
  auto p = paramsOf(lm);
  CHECK((p.at("readout.read.weight").array() == 0.4).all());
  CHECK((p.at("blocks.1.compress.read.weight").array() == 0.4).all());
  c.inputEmbedKernel = 0;  // unset: EC takes conv_kernel, as before the key
  ddl::DeltaLM<double> same(c, 1);
  CHECK(shapeOf(same, "expand.weight") == std::vector<Index>{24, 1, 3});
  // CC: compressor_kernel and the read start
  ddl::DeltaLMConfig cc = configOf("cc", [](ddl::DeltaLMConfig& x) {
    x.block.compressorKernel = 3;
    x.block.compressorReadInit = -0.3;
  });
  ddl::DeltaLM<double> lcc(cc, 1);
  CHECK(shapeOf(lcc, "blocks.0.compress.conv.weight") == std::vector<Index>{12, 3});
  CHECK((paramsOf(lcc).at("readout.read.weight").array() == -0.3).all());
  // A TC without the option keeps 1/dv
  ddl::DeltaLM<double> plain(configOf("tc", [](ddl::DeltaLMConfig&) {}), 1);
  CHECK((paramsOf(plain).at("readout.read.weight").array() == 0.25).all());
}

TEST_CASE("DeltaLM's init: the factors scale the draws, authors redraws only the value biases", "[delta_lm][authors]") {
  auto stddev = [](const MatX<double>& m) {
    const double mean = m.mean();
    return std::sqrt((m.array() - mean).square().sum() / static_cast<double>(m.size()));
  };
  ddl::DeltaLMConfig c;
  c.vocab = 256;
  c.d = 64;
  c.depth = 4;
  c.heads = 2;
  c.context = 8;
  ddl::applyVariant(c, "cc");
  c.embeddingInitStd = 0.05;
  c.hiddenInitStdFactor = 1.5;
  ddl::DeltaLM<double> lm(c, 5);
  auto p = paramsOf(lm);
  CHECK(std::abs(stddev(p.at("embed.weight")) - 0.05) < 0.002);
  CHECK(std::abs(stddev(p.at("blocks.0.attn.q.weight")) - 1.5 / 8) < 0.01);
  CHECK(std::abs(stddev(p.at("blocks.0.mlp.fc2.weight")) - 1.5 / 8 / 2) < 0.005);
  CHECK(std::abs(stddev(p.at("blocks.2.attn_delta.gate.weight")) - 1.5 / 8) < 0.06);
  CHECK((p.at("blocks.0.attn_delta.value.bias").array() == 0).all());  // ddl: value biases 0

  ddl::DeltaLMConfig a = c;
  a.init = ddl::LmInit::Authors;
  ddl::DeltaLM<double> la(a, 5);
  auto q = paramsOf(la);
  REQUIRE(q.size() == p.size());
  int biases = 0;
  for (const auto& [name, value] : p) {
    CAPTURE(name);
    if (contains(name, "value.bias")) {
      ++biases;
      const MatX<double>& b = q.at(name);
      CHECK(b.cwiseAbs().maxCoeff() <= 1 / 8.0);
      CHECK(b.cwiseAbs().minCoeff() > 0);
    } else {
      CHECK(q.at(name) == value);  // every other parameter keeps ddl's bits
    }
  }
  CHECK(biases == 2 * c.depth);
  // the authors' biases spread over U(-1/8, 1/8): 32 draws, standard deviation 1/8/sqrt(3)
  MatX<double> all(4 * 2 * c.depth, 1);
  Index n = 0;
  for (const auto& [name, value] : q)
    if (contains(name, "value.bias")) {
      all.middleRows(n, 4) = value;
      n += 4;
    }
  CHECK(std::abs(stddev(all) - 1 / 8.0 / std::sqrt(3.0)) < 0.025);
  // the two-layer gate (ddl_beta_single_linear = False) starts its output bias at their logit(clamp(beta0)/2)
  for (const double beta0 : {0.0, 0.6, 2.0}) {
    ddl::DeltaLMConfig g = ddl_test::smallLMConfig(ddl_test::LmCase{"cc"});
    g.block.residual.gate = ddl::GateKind::TwoLayerTanh;
    g.block.residual.gateHidden = 5;
    g.block.residual.beta0 = beta0;
    g.init = ddl::LmInit::Authors;
    ddl::DeltaLM<double> lg(g, 2);
    const double pr = std::min(std::max(beta0 / 2, 1e-6), 1 - 1e-6);
    for (const auto& [name, value] : paramsOf(lg))
      if (contains(name, "gate.fc2.bias")) {
        CAPTURE(name, beta0);
        CHECK(value(0, 0) == Approx(std::log(pr / (1 - pr))).epsilon(1e-12));
      }
    CHECK(shapeOf(lg, "blocks.1.mlp_delta.gate.fc1.weight") == std::vector<Index>{5, 12});
  }
  // same seed, same model; init(seed) restores it
  ddl::DeltaLM<double> other(a, 6);
  other.init(5);
  CHECK(paramsOf(other) == q);
}

TEST_CASE("The defaults of the authors' options keep ddl's model bit for bit, with or without their keys", "[delta_lm][authors]") {
  for (const char* variant : {"dv1", "cc-ec", "tc-ec"}) {
    CAPTURE(variant);
    ddl::DeltaLMConfig c = ddl_test::smallLMConfig(ddl_test::LmCase{variant});
    c.convKernel = 3;
    ddl::KeyValues kv = c.toKeyValues();
    CHECK(kv.at("input_embed_shortconv_kernel_size") == "3");
    CHECK(kv.at("init") == "ddl");
    // A checkpoint written before the keys: the defaults, the same model
    for (const char* key : {"input_embed_shortconv_kernel_size", "ddl_state_dv_shortconv_causal", "embedding_init_std",
                            "hidden_init_std_factor", "init"})
      REQUIRE(kv.erase(key) == 1);
    const ddl::DeltaLMConfig old = ddl::DeltaLMConfig::fromKeyValues(kv);
    CHECK(old.ecKernel() == 3);
    CHECK(old.embeddingInitStd == 0.02);
    CHECK(old.hiddenInitStdFactor == 0.5);
    CHECK(old.init == ddl::LmInit::Ddl);
    CHECK(!old.stateDvShortconvCausal);
    CHECK(old.toKeyValues() == c.toKeyValues());
    ddl::DeltaLM<float> a(c, 9), b(old, 9);
    CHECK(paramsOf(a) == paramsOf(b));
    // and the documented rule itself: std 0.5/sqrt(d) for a hidden matrix, 0.02 for the embedding, value bias 0
    ddl::DeltaLMConfig explicitDefaults = c;
    explicitDefaults.embeddingInitStd = 0.02;
    explicitDefaults.hiddenInitStdFactor = 0.5;
    ddl::DeltaLM<float> e(explicitDefaults, 9);
    CHECK(paramsOf(e) == paramsOf(a));
  }
  // Non-default values round-trip
  ddl::DeltaLMConfig c = ddl_test::smallLMConfig(ddl_test::LmCase{"tc-ec"});
  c.inputEmbedKernel = 2;
  c.embeddingInitStd = 0.03;
  c.hiddenInitStdFactor = 0.25;
  c.init = ddl::LmInit::Authors;
  c.block.compressorReadInit = 0.125;
  c.block.residual.value = ddl::ValueKind::LinearOnInput;
  c.block.residual.gate = ddl::GateKind::TwoLayerTanh;
  c.block.residual.gateHidden = 6;
  const ddl::DeltaLMConfig r = ddl::DeltaLMConfig::fromKeyValues(c.toKeyValues());
  CHECK(r.toKeyValues() == c.toKeyValues());
  CHECK(r.inputEmbedKernel == 2);
  CHECK(r.embeddingInitStd == 0.03);
  CHECK(r.hiddenInitStdFactor == 0.25);
  CHECK(r.init == ddl::LmInit::Authors);
  CHECK(r.block.residual.value == ddl::ValueKind::LinearOnInput);
  ddl::DeltaLM<float> m1(c, 3), m2(r, 3);
  CHECK(paramsOf(m1) == paramsOf(m2));
}

TEST_CASE("DeltaLMConfig refuses bad or unsupported authors' options by name", "[delta_lm][authors][errors]") {
  auto msgFor = [](const std::function<void(ddl::DeltaLMConfig&)>& set) {
    ddl::DeltaLMConfig c = ddl_test::smallLMConfig(ddl_test::LmCase{"cc-ec"});
    set(c);
    return thrownMessage<ddl::ValueError>([&] { c.validate(); });
  };
  const std::string causal = msgFor([](ddl::DeltaLMConfig& c) { c.stateDvShortconvCausal = true; });
  CHECK(contains(causal, "ddl::DeltaLMConfig"));
  CHECK(contains(causal, "ddl_state_dv_shortconv_causal = true is not supported"));
  CHECK(contains(causal, "never reads it"));
  CHECK(contains(msgFor([](ddl::DeltaLMConfig& c) { c.inputEmbedKernel = -1; }),
                 "input_embed_shortconv_kernel_size must be >= 1 (or 0: conv_kernel), got -1"));
  CHECK(contains(msgFor([](ddl::DeltaLMConfig& c) { c.embeddingInitStd = -0.1; }),
                 "embedding_init_std must be finite and >= 0, got -0.1"));
  CHECK(contains(msgFor([](ddl::DeltaLMConfig& c) { c.embeddingInitStd = std::numeric_limits<double>::quiet_NaN(); }),
                 "embedding_init_std must be finite"));
  CHECK(contains(msgFor([](ddl::DeltaLMConfig& c) { c.hiddenInitStdFactor = std::numeric_limits<double>::infinity(); }),
                 "hidden_init_std_factor must be finite and >= 0, got inf"));
  CHECK(contains(msgFor([](ddl::DeltaLMConfig& c) { c.init = static_cast<ddl::LmInit>(7); }), "init must be ddl or authors, got 7"));
  CHECK(contains(msgFor([](ddl::DeltaLMConfig& c) { c.block.residual.beta0 = 2.5; }), "beta0 must lie in [0, 2], got 2.5"));
  CHECK(contains(msgFor([](ddl::DeltaLMConfig& c) { c.block.residual.gateHidden = 0; }), "gateHidden must be >= 1, got 0"));
  CHECK(contains(msgFor([](ddl::DeltaLMConfig& c) { c.block.residual.epsK = -1; }), "epsK must be finite and >= 0, got -1"));
  CHECK(contains(msgFor([](ddl::DeltaLMConfig& c) { c.block.compressorReadInit = std::numeric_limits<double>::infinity(); }),
                 "compressorReadInit must be finite"));
  // the model refuses them too, and so do their keys
  ddl::DeltaLMConfig bad = ddl_test::smallLMConfig(ddl_test::LmCase{"cc"});
  bad.stateDvShortconvCausal = true;
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::DeltaLM<float> lm(bad, 1); }), "ddl_state_dv_shortconv_causal"));
  ddl::KeyValues kv = ddl_test::smallLMConfig(ddl_test::LmCase{"cc"}).toKeyValues();
  kv["init"] = "torch";
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::DeltaLMConfig::fromKeyValues(kv); }),
                 "unknown init 'torch', expected one of ddl, authors"));
  kv["init"] = "ddl";
  kv["ddl_state_dv_shortconv_causal"] = "1";
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::DeltaLMConfig::fromKeyValues(kv); }),
                 "ddl_state_dv_shortconv_causal = true is not supported"));
  kv["ddl_state_dv_shortconv_causal"] = "0";
  kv["input_embed_shortconv_kernel_size"] = "0";
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::DeltaLMConfig::fromKeyValues(kv); }),
                 "input_embed_shortconv_kernel_size"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::TokenCompressor<float> tc(4, 2, 3, std::nan("")); }),
                 "ddl::TokenCompressor"));
}

}  // namespace test_delta_lm_authors
