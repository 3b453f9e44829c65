// Tests for causal self-attention (nn/blocks/causal_self_attention.hpp) and RoPE (ops/rotary.hpp): the forward
// against a loop-by-loop reference, every gradient against central differences in double, causality,
// the rotation itself, thread-count independence and the error messages.
#include "eigen_guard.hpp"  // first: eigen_assert throws even with NDEBUG

#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fd_check.hpp"
#include "fixtures.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/nn/blocks/causal_self_attention.hpp"
#include "ddl/ops/rotary.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_attention {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl_test::contains;
using ddl_test::thrownMessage;
using ddl_test::initRandomAttention;
using ddl_test::namedParams;
using Attention = ddl::CausalSelfAttention<double>;

namespace {

struct Shape {
  Index B, T, H, dh;
};

ddl::CausalSelfAttentionConfig configOf(const Shape& s, bool qkNorm) {
  ddl::CausalSelfAttentionConfig cfg;
  cfg.d = s.H * s.dh;
  cfg.heads = s.H;
  cfg.qkNorm = qkNorm;
  return cfg;
}

// The definition in loops, in double, with its own cos/sin: what forward must compute.
MatX<double> referenceForward(Attention& a, const MatX<double>& c, Index B, Index T) {
  const auto cfg = a.config();
  const Index d = cfg.d, H = cfg.heads, dh = d / H, half = dh / 2, N = B * T;
  auto p = namedParams(a);
  MatX<double> Q = p["q.weight"]->value * c, K = p["k.weight"]->value * c;
  const MatX<double> V = p["v.weight"]->value * c;
  for (MatX<double>* X : {&Q, &K}) {
    for (Index n = 0; n < N; ++n)
      for (Index h = 0; h < H; ++h) {
        for (Index i = 0; i < half; ++i) {
          const double ang = static_cast<double>(n % T) * std::pow(cfg.ropeBase, -2.0 * i / dh);
          const double x1 = (*X)(h * dh + i, n), x2 = (*X)(h * dh + half + i, n);
          (*X)(h * dh + i, n) = x1 * std::cos(ang) - x2 * std::sin(ang);
          (*X)(h * dh + half + i, n) = x2 * std::cos(ang) + x1 * std::sin(ang);
        }
        if (cfg.qkNorm) {
          const auto& g = (X == &Q ? p["q_norm.weight"] : p["k_norm.weight"])->value;
          auto seg = X->col(n).segment(h * dh, dh);
          const double r = 1.0 / std::sqrt(seg.squaredNorm() / dh + cfg.options.qkNormEps);
          seg = (seg.array() * r * g.col(0).array()).matrix();
        }
      }
  }
  MatX<double> A = MatX<double>::Zero(d, N);
  for (Index b = 0; b < B; ++b)
    for (Index h = 0; h < H; ++h)
      for (Index t = 0; t < T; ++t) {
        std::vector<double> w(static_cast<std::size_t>(t + 1));
        double mx = -1e300, sum = 0;
        for (Index s = 0; s <= t; ++s) {
          w[s] = Q.col(b * T + t).segment(h * dh, dh).dot(K.col(b * T + s).segment(h * dh, dh)) / std::sqrt(dh);
          mx = std::max(mx, w[s]);
        }
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (Index s = 0; s <= t; ++s) A.col(b * T + t).segment(h * dh, dh) += w[s] / sum * V.col(b * T + s).segment(h * dh, dh);
      }
  return p["o.weight"]->value * A;
}

// Restores the thread count a test changed.
struct ThreadGuard {
  int saved = ddl::numThreads();
  ~ThreadGuard() { ddl::setNumThreads(saved); }
};

// Backward of loss = <W, out> for random c and W (std::rand, c first) against central differences: the
// input's gradient and every parameter's, each by FD_CHECK and relErr < 1e-7. With checkForward, the
// forward output is first checked against referenceForward (relErr < 1e-13). Returns the parameters'
// names in visit order.
std::vector<std::string> checkGradientsAgainstFD(Attention& a, const Shape& s, bool checkForward) {
  const auto layout = ddl::TokenLayout::sequence(s.B, s.T);
  MatX<double> c = MatX<double>::Random(s.H * s.dh, s.B * s.T);
  const MatX<double> W = MatX<double>::Random(s.H * s.dh, s.B * s.T);  // loss = <W, out>, so dOut = W
  auto loss = [&] {
    MatX<double> y;
    a.forwardInference(c, layout, y);
    return (W.array() * y.array()).sum();
  };
  MatX<double> out, dc;
  a.forward(c, layout, out);
  if (checkForward) CHECK(ddl::testing::relErr(out, referenceForward(a, c, s.B, s.T)) < 1e-13);
  ddl::zeroGrad(a);
  a.backward(W, dc);
  const MatX<double> num = ddl::testing::numericGrad(c, loss);
  FD_CHECK(dc, num);
  CHECK(ddl::testing::relErr(dc, num) < 1e-7);
  std::vector<std::string> names;
  a.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    CAPTURE(name);
    names.push_back(name);
    const MatX<double> g = ddl::testing::numericGrad(p.value, loss);
    FD_CHECK(p.grad, g);
    CHECK(ddl::testing::relErr(p.grad, g) < 1e-7);
  });
  return names;
}

}  // namespace

