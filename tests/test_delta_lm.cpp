// Tests of the DDL Transformer: DeltaTransformerBlock (nn/blocks/delta_transformer_block.hpp) and DeltaLM
// (nn/models/delta_lm.hpp). Every gradient is proven by central differences in double, over the variants,
// residual kinds and presets; the additive dv = 1 block is checked against a pre-norm GPT block built
// from the same modules; the model is causal, its init follows docs/spec.md §8, bad input is refused.
#include "eigen_guard.hpp"  // first: live allocation checks even with NDEBUG

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "layer_grad_check.hpp"
#include "fd_check.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_batch.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/nn/blocks/delta_transformer_block.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_delta_lm {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl::TokenLayout;
using ddl_test::contains;
using ddl_test::thrownMessage;
using ddl_test::randomTokenBatch;
using ddl_test::perturbSmallParams;
using ddl_test::backwardOfRandomReadout;

namespace {

using Case = ddl_test::LmCase;
using ddl_test::smallLMConfig;

std::string nameOf(const Case& c) {
  return c.variant + "/" + ddl::toString(c.residual) + "/" + c.preset + "/dv" + std::to_string(c.dv) + "/h" +
         std::to_string(c.heads) + (c.tied ? "/tied" : "/untied");
}

// (Additive with dv > 1 and repeated channels keeps the channels equal, so a structured readout's
// scale meets the RMSNorm, which is blind to it: those gradients are ~0 and FD measures only noise.
// The free compressor of "paper" has no such degenerate direction.)
std::vector<Case> lmCases() {
  using R = ddl::ResidualKind;
  return {{"dv1", R::Delta, "code", 0, 2, true},   {"dv1", R::Additive, "code", 0, 1, false},
          {"dv1", R::WriteOnly, "paper", 0, 2, true}, {"cc", R::Delta, "code", 3, 2, true},
          {"cc", R::Delta, "paper", 2, 3, false},  {"cc", R::Additive, "paper", 2, 2, true},
          {"cc", R::WriteOnly, "code", 2, 1, true},  {"cc-ec", R::Delta, "code", 2, 2, true},
          {"tc", R::Delta, "code", 3, 1, true},    {"tc", R::Additive, "code", 2, 2, false},
          {"tc-ec", R::Delta, "paper", 2, 2, false}, {"tc-ec", R::WriteOnly, "code", 2, 2, true}};
}

// Decoding the batch's one sequence a token a step, from decoder.start(T), gives the logits of
// lm.forwardInference at every position: each step's column within tol times the largest full logit.
template <class S>
void checkStepsMatchFull(ddl::DeltaLM<S>& lm, ddl::LmDecoder<S>& decoder, const ddl::TokenBatch& batch, S tol) {
  const Index T = batch.layout.length;
  MatX<S> full, step;
  lm.forwardInference(batch, full);
  decoder.start(T);
  for (Index t = 0; t < T; ++t) {
    decoder.step(batch.ids[static_cast<std::size_t>(t)], step);
    CAPTURE(t);
    CHECK((step.col(0) - full.col(t)).cwiseAbs().maxCoeff() <= tol * full.cwiseAbs().maxCoeff());
  }
}

}  // namespace

TEST_CASE("DeltaTransformerBlock backward matches central differences", "[grad][delta_lm]") {
  for (const Case& k : lmCases()) {
    for (const auto& shape : std::vector<std::pair<Index, Index>>{{1, 1}, {2, 4}}) {
      const Index B = shape.first, T = shape.second;
      CAPTURE(nameOf(k), B, T);
      ddl::DeltaLMConfig cfg = smallLMConfig(k);
      ddl::DeltaTransformerBlock<double> block(cfg.blockConfig());
      ddl::Rng rng(7);
      block.init(rng);
      perturbSmallParams(block, 8);
      const TokenLayout layout = TokenLayout::sequence(B, T);
      MatX<double> X = MatX<double>::Random(cfg.d, cfg.dv * B * T);
      ddl_test::checkLayerGradients(block, X, layout, [](const ddl::Param<double>&) {});
    }
  }
}

