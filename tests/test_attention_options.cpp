// Tests for the authors' attention options (nn/blocks/attention_options.hpp) in causal self-attention:
// head_dim other than d / heads, partial RoPE (rope_ratio), the QK-norm eps, the output gate and the
// per-head output norm (using_groupnorm), the token shift of k and v, and the q/k/v activations. The
// forward against the authors' computation written out in loops, every gradient against central
// differences in double, the parameters' names and shapes, the options' checks and their key-values.
#include "eigen_guard.hpp"  // first: eigen_assert throws even with NDEBUG

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fd_check.hpp"
#include "fixtures.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/nn/blocks/attention_options.hpp"
#include "ddl/nn/blocks/causal_self_attention.hpp"
#include "ddl/nn/layers/qkv_activation.hpp"
#include "ddl/nn/layers/token_shift.hpp"
#include "ddl/nn/models/delta_lm_config.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_attention_options {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl::QkvActivation;
using ddl_test::contains;
using ddl_test::thrownMessage;
using ddl_test::initRandomAttention;
using ddl_test::namedParams;
using Attention = ddl::CausalSelfAttention<double>;

namespace {

struct Case {
  Index B, T, H, dh, d;  // d: the model width (need not be H * dh)
  ddl::AttentionOptions opt;
  bool qkNorm = true;
};

ddl::CausalSelfAttentionConfig configOf(const Case& k) {
  ddl::CausalSelfAttentionConfig cfg;
  cfg.d = k.d;
  cfg.heads = k.H;
  cfg.qkNorm = k.qkNorm;
  cfg.options = k.opt;
  cfg.options.headDim = k.dh;
  return cfg;
}

double act(QkvActivation kind, double x) {
  switch (kind) {
    case QkvActivation::Identity: return x;
    case QkvActivation::SiLU: return x / (1 + std::exp(-x));
    case QkvActivation::ReLU: return x > 0 ? x : 0;
    case QkvActivation::EluPlus1: return x > 0 ? x + 1 : std::exp(x);
  }
  return 0;
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// RMSNorm of a head's features with gain g and eps.
void rmsNormSegment(Eigen::Ref<Eigen::VectorXd> x, const MatX<double>& g, double eps) {
  const double r = 1.0 / std::sqrt(x.squaredNorm() / static_cast<double>(x.size()) + eps);
  x = (x.array() * r * g.col(0).array()).matrix();
}

// The authors' CausalSelfAttention.forward (model/DDL-gpt-mha-rope-CC-EC.py) in loops, in double.
MatX<double> referenceForward(Attention& a, const MatX<double>& c, Index B, Index T) {
  const auto cfg = a.config();
  const ddl::AttentionOptions& o = cfg.options;
  const Index H = cfg.heads, dh = a.headDim(), D = H * dh, N = B * T;
  auto p = namedParams(a);
  MatX<double> Q = p["q.weight"]->value * c, K = p["k.weight"]->value * c, V = p["v.weight"]->value * c;
  // ShiftLinear: the previous token's projection mixed in per head (zero before the first).
  auto shift = [&](MatX<double>& X, const std::string& name) {
    const MatX<double> Z = X, alpha = p[name]->value * c;
    for (Index n = 0; n < N; ++n)
      for (Index h = 0; h < H; ++h) {
        const double al = sigmoid(alpha(h, n));
        for (Index i = 0; i < dh; ++i)
          X(h * dh + i, n) = (1 - al) * Z(h * dh + i, n) + (n % T > 0 ? al * Z(h * dh + i, n - 1) : 0.0);
      }
  };
  if (o.kShift) shift(K, "k_shift.weight");
  if (o.vShift) shift(V, "v_shift.weight");
  Q = Q.unaryExpr([&](double x) { return act(o.qActivation, x); });
  K = K.unaryExpr([&](double x) { return act(o.kActivation, x); });
  V = V.unaryExpr([&](double x) { return act(o.vActivation, x); });
  // Rotary: int(d_h * ratio) rounded down to even, pairs (i, i + r/2), angle t base^(-2i/r).
  Index r = static_cast<Index>(static_cast<double>(dh) * o.ropeRatio);
  r -= r % 2;
  for (MatX<double>* X : {&Q, &K})
    for (Index n = 0; n < N; ++n)
      for (Index h = 0; h < H; ++h) {
        for (Index i = 0; i < r / 2; ++i) {
          const double ang = static_cast<double>(n % T) * std::pow(cfg.ropeBase, -2.0 * i / static_cast<double>(r));
          const double x1 = (*X)(h * dh + i, n), x2 = (*X)(h * dh + r / 2 + i, n);
          (*X)(h * dh + i, n) = x1 * std::cos(ang) - x2 * std::sin(ang);
          (*X)(h * dh + r / 2 + i, n) = x2 * std::cos(ang) + x1 * std::sin(ang);
        }
        if (cfg.qkNorm)
          rmsNormSegment(X->col(n).segment(h * dh, dh), (X == &Q ? p["q_norm.weight"] : p["k_norm.weight"])->value,
                         o.qkNormEps);
      }
  MatX<double> A = MatX<double>::Zero(D, N);
  for (Index b = 0; b < B; ++b)
    for (Index h = 0; h < H; ++h)
      for (Index t = 0; t < T; ++t) {
        std::vector<double> w(static_cast<std::size_t>(t + 1));
        double mx = -1e300, sum = 0;
        for (Index s = 0; s <= t; ++s) {
          w[s] = Q.col(b * T + t).segment(h * dh, dh).dot(K.col(b * T + s).segment(h * dh, dh)) /
                 std::sqrt(static_cast<double>(dh));
          mx = std::max(mx, w[s]);
        }
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (Index s = 0; s <= t; ++s)
          A.col(b * T + t).segment(h * dh, dh) += w[s] / sum * V.col(b * T + s).segment(h * dh, dh);
      }
  if (o.groupNorm || o.outputGate) {
    const auto& g = p[o.groupNorm ? "subln.weight" : "o_norm.weight"]->value;
    for (Index n = 0; n < N; ++n)
      for (Index h = 0; h < H; ++h) rmsNormSegment(A.col(n).segment(h * dh, dh), g, o.outputNormEps);
  }
  if (o.outputGate) {
    const MatX<double> U = p["g.weight"]->value * c;
    A.array() *= U.unaryExpr([](double u) { return u * sigmoid(u); }).array();
  }
  return p["o.weight"]->value * A;
}

// Backward of loss = <W, out> against central differences for every tensor, and forward against
// referenceForward. Returns the largest relErr over the input's and the parameters' gradients.
// h: the central differences' step. The usual 1e-6, except 1e-4 with every option on: there heads of
// one or two features behind norms of large eps make the scores barely depend on q and k, whose
// gradients are then near 1e-5, below the roundoff of h = 1e-6 (measured: the error scales as 1/h down
// from h = 1e-4, where the truncation error is still below 1e-7).
double checkCase(const Case& k, unsigned seed, double h = 1e-6) {
  Attention a(configOf(k));
  initRandomAttention(a, seed);
  const auto layout = ddl::TokenLayout::sequence(k.B, k.T);
  MatX<double> c = MatX<double>::Random(k.d, k.B * k.T);
  const MatX<double> W = MatX<double>::Random(k.d, k.B * k.T);
  auto loss = [&] {
    MatX<double> y;
    a.forwardInference(c, layout, y);
    return (W.array() * y.array()).sum();
  };
  MatX<double> out, dc;
  a.forward(c, layout, out);
  CHECK(ddl::testing::relErr(out, referenceForward(a, c, k.B, k.T)) < 1e-13);
  ddl::zeroGrad(a);
  a.backward(W, dc);
  const MatX<double> num = ddl::testing::numericGrad(c, loss, h);
  FD_CHECK(dc, num);
  double worst = ddl::testing::relErr(dc, num);
  a.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    CAPTURE(name);
    const MatX<double> g = ddl::testing::numericGrad(p.value, loss, h);
    FD_CHECK(p.grad, g);
    worst = std::max(worst, ddl::testing::relErr(p.grad, g));
  });
  return worst;
}