// ---------------------------------------------------------------- RoPE

TEST_CASE("RoPE is the identity at position 0 and matches explicit cos and sin for d_h = 2 and 4", "[rope]") {
  std::srand(3);
  const Index T = 4, B = 2;
  {
    ddl::RotaryTable<double> table(2, 10000.0);
    table.reserve(T);
    const MatX<double> X = MatX<double>::Random(6, B * T);  // 3 heads of d_h = 2
    MatX<double> Y = X;
    ddl::applyRotary(Y, T, table);
    for (Index n = 0; n < B * T; ++n) {
      const double t = static_cast<double>(n % T);  // d_h = 2: one pair, angle t * base^0 = t
      for (Index h = 0; h < 3; ++h) {
        CAPTURE(n, h);
        const double x1 = X(2 * h, n), x2 = X(2 * h + 1, n);
        CHECK(std::abs(Y(2 * h, n) - (x1 * std::cos(t) - x2 * std::sin(t))) < 1e-15);
        CHECK(std::abs(Y(2 * h + 1, n) - (x2 * std::cos(t) + x1 * std::sin(t))) < 1e-15);
      }
      if (n % T == 0) CHECK(Y.col(n) == X.col(n));
    }
  }
  {
    // d_h = 4, base 10000: pair (0, 2) turns by t, pair (1, 3) by t / 100.
    ddl::RotaryTable<double> table(4, 10000.0);
    table.reserve(T);
    const MatX<double> X = MatX<double>::Random(4, T);
    MatX<double> Y = X;
    ddl::applyRotary(Y, T, table);
    CHECK(Y.col(0) == X.col(0));
    for (Index t = 1; t < T; ++t) {
      const double a0 = static_cast<double>(t), a1 = t / 100.0;
      CHECK(std::abs(Y(0, t) - (X(0, t) * std::cos(a0) - X(2, t) * std::sin(a0))) < 1e-15);
      CHECK(std::abs(Y(2, t) - (X(2, t) * std::cos(a0) + X(0, t) * std::sin(a0))) < 1e-15);
      CHECK(std::abs(Y(1, t) - (X(1, t) * std::cos(a1) - X(3, t) * std::sin(a1))) < 1e-15);
      CHECK(std::abs(Y(3, t) - (X(3, t) * std::cos(a1) + X(1, t) * std::sin(a1))) < 1e-15);
    }
    // The inverse is the transpose: <R x, y> = <x, Rᵀ y>, and it undoes the rotation.
    const MatX<double> Z = MatX<double>::Random(4, T);
    MatX<double> Zt = Z, back = Y;
    ddl::applyRotary(Zt, T, table, true);
    ddl::applyRotary(back, T, table, true);
    CHECK(std::abs((Y.array() * Z.array()).sum() - (X.array() * Zt.array()).sum()) < 1e-14);
    CHECK(ddl::testing::relErr(back, X) < 1e-15);
  }
}