TEST_CASE("DeltaTransformerBlock with d = 1 per head and one token matches central differences", "[grad][delta_lm]") {
  Case k{"cc", ddl::ResidualKind::Delta, "code", 2, 1, true};
  ddl::DeltaLMConfig cfg = smallLMConfig(k);
  cfg.d = 2;  // one head of two features: the smallest RoPE pair
  cfg.hidden = 1;
  ddl::DeltaTransformerBlock<double> block(cfg.blockConfig());
  ddl::Rng rng(3);
  block.init(rng);
  const TokenLayout layout = TokenLayout::sequence(1, 1);
  MatX<double> X = MatX<double>::Random(cfg.d, cfg.dv);
  MatX<double> Y, dX;
  block.forward(X, layout, Y);
  const MatX<double> W = MatX<double>::Random(Y.rows(), Y.cols());
  auto loss = [&] {
    MatX<double> Yl;
    block.forwardInference(X, layout, Yl);
    return (W.array() * Yl.array()).sum();
  };
  ddl::zeroGrad(block);
  block.backward(W, dX);
  FD_CHECK(dX, ddl::testing::numericGrad(X, loss));
}

TEST_CASE("DeltaTransformerBlock additive with dv = 1 is a pre-norm GPT block", "[delta_lm]") {
  Case k{"dv1", ddl::ResidualKind::Additive, "code", 0, 2, true};
  ddl::DeltaLMConfig cfg = smallLMConfig(k);
  ddl::DeltaTransformerBlock<double> block(cfg.blockConfig());
  ddl::Rng rng(5);
  block.init(rng);
  perturbSmallParams(block, 6);
  // The same modules, wired by hand: x + attn(norm1 x), then + mlp(norm2 .)
  ddl::CausalSelfAttentionConfig ac;
  ac.d = cfg.d;
  ac.heads = cfg.heads;
  ddl::CausalSelfAttention<double> attn(ac);
  ddl::SwiGluBranch<double> mlp(cfg.d, ddl::DeltaBlockBranchOptions{cfg.hidden, ddl::Activation::SiLU});
  ddl::RmsNorm<double> n1(cfg.d, 1e-5), n2(cfg.d, 1e-5);
  std::vector<ddl::Param<double>*> src;
  block.visitParams("", [&](const std::string&, ddl::Param<double>& p) { src.push_back(&p); });
  std::size_t i = 0;
  auto take = [&](const std::string&, ddl::Param<double>& p) { p.value = src.at(i++)->value; };
  n1.visitParams("", take);
  attn.visitParams("", take);
  n2.visitParams("", take);
  mlp.visitParams("", take);
  REQUIRE(i == src.size());  // additive: no gate or value parameters
  const TokenLayout layout = TokenLayout::sequence(2, 5);
  const MatX<double> X = MatX<double>::Random(cfg.d, 10);
  MatX<double> Y, c, h;
  block.forward(X, layout, Y);
  n1.forwardInference(X, c);
  attn.forwardInference(c, layout, h);
  const MatX<double> mid = X + h;
  n2.forwardInference(mid, c);
  mlp.forwardInference(c, layout, h);
  const MatX<double> expected = mid + h;
  CHECK((Y - expected).cwiseAbs().maxCoeff() < 1e-14);
}

TEST_CASE("DeltaLM backward matches central differences for every parameter", "[grad][delta_lm]") {
  for (const Case& k : lmCases()) {
    for (const auto& shape : std::vector<std::pair<Index, Index>>{{1, 1}, {2, 3}}) {
      const Index B = shape.first, T = shape.second;
      CAPTURE(nameOf(k), B, T);
      ddl::DeltaLM<double> lm(smallLMConfig(k), 11);
      perturbSmallParams(lm, 12);
      // The embedding at unit scale: at N(0, 0.02²) the first RMSNorm's curvature (~1/|x|) makes the
      // central difference's truncation error as large as the tolerance.
      lm.visitParams("", [](const std::string& name, ddl::Param<double>& p) {
        if (name == "embed.weight") p.value *= 50.0;
      });
      const ddl::TokenBatch batch = randomTokenBatch(B, T, 11, 13 + static_cast<std::uint64_t>(B));
      MatX<double> logits;
      const auto loss = backwardOfRandomReadout(lm, batch, &logits);
      REQUIRE(logits.rows() == 11);
      REQUIRE(logits.cols() == B * T);
      lm.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
        CAPTURE(name);
        FD_CHECK(p.grad, ddl::testing::numericGrad(p.value, loss));
      });
    }
  }
}