// Every option on. The norms' eps are large: an RMSNorm over a head of one feature with a small eps is
// nearly sign(x), whose gradients are too small for central differences to measure.
ddl::AttentionOptions allOptions(QkvActivation q, QkvActivation k, QkvActivation v) {
  ddl::AttentionOptions o;
  o.ropeRatio = 0.5;
  o.qkNormEps = 0.3;
  o.outputGate = true;
  o.groupNorm = true;
  o.outputNormEps = 0.2;
  o.kShift = true;
  o.vShift = true;
  o.qActivation = q;
  o.kActivation = k;
  o.vActivation = v;
  return o;
}

}  // namespace

TEST_CASE("each authors' attention option alone: forward as theirs, gradients as central differences",
          "[attention][options][fd]") {
  std::srand(41);
  double worst = 0;
  std::vector<std::pair<std::string, ddl::AttentionOptions>> single;
  {
    ddl::AttentionOptions o;
    single.emplace_back("plain", o);
    o.ropeRatio = 0.5;
    single.emplace_back("rope_ratio 0.5", o);
    o.ropeRatio = 0.0;
    single.emplace_back("rope_ratio 0", o);
    o = {};
    o.qkNormEps = 0.05;
    single.emplace_back("qk_norm_eps", o);
    o = {};
    o.outputGate = true;
    o.outputNormEps = 1e-2;
    single.emplace_back("use_output_gate", o);
    o = {};
    o.groupNorm = true;
    single.emplace_back("using_groupnorm", o);
    o = {};
    o.kShift = true;
    single.emplace_back("use_k_shift", o);
    o = {};
    o.vShift = true;
    single.emplace_back("use_v_shift", o);
    for (QkvActivation f : {QkvActivation::SiLU, QkvActivation::ReLU, QkvActivation::EluPlus1}) {
      o = {};
      o.qActivation = f;
      single.emplace_back("q_activation " + ddl::toString(f), o);
      o = {};
      o.kActivation = f;
      single.emplace_back("k_activation " + ddl::toString(f), o);
      o = {};
      o.vActivation = f;
      single.emplace_back("v_activation " + ddl::toString(f), o);
    }
  }
  for (const auto& [name, opt] : single) {
    CAPTURE(name);
    // head_dim 3 with d = 5 (not H * d_h), and d_h = d / H.
    worst = std::max(worst, checkCase({2, 4, 2, 3, 5, opt}, 1));
    worst = std::max(worst, checkCase({1, 3, 1, 4, 4, opt}, 2));
  }
  CHECK(worst < 1e-6);
  WARN("largest FD relErr over the single options: " << worst);
}