TEST_CASE("RoPE rejects odd head sizes and shapes that do not fit", "[rope][errors]") {
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::RotaryTable<double>(3, 10000.0); }),
                 "ddl::RotaryTable: the head size must be even and >= 2, got 3"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::RotaryTable<double>(4, 0.0); }), "base must be finite"));
  ddl::RotaryTable<double> table(4, 10000.0);
  table.reserve(3);
  MatX<double> X = MatX<double>::Zero(8, 6);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::applyRotary(X, 4, table); }),
                 "ddl::applyRotary: X has 6 columns, not a whole number of sequences of length T = 4"));
  MatX<double> Y = MatX<double>::Zero(6, 6);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::applyRotary(Y, 3, table); }),
                 "X has 6 rows, not a whole number of heads of size 4"));
  MatX<double> Z = MatX<double>::Zero(8, 12);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::applyRotary(Z, 6, table); }),
                 "the table covers 3 positions, the columns reach position 5"));
  MatX<double> W = MatX<double>::Zero(8, 2);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::applyRotaryFrom(W, 2, table); }),
                 "ddl::applyRotaryFrom: the table covers 3 positions, the columns reach position 3"));
}

TEST_CASE("RoPE from a position offset turns each column as applyRotary does at that position, bit for bit",
          "[rope]") {
  std::srand(11);
  const Index T = 9;
  for (const Index dh : {2, 4, 8}) {
    ddl::RotaryTable<float> table(dh, 500.0);
    table.reserve(T);
    const MatX<float> X = MatX<float>::Random(3 * dh, T);  // one sequence, 3 heads
    MatX<float> whole = X;
    ddl::applyRotary(whole, T, table);
    for (const Index first : {0, 1, 4, 8}) {
      for (Index n = 1; first + n <= T; n += 3) {
        CAPTURE(dh, first, n);
        MatX<float> part = X.middleCols(first, n);
        ddl::applyRotaryFrom(part, first, table);
        CHECK(part == whole.middleCols(first, n));
      }
    }
  }
}

// ---------------------------------------------------------------- forward

TEST_CASE("CausalSelfAttention forward equals the definition, forwardInference gives the same bits", "[attention]") {
  const Shape shapes[] = {{1, 1, 1, 2}, {2, 5, 2, 4}, {3, 4, 3, 2}, {1, 7, 1, 6}};
  for (const Shape& s : shapes)
    for (bool qkNorm : {true, false}) {
      CAPTURE(s.B, s.T, s.H, s.dh, qkNorm);
      Attention a(configOf(s, qkNorm));
      initRandomAttention(a, 11);
      const MatX<double> c = 2 * MatX<double>::Random(s.H * s.dh, s.B * s.T);
      MatX<double> out, outInf;
      a.forward(c, ddl::TokenLayout::sequence(s.B, s.T), out);
      CHECK(ddl::testing::relErr(out, referenceForward(a, c, s.B, s.T)) < 1e-13);
      a.forwardInference(c, ddl::TokenLayout::sequence(s.B, s.T), outInf);
      CHECK(outInf == out);
    }
}

TEST_CASE("CausalSelfAttention is causal: later tokens and other sequences never reach an output", "[attention]") {
  const Shape s{3, 6, 2, 4};
  Attention a(configOf(s, true));
  initRandomAttention(a, 7);
  const auto layout = ddl::TokenLayout::sequence(s.B, s.T);
  const MatX<double> c = MatX<double>::Random(s.H * s.dh, s.B * s.T);
  MatX<double> out0, out;
  a.forward(c, layout, out0);
  for (Index b = 0; b < s.B; ++b)
    for (Index t = 0; t + 1 < s.T; ++t) {
      CAPTURE(b, t);
      MatX<double> c2 = c;
      c2.middleCols(b * s.T + t + 1, s.T - t - 1).setRandom();
      a.forward(c2, layout, out);
      const MatX<double> diff = (out - out0).cwiseAbs();
      CHECK(diff.middleCols(b * s.T, t + 1).maxCoeff() == 0.0);          // positions <= t of sequence b
      CHECK(diff.middleCols(b * s.T + t + 1, s.T - t - 1).maxCoeff() > 1e-6);  // the change is seen later
      for (Index o = 0; o < s.B; ++o)
        if (o != b) CHECK(diff.middleCols(o * s.T, s.T).maxCoeff() == 0.0);  // other sequences untouched
    }
}

// ---------------------------------------------------------------- gradients