TEST_CASE("DeltaLM forwardInference gives the training forward's logits bit for bit", "[delta_lm]") {
  for (const Case& k : lmCases()) {
    CAPTURE(nameOf(k));
    ddl::DeltaLM<float> lm(smallLMConfig(k), 3);
    const ddl::TokenBatch batch = randomTokenBatch(3, 6, 11, 4);
    MatX<float> a, b;
    lm.forward(batch, a);
    lm.forwardInference(batch, b);
    CHECK(a == b);
  }
}

TEST_CASE("DeltaLM is causal: a token changes no earlier logit and no other sequence", "[delta_lm]") {
  for (const Case& k : lmCases()) {
    CAPTURE(nameOf(k));
    ddl::DeltaLM<double> lm(smallLMConfig(k), 21);
    ddl::TokenBatch batch = randomTokenBatch(2, 6, 11, 22);
    MatX<double> before, after;
    lm.forwardInference(batch, before);
    const Index t = 3;
    batch.ids[static_cast<std::size_t>(t)] = (batch.ids[static_cast<std::size_t>(t)] + 5) % 11;  // sequence 0
    lm.forwardInference(batch, after);
    CHECK(before.leftCols(t) == after.leftCols(t));
    CHECK(before.rightCols(6) == after.rightCols(6));
    CHECK((before.col(t) - after.col(t)).norm() > 0);
  }
}

TEST_CASE("DeltaLM initialises as docs/spec.md section 8 says", "[delta_lm]") {
  ddl::DeltaLMConfig cfg;  // the default model: d 256, L 4, 4 heads, vocab 256
  ddl::applyVariant(cfg, "cc");
  ddl::DeltaLM<double> lm(cfg, 1);
  const double s = 0.5 / 16.0, so = s / 2.0;  // 0.5/sqrt(256), and / sqrt(L = 4)
  auto stddev = [](const MatX<double>& m) {
    const double mean = m.mean();
    return std::sqrt((m.array() - mean).square().sum() / static_cast<double>(m.size()));
  };
  std::vector<std::string> names;
  lm.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    CAPTURE(name);
    names.push_back(name);
    if (name == "embed.weight") CHECK(std::abs(stddev(p.value) - 0.02) < 0.001);
    if (contains(name, "attn.q.weight") || contains(name, "mlp.fc1.weight")) CHECK(std::abs(stddev(p.value) - s) < 0.002);
    if (contains(name, "attn.o.weight") || contains(name, "mlp.fc2.weight")) CHECK(std::abs(stddev(p.value) - so) < 0.001);
    if (contains(name, "gate.bias")) CHECK(std::abs(p.value(0, 0)) < 1e-12);  // logit(beta0 / 2) with beta0 = 1
    if (contains(name, "norm.weight")) CHECK((p.value.array() == 1.0).all());
    if (contains(name, "read.weight")) CHECK((p.value.array() == 0.25).all());
  });
  CHECK(names.front() == "embed.weight");
  CHECK(std::find(names.begin(), names.end(), "head.weight") == names.end());  // tied
  for (const char* n : {"blocks.0.compress.conv.weight", "blocks.0.compress.read.weight", "blocks.0.attn_norm.weight",
                        "blocks.0.attn.q.weight", "blocks.0.attn.k_norm.weight", "blocks.0.attn_delta.gate.weight",
                        "blocks.0.attn_delta.value.bias", "blocks.3.mlp_norm.weight", "blocks.3.mlp.fc3.weight",
                        "blocks.3.mlp_delta.value.weight", "readout.read.weight", "norm.weight"})
    CHECK(std::find(names.begin(), names.end(), n) != names.end());
  // Same seed, same model; init(seed) restores it.
  ddl::DeltaLM<double> twin(cfg, 1);
  MatX<double> a, b;
  const ddl::TokenBatch batch = randomTokenBatch(1, 8, 256, 2);
  lm.forwardInference(batch, a);
  twin.forwardInference(batch, b);
  CHECK(a == b);
  ddl::DeltaLM<double> other(cfg, 2);
  other.init(1);
  other.forwardInference(batch, b);
  CHECK(a == b);
}