TEST_CASE("all authors' attention options at once, on random shapes with batch 1, one head and tiny heads",
          "[attention][options][fd]") {
  std::srand(42);
  double worst = 0;
  const std::vector<QkvActivation> acts{QkvActivation::Identity, QkvActivation::SiLU, QkvActivation::ReLU,
                                        QkvActivation::EluPlus1};
  unsigned seed = 3;
  for (const Case& shape : {Case{1, 1, 1, 1, 3, {}}, Case{1, 5, 1, 2, 2, {}}, Case{2, 3, 3, 1, 4, {}},
                            Case{1, 4, 2, 5, 7, {}}, Case{3, 2, 1, 6, 3, {}}, Case{2, 6, 2, 4, 8, {}}})
    for (std::size_t i = 0; i < acts.size(); ++i)
      for (bool qkNorm : {true, false}) {
        Case k = shape;
        k.qkNorm = qkNorm;
        k.opt = allOptions(acts[i], acts[(i + 1) % 4], acts[(i + 2) % 4]);
        k.opt.groupNorm = (seed % 2) == 0;  // the gate with its own o_norm, or with subln
        k.opt.ropeRatio = (seed % 3) == 0 ? 1.0 : 0.5;
        CAPTURE(k.B, k.T, k.H, k.dh, k.d, qkNorm, i, k.opt.groupNorm, k.opt.ropeRatio);
        worst = std::max(worst, checkCase(k, seed++, 1e-4));
      }
  CHECK(worst < 1e-6);
  WARN("largest FD relErr with every option on: " << worst);
}