TEST_CASE("CausalSelfAttention backward matches central differences", "[grad][attention]") {
  const auto seed = GENERATE(take(4, random(1u, 1000000u)));
  std::mt19937 gen(seed);
  auto pick = [&](int lo, int hi) { return static_cast<Index>(std::uniform_int_distribution<int>(lo, hi)(gen)); };
  // Edge shapes (B = 1, T = 1, one head, d_h = 2) and one random shape per seed.
  const Shape shapes[] = {{1, 1, 1, 2}, {1, 5, 1, 2}, {2, 1, 2, 4}, {2, 4, 3, 2},
                          {pick(1, 3), pick(1, 6), pick(1, 3), 2 * pick(1, 4)}};
  for (const Shape& s : shapes)
    for (bool qkNorm : {true, false}) {
      CAPTURE(seed, s.B, s.T, s.H, s.dh, qkNorm);
      Attention a(configOf(s, qkNorm));
      initRandomAttention(a, seed);
      const std::vector<std::string> names = checkGradientsAgainstFD(a, s, false);
      CHECK(names.size() == (qkNorm ? 6u : 4u));
    }
}

TEST_CASE("CausalSelfAttention backward over several causal blocks (T > 64) matches central differences",
          "[grad][attention]") {
  // The core's products are cut into 64-query / 64-key blocks: T = 65 is a full block and one query,
  // T = 130 two full blocks and one of 2; forward against the definition, every gradient against FD.
  const Shape shapes[] = {{1, 65, 1, 4}, {2, 130, 2, 2}};
  for (const Shape& s : shapes)
    for (bool qkNorm : {true, false}) {
      CAPTURE(s.B, s.T, s.H, s.dh, qkNorm);
      Attention a(configOf(s, qkNorm));
      initRandomAttention(a, 17);
      checkGradientsAgainstFD(a, s, true);
    }
}

TEST_CASE("CausalSelfAttention names its parameters as PyTorch and starts its gains at 1", "[attention]") {
  Attention a(configOf({1, 1, 2, 4}, true));
  std::vector<std::string> names;
  a.visitParams("attn", [&](const std::string& name, ddl::Param<double>& p) {
    names.push_back(name);
    if (contains(name, "norm")) {
      CHECK(p.shape == std::vector<Index>{4});
      CHECK(p.value == MatX<double>::Ones(4, 1));
      CHECK_FALSE(p.decay);
    } else {
      CHECK(p.shape == std::vector<Index>{8, 8});
    }
  });
  CHECK(names == std::vector<std::string>{"attn.q.weight", "attn.k.weight", "attn.v.weight", "attn.o.weight",
                                          "attn.q_norm.weight", "attn.k_norm.weight"});
}

TEST_CASE("CausalSelfAttention gives the same bits on one and two threads", "[attention][threads]") {
  ThreadGuard guard;
  // 4 (b, h) pairs of T = 128, d_h = 16: above the threshold where the pairs are split over threads.
  const Shape s{2, 128, 2, 16};
  Attention a(configOf(s, true));
  initRandomAttention(a, 21);
  const auto layout = ddl::TokenLayout::sequence(s.B, s.T);
  const MatX<double> c = MatX<double>::Random(s.H * s.dh, s.B * s.T);
  const MatX<double> dOut = MatX<double>::Random(s.H * s.dh, s.B * s.T);
  MatX<double> out1, dc1;
  std::vector<MatX<double>> grads1;
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    ddl::setNumThreads(threads);
    MatX<double> out, dc;
    a.forward(c, layout, out);
    ddl::zeroGrad(a);
    a.backward(dOut, dc);
    std::vector<MatX<double>> grads;
    a.visitParams("", [&](const std::string&, ddl::Param<double>& p) { grads.push_back(p.grad); });
    if (threads == 1) {
      out1 = out;
      dc1 = dc;
      grads1 = grads;
      CHECK(ddl::testing::relErr(out, referenceForward(a, c, s.B, s.T)) < 1e-12);
    } else {
      CHECK(out == out1);
      CHECK(dc == dc1);
      REQUIRE(grads.size() == grads1.size());
      for (std::size_t i = 0; i < grads.size(); ++i) CHECK(grads[i] == grads1[i]);
    }
  }
}