TEST_CASE("DeltaLM's parameters declare the roles its initialisation reads, in every variant", "[delta_lm]") {
  using R = ddl::ParamRole;
  for (const char* variant : {"dv1", "cc", "cc-ec", "tc", "tc-ec"}) {
    CAPTURE(variant);
    const ddl::DeltaLMConfig cfg = smallLMConfig(Case{variant});
    ddl::DeltaLM<double> lm(cfg, 1);
    int outputs = 0;
    lm.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
      CAPTURE(name);
      const bool output = contains(name, "attn.o.weight") || contains(name, "mlp.fc2.weight");
      outputs += output;
      const R expected = name == "embed.weight"    ? R::Embedding
                         : name == "expand.weight" ? R::KeepsStart
                         : output                  ? R::ResidualOutput
                                                   : R::Default;
      CHECK(p.role == expected);
    });
    CHECK(outputs == 2 * cfg.depth);
  }
}

TEST_CASE("DeltaLMConfig round-trips through its key-values and names every variant", "[delta_lm]") {
  for (const char* v : {"dv1", "cc", "cc-ec", "tc", "tc-ec"}) {
    ddl::DeltaLMConfig c;
    ddl::applyVariant(c, v);
    c.tiedHead = false;
    const ddl::DeltaLMConfig r = ddl::DeltaLMConfig::fromKeyValues(c.toKeyValues());
    CHECK(r.toKeyValues() == c.toKeyValues());
    CHECK(r.variant() == v);
  }
  ddl::DeltaLMConfig c;
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::applyVariant(c, "dv2"); }), "dv1, cc, cc-ec, tc, tc-ec"));
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::applyPreset(c, "v1"); }), "code, paper"));
  c.heads = 5;
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { c.validate(); }), "divide d = 256"));
  c.heads = 256;  // d_h = 1: RoPE has no pair and turns nothing, as the authors' Rotary
  CHECK_NOTHROW(c.validate());
  c.attention.ropeRatio = -0.5;
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { c.validate(); }), "rope_ratio must be in [0, 1], got -0.5"));
  c.attention.ropeRatio = 1;
  ddl::KeyValues kv = ddl::DeltaLMConfig().toKeyValues();
  kv["model"] = "delta_net";
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::DeltaLMConfig::fromKeyValues(kv); }), "expected 'delta_lm'"));
  // The variant is read from dv, the compressor and the expansion: a saved label that contradicts them
  // (cc-ec with dv 1) is refused, and so is a preset no applyPreset knows.
  kv = ddl::DeltaLMConfig().toKeyValues();
  kv["variant"] = "cc-ec";
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::DeltaLMConfig::fromKeyValues(kv); }),
                 "variant 'cc-ec' contradicts dv 1"));
  ddl::DeltaLMConfig custom;
  ddl::applyVariant(custom, "tc-ec");
  custom.dv = 8;  // another dv keeps the variant's name
  CHECK(custom.variant() == "tc-ec");
  custom.learnedExpansion = false;
  CHECK(custom.variant() == "tc");
  custom.dv = 1;
  CHECK(custom.variant() == "dv1");
  custom.preset = ddl::Preset::V1;  // DeltaNet's preset
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { custom.validate(); }), "preset must be code or paper"));
  ddl::KeyValues unknown = ddl::DeltaLMConfig().toKeyValues();
  unknown["preset"] = "mine";
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::DeltaLMConfig::fromKeyValues(unknown); }),
                 "unknown preset 'mine', expected one of code, paper, v1"));
}