TEST_CASE("the options' parameters: names, shapes and the output projection's width", "[attention][options]") {
  ddl::CausalSelfAttentionConfig cfg;
  cfg.d = 6;
  cfg.heads = 2;
  cfg.options = allOptions(QkvActivation::SiLU, QkvActivation::ReLU, QkvActivation::EluPlus1);
  cfg.options.headDim = 5;
  cfg.options.ropeRatio = 0.7;  // int(5 * 0.7) = 3, rounded down to 2
  Attention a(cfg);
  CHECK(a.headDim() == 5);
  CHECK(a.ropeDim() == 2);
  std::vector<std::string> names;
  std::map<std::string, std::pair<Index, Index>> shapes;
  a.visitParams("attn", [&](const std::string& name, ddl::Param<double>& p) {
    names.push_back(name);
    shapes[name] = {p.value.rows(), p.value.cols()};
  });
  CHECK(names == std::vector<std::string>{"attn.q.weight", "attn.k.weight", "attn.v.weight", "attn.o.weight",
                                          "attn.q_norm.weight", "attn.k_norm.weight", "attn.k_shift.weight",
                                          "attn.v_shift.weight", "attn.g.weight", "attn.subln.weight"});
  CHECK(shapes["attn.q.weight"] == std::pair<Index, Index>{10, 6});
  CHECK(shapes["attn.o.weight"] == std::pair<Index, Index>{6, 10});
  CHECK(shapes["attn.k_shift.weight"] == std::pair<Index, Index>{2, 6});
  CHECK(shapes["attn.g.weight"] == std::pair<Index, Index>{10, 6});
  CHECK(shapes["attn.subln.weight"] == std::pair<Index, Index>{5, 1});
  cfg.options.groupNorm = false;
  Attention b(cfg);
  CHECK(namedParams(b).count("o_norm.weight") == 1);
  CHECK(namedParams(b).count("subln.weight") == 0);
  // Their rope_ratio rounding: int(d_h * ratio), then down to even.
  CHECK(ddl::AttentionOptions::ropeDim(128, 0.5) == 64);
  CHECK(ddl::AttentionOptions::ropeDim(6, 0.5) == 2);
  CHECK(ddl::AttentionOptions::ropeDim(7, 1.0) == 6);
  CHECK(ddl::AttentionOptions::ropeDim(10, 0.25) == 2);
  CHECK(ddl::AttentionOptions::ropeDim(3, 0.3) == 0);
}

TEST_CASE("the token shift and the activations alone: forward formulas and their own finite differences",
          "[attention][options][fd]") {
  std::srand(5);
  const Index H = 2, dh = 3, T = 4, B = 2;
  const MatX<double> Z = MatX<double>::Random(H * dh, B * T);
  MatX<double> logits = MatX<double>::Random(H, B * T);
  MatX<double> alpha = logits.unaryExpr([](double x) { return sigmoid(x); });
  MatX<double> Y;
  ddl::tokenShift<double>(Z, alpha, T, nullptr, Y);
  CHECK(std::abs(Y(4, 1) - (alpha(1, 1) * Z(4, 0) + (1 - alpha(1, 1)) * Z(4, 1))) < 1e-15);
  CHECK(std::abs(Y(4, 4) - (1 - alpha(1, 4)) * Z(4, 4)) < 1e-15);  // a sequence's first token: no previous
  const MatX<double> W = MatX<double>::Random(H * dh, B * T);
  MatX<double> dZ, dLogit;
  ddl::tokenShiftBackward<double>(Z, alpha, T, W, dZ, dLogit);
  MatX<double> z = Z;
  auto lossZ = [&] {
    MatX<double> y;
    ddl::tokenShift<double>(z, alpha, T, nullptr, y);
    return (W.array() * y.array()).sum();
  };
  FD_CHECK(dZ, ddl::testing::numericGrad(z, lossZ));
  auto lossLogit = [&] {
    const MatX<double> al = logits.unaryExpr([](double x) { return sigmoid(x); });
    MatX<double> y;
    ddl::tokenShift<double>(Z, al, T, nullptr, y);
    return (W.array() * y.array()).sum();
  };
  FD_CHECK(dLogit, ddl::testing::numericGrad(logits, lossLogit));
  for (QkvActivation f : {QkvActivation::Identity, QkvActivation::SiLU, QkvActivation::ReLU, QkvActivation::EluPlus1}) {
    CAPTURE(ddl::toString(f));
    MatX<double> X = MatX<double>::Random(5, 7) * 2;
    X(0, 0) = 0.3;  // away from the kinks at 0
    MatX<double> Yf, dX(5, 7);
    ddl::qkvActivate<double>(f, X, Yf);
    for (Index j = 0; j < X.cols(); ++j)
      for (Index i = 0; i < X.rows(); ++i) CHECK(std::abs(Yf(i, j) - act(f, X(i, j))) < 1e-15);
    ddl::qkvActivateBackward<double>(f, X, W.topLeftCorner(5, 7), dX);
    auto loss = [&] {
      MatX<double> y;
      ddl::qkvActivate<double>(f, X, y);
      return (W.topLeftCorner(5, 7).array() * y.array()).sum();
    };
    FD_CHECK(dX, ddl::testing::numericGrad(X, loss));
  }
}