TEST_CASE("CausalSelfAttention: an inference call between forward and backward changes nothing, a steady "
          "state allocates nothing", "[attention][malloc]") {
  const Shape s{2, 5, 2, 4};
  Attention a(configOf(s, true));
  initRandomAttention(a, 5);
  const auto layout = ddl::TokenLayout::sequence(s.B, s.T);
  const MatX<double> c = MatX<double>::Random(8, 10), other = MatX<double>::Random(8, 21);
  const MatX<double> dOut = MatX<double>::Random(8, 10);
  MatX<double> out, outOther, dc, dcRef;
  a.forward(c, layout, out);
  ddl::zeroGrad(a);
  a.backward(dOut, dcRef);
  const std::vector<MatX<double>> gradsRef = ddl_test::paramGrads(a);

  a.forward(c, layout, out);
  a.forwardInference(other, ddl::TokenLayout::sequence(3, 7), outOther);  // another shape in between
  ddl::zeroGrad(a);
  a.backward(dOut, dc);
  CHECK(dc == dcRef);
  ddl_test::checkGradsEqual(a, gradsRef);

  auto step = [&] {
    a.forward(c, layout, out);
    a.forwardInference(c, layout, outOther);
    a.backward(dOut, dc);
  };
  step();  // buffers take this shape
  Eigen::internal::set_is_malloc_allowed(false);  // Eigen's allocations now throw (tests/eigen_guard.hpp)
  CHECK_NOTHROW(step());
  Eigen::internal::set_is_malloc_allowed(true);
  CHECK_THROWS([] {  // the guard really fires in this build
    Eigen::internal::set_is_malloc_allowed(false);
    struct Restore {
      ~Restore() { Eigen::internal::set_is_malloc_allowed(true); }
    } restore;
    MatX<double> m(10, 10);
  }());
}

// ---------------------------------------------------------------- errors

TEST_CASE("CausalSelfAttention rejects bad options, shapes, layouts and misuse with clear errors",
          "[attention][errors]") {
  ddl::CausalSelfAttentionConfig cfg;
  cfg.d = 12;
  cfg.heads = 5;
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { Attention x(cfg); }),
                 "ddl::CausalSelfAttention: d = 12 is not divisible by heads = 5"));
  cfg.heads = 4;  // d_h = 3: RoPE turns the first 2 features of each head (the authors' rounding)
  CHECK(Attention(cfg).ropeDim() == 2);
  cfg.options.ropeRatio = 1.5;
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { Attention x(cfg); }),
                 "ddl::CausalSelfAttention: rope_ratio must be in [0, 1], got 1.5"));
  cfg.options.ropeRatio = 1;
  cfg.heads = 0;
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { Attention x(cfg); }), "heads = 0"));

  Attention a(configOf({2, 3, 2, 4}, true));
  MatX<double> out, dc;
  CHECK(contains(thrownMessage<ddl::Error>([&] { a.backward(MatX<double>::Zero(8, 6), dc); }),
                 "ddl::CausalSelfAttention::backward: called before forward"));
  const MatX<double> c = MatX<double>::Random(8, 6);
  CHECK(contains(thrownMessage<ddl::ShapeError>([&] {
                   a.forward(MatX<double>::Zero(7, 6), ddl::TokenLayout::sequence(2, 3), out);
                 }),
                 "ddl::CausalSelfAttention::forward: c has shape (7, 6), expected (8, any)"));
  CHECK(contains(thrownMessage<ddl::ShapeError>([&] { a.forward(c, ddl::TokenLayout::sequence(2, 4), out); }),
                 "c has 6 columns but the layout (B=2, H=1, W=1, T=4) has 8 tokens"));
  CHECK(contains(thrownMessage<ddl::ShapeError>([&] { a.forwardInference(c, ddl::TokenLayout::image(1, 2, 3), out); }),
                 "ddl::CausalSelfAttention::forwardInference: needs a sequence layout"));
  a.forward(c, ddl::TokenLayout::sequence(2, 3), out);
  CHECK(contains(thrownMessage<ddl::ShapeError>([&] { a.backward(MatX<double>::Zero(8, 5), dc); }),
                 "dOut has shape (8, 5), expected (8, 6)"));
  MatX<double> same = c;
  CHECK(contains(thrownMessage<ddl::Error>([&] { a.forward(same, ddl::TokenLayout::sequence(2, 3), same); }),
                 "out must not alias c"));
}

}  // namespace test_attention