TEST_CASE("DeltaLM refuses bad input with clear errors and keeps its state", "[delta_lm][errors]") {
  ddl::DeltaLM<double> lm(smallLMConfig(Case{"cc", ddl::ResidualKind::Delta, "code", 2, 2, true}), 1);
  MatX<double> logits;
  CHECK(contains(thrownMessage<ddl::Error>([&] { lm.backward(MatX<double>::Zero(11, 4)); }), "before forward"));
  ddl::TokenBatch bad = randomTokenBatch(2, 3, 11, 1);
  bad.ids[4] = 11;
  const std::string msg = thrownMessage<ddl::ValueError>([&] { lm.forward(bad, logits); });
  CHECK(contains(msg, "id 11 at position 4"));
  CHECK(contains(msg, "[0, 11)"));
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { lm.forward(randomTokenBatch(1, 7, 11, 1), logits); }),
                 "sequence length T = 7 exceeds the context 6"));
  ddl::TokenBatch shortIds = randomTokenBatch(2, 3, 11, 1);
  shortIds.ids.pop_back();
  CHECK(contains(thrownMessage<ddl::ShapeError>([&] { lm.forward(shortIds, logits); }), "5 ids"));
  lm.forward(randomTokenBatch(2, 3, 11, 1), logits);
  CHECK(contains(thrownMessage<ddl::ShapeError>([&] { lm.backward(MatX<double>::Zero(11, 5)); }), "dLogits"));
}

TEST_CASE("DeltaLM cached decoding gives the logits of a full forward at every position", "[delta_lm][decode]") {
  for (const Case& k : lmCases()) {
    CAPTURE(nameOf(k));
    ddl::DeltaLM<double> lm(smallLMConfig(k), 31);
    perturbSmallParams(lm, 32);
    const ddl::TokenBatch batch = randomTokenBatch(1, 6, 11, 33);  // the whole context
    ddl::LmDecoder<double> decoder(lm);
    checkStepsMatchFull(lm, decoder, batch, 1e-12);
    MatX<double> step;
    CHECK(contains(thrownMessage<ddl::ValueError>([&] { decoder.step(0, step); }), "capacity of 6"));
    // float: the same within float's rounding
    ddl::DeltaLM<float> lf(smallLMConfig(k), 31);
    ddl::LmDecoder<float> df(lf);
    checkStepsMatchFull(lf, df, batch, 1e-5f);
  }
}

TEST_CASE("DeltaLM::generate samples reproducibly and, greedy, follows full recomputation past the context", "[delta_lm][decode]") {
  for (const Case& k : lmCases()) {
    CAPTURE(nameOf(k));
    ddl::DeltaLM<double> lm(smallLMConfig(k), 41);
    perturbSmallParams(lm, 42);
    const std::vector<int> prompt{3, 1, 4};
    const std::vector<int> a = lm.generate(prompt, 20, 0.9, 5, 7), b = lm.generate(prompt, 20, 0.9, 5, 7);
    CHECK(a == b);
    CHECK(a.size() == 20);
    CHECK(lm.generate(prompt, 20, 0.9, 5, 8) != a);  // another seed, another text (20 draws from 5)
    // Greedy (top-k 1) against forwardInference over the window the decoder holds: the context is 6,
    // so after 3 new tokens the cache is full and restarts from the newest 3 tokens.
    const std::vector<int> greedy = lm.generate(prompt, 12, 1.0, 1, 0);
    std::vector<int> window = prompt, expected;
    for (int i = 0; i < 12; ++i) {
      ddl::TokenBatch batch;
      batch.ids = window;
      batch.layout = TokenLayout::sequence(1, static_cast<Index>(window.size()));
      MatX<double> logits;
      lm.forwardInference(batch, logits);
      Index best = 0;
      logits.col(logits.cols() - 1).maxCoeff(&best);
      expected.push_back(static_cast<int>(best));
      if (window.size() == 6) window.erase(window.begin(), window.begin() + 3);
      window.push_back(static_cast<int>(best));
    }
    CHECK(greedy == expected);
  }
}