TEST_CASE("the options are refused by name when their values cannot be built", "[attention][options][errors]") {
  ddl::CausalSelfAttentionConfig cfg;
  cfg.d = 8;
  cfg.heads = 3;  // 8 / 3 is no head size, but head_dim 4 is
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { Attention x(cfg); }), "d = 8 is not divisible by heads = 3"));
  cfg.options.headDim = 4;
  CHECK_NOTHROW(Attention(cfg));
  cfg.options.headDim = -1;
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { Attention x(cfg); }), "head_dim must be >= 0"));
  cfg.options.headDim = 4;
  cfg.options.ropeRatio = std::nan("");
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { Attention x(cfg); }), "rope_ratio must be in [0, 1], got nan"));
  cfg.options.ropeRatio = 1;
  cfg.options.qkNormEps = -1;
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { Attention x(cfg); }), "qk_norm_eps must be finite and >= 0"));
  cfg.options.qkNormEps = 1e-5;
  cfg.options.outputNormEps = INFINITY;
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { Attention x(cfg); }), "output_norm_eps must be finite"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::parseQkvActivation("gelu", "k_activation"); }),
                 "ddl::parseQkvActivation: unsupported k_activation 'gelu', expected one of identity, silu, relu, "
                 "elu+1"));
  CHECK(ddl::parseQkvActivation("elu") == QkvActivation::EluPlus1);  // their alias
  CHECK(ddl::parseQkvActivation("none") == QkvActivation::Identity);
  ddl::DeltaLMConfig lm;
  lm.attention.ropeRatio = 2;
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { lm.validate(); }),
                 "ddl::DeltaLMConfig: rope_ratio must be in [0, 1], got 2"));
}

TEST_CASE("DeltaLMConfig writes and reads the attention options under the authors' names",
          "[attention][options][keys]") {
  ddl::DeltaLMConfig c;
  c.d = 12;
  c.heads = 2;
  c.attention = allOptions(QkvActivation::SiLU, QkvActivation::Identity, QkvActivation::EluPlus1);
  c.attention.headDim = 4;
  const ddl::KeyValues kv = c.toKeyValues();
  CHECK(kv.at("head_dim") == "4");
  CHECK(kv.at("rope_ratio") == "0.5");
  CHECK(kv.at("use_output_gate") == "1");
  CHECK(kv.at("using_groupnorm") == "1");
  CHECK(kv.at("use_k_shift") == "1");
  CHECK(kv.at("use_v_shift") == "1");
  CHECK(kv.at("q_activation") == "silu");
  CHECK(kv.at("k_activation") == "identity");
  CHECK(kv.at("v_activation") == "elu+1");
  const ddl::DeltaLMConfig r = ddl::DeltaLMConfig::fromKeyValues(kv);
  CHECK(r.toKeyValues() == kv);
  CHECK(r.headDim() == 4);
  CHECK(r.attention.outputNormEps == 0.2);
  // The default writes head_dim = d / heads and reads it back as 0 (d / heads).
  ddl::DeltaLMConfig plain;
  CHECK(plain.toKeyValues().at("head_dim") == "64");
  CHECK(ddl::DeltaLMConfig::fromKeyValues(plain.toKeyValues()).attention.headDim == 0);
  // An older checkpoint has none of the keys: defaults, and the QK norms keep norm_eps.
  ddl::KeyValues old = plain.toKeyValues();
  for (const char* key : {"head_dim", "rope_ratio", "qk_norm_eps", "use_output_gate", "using_groupnorm",
                          "output_norm_eps", "use_k_shift", "use_v_shift", "q_activation", "k_activation",
                          "v_activation"})
    CHECK(old.erase(key) == 1);
  old["norm_eps"] = "1e-6";
  const ddl::DeltaLMConfig o = ddl::DeltaLMConfig::fromKeyValues(old);
  CHECK(o.attention.qkNormEps == 1e-6);
  CHECK(!o.attention.anyTransform());
  CHECK(o.attention.headDim == 0);
  CHECK(o.attention.ropeRatio == 1.0);
  ddl::KeyValues bad = kv;
  bad["v_activation"] = "tanh";
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::DeltaLMConfig::fromKeyValues(bad); }),
                 "unsupported v_activation 'tanh'"));
}

}  // namespace test_attention_options