TEST_CASE("DeltaLM::generate refuses bad prompts and sampling settings, naming the accepted range", "[delta_lm][errors]") {
  ddl::DeltaLM<float> lm(smallLMConfig(Case{"dv1", ddl::ResidualKind::Delta, "code", 0, 2, true}), 1);
  auto msg = [&](const std::vector<int>& p, Index n, double temp, Index k) {
    return thrownMessage<ddl::ValueError>([&] { lm.generate(p, n, temp, k, 1); });
  };
  CHECK(contains(msg({}, 5, 1.0, 5), "the prompt is empty (accepted: 1 .. 6 ids)"));
  CHECK(contains(msg({1, 2, 3, 4, 5, 6, 7}, 5, 1.0, 5), "the prompt has 7 ids, more than the context 6"));
  CHECK(contains(msg({1, 11}, 5, 1.0, 5), "prompt id 11 at position 1 is outside [0, 11)"));
  CHECK(contains(msg({1}, 5, 0.0, 5), "temperature must be finite and > 0, got 0"));
  CHECK(contains(msg({1}, 5, -1.0, 5), "temperature must be finite and > 0"));
  CHECK(contains(msg({1}, 5, 1.0, 0), "topK must be in [1, 11], got 0"));
  CHECK(contains(msg({1}, 5, 1.0, 12), "topK must be in [1, 11], got 12"));
  CHECK(contains(msg({1}, -1, 1.0, 5), "n must be >= 0"));
  CHECK(lm.generate({1}, 0, 1.0, 5, 1).empty());
  ddl::LmDecoder<float> decoder(lm);
  MatX<float> logits;
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { decoder.step(1, logits); }), "call start first"));
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { decoder.start(7); }), "capacity must be in [1, 6]"));
}

TEST_CASE("DeltaLM with the authors' attention options: every gradient against central differences, and cached "
          "decoding against the full forward", "[grad][delta_lm][decode][options]") {
  using R = ddl::ResidualKind;
  using A = ddl::QkvActivation;
  for (int set = 0; set < 2; ++set)
    for (const Case& k : {Case{"dv1", R::Delta, "code", 0, 2, true}, Case{"cc-ec", R::Delta, "code", 2, 2, true},
                          Case{"tc", R::Additive, "paper", 2, 3, false}}) {
      CAPTURE(set, nameOf(k));
      ddl::DeltaLMConfig cfg = smallLMConfig(k);
      ddl::AttentionOptions& o = cfg.attention;
      // set 0: head_dim 5 (not d / heads), partial RoPE, the k shift, the gate with its o_norm, silu on q;
      // set 1: the v shift, groupnorm and the gate, relu on k, elu+1 on v, another QK eps
      o.headDim = set == 0 ? 5 : 0;
      o.ropeRatio = set == 0 ? 0.5 : 1.0;
      o.kShift = set == 0;
      o.vShift = set == 1;
      o.outputGate = true;
      o.groupNorm = set == 1;
      o.outputNormEps = 1e-3;
      o.qkNormEps = set == 1 ? 1e-3 : 1e-5;
      o.qActivation = set == 0 ? A::SiLU : A::Identity;
      o.kActivation = set == 1 ? A::ReLU : A::Identity;
      o.vActivation = set == 1 ? A::EluPlus1 : A::Identity;
      ddl::DeltaLM<double> lm(cfg, 61);
      perturbSmallParams(lm, 62);
      lm.visitParams("", [](const std::string& name, ddl::Param<double>& p) {
        if (name == "embed.weight") p.value *= 50.0;  // as the test above: the first norm's curvature
      });
      const auto loss = backwardOfRandomReadout(lm, randomTokenBatch(2, 3, 11, 63));
      Index shifts = 0;
      lm.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
        CAPTURE(name);
        if (contains(name, "_shift.") || contains(name, "attn.g.")) ++shifts;
        FD_CHECK(p.grad, ddl::testing::numericGrad(p.value, loss));
      });
      CHECK(shifts == 2 * cfg.depth);  // the options' parameters were there and checked
      ddl::LmDecoder<double> decoder(lm);
      checkStepsMatchFull(lm, decoder, randomTokenBatch(1, 6, 11, 64), 1e-12);
    }
}

}  // namespace test_delta_lm
