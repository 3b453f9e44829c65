// Tests for the expanded-state modules of sequences: StateConv and ConvExpansion (nn/layers/state_conv.hpp)
// and TokenCompressor (nn/blocks/token_compressor.hpp). Forwards against the definitions written out here,
// backwards against central differences in double, decoding steps against forwardInference.
#include "eigen_guard.hpp"  // first: live allocation checks even with NDEBUG

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "catch_compat.hpp"
#include "eigen_guard_fires.hpp"
#include "fixtures.hpp"
#include "layer_grad_check.hpp"
#include "fd_check.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/nn/blocks/compressor.hpp"
#include "ddl/nn/layers/state_conv.hpp"
#include "ddl/nn/blocks/token_compressor.hpp"
#include "ddl/nn/layers/token_conv.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_state_conv {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl::TokenLayout;
using ddl::testing::numericGrad;
using ddl::testing::relErr;
using ddl_test::contains;
using ddl_test::thrownMessage;

namespace {

struct Shape {
  Index d, dv, K, B, T;
};

// Every combination of d in {1, 3}, dv in {1, 3}, K in {1, 2, 4}, B in {1, 2}, T in {1, 3, 6}
// (T < K, T = K - 1, T > K all occur).
std::vector<Shape> allShapes() {
  std::vector<Shape> shapes;
  for (Index d : {1, 3})
    for (Index dv : {1, 3})
      for (Index K : {1, 2, 4})
        for (Index B : {1, 2})
          for (Index T : {1, 3, 6}) shapes.push_back(Shape{d, dv, K, B, T});
  return shapes;
}

// A small random shape from a seed, which also seeds std::rand: d in 1..4, dv in 1..3, K in 1..4, B = 2,
// T in 1..6, drawn in that order.
Shape seededShape(unsigned seed) {
  std::mt19937 gen(seed);
  std::srand(seed);
  const Index d = ddl_test::randInt(gen, 1, 4), dv = ddl_test::randInt(gen, 1, 3);
  const Index K = ddl_test::randInt(gen, 1, 4), T = ddl_test::randInt(gen, 1, 6);
  return Shape{d, dv, K, 2, T};
}

// The definitions, written independently of the modules' loops. Channel (i, j) of the state is
// X(i, j*N + n); its weight row is o = i*dv + j; tap s reads the token K-1-s positions back.
MatX<double> refStateConv(const MatX<double>& w, const MatX<double>& X, Index d, Index dv, Index B, Index T) {
  const Index K = w.cols(), N = B * T;
  MatX<double> Y = MatX<double>::Zero(d, dv * N);
  for (Index i = 0; i < d; ++i)
    for (Index j = 0; j < dv; ++j)
      for (Index b = 0; b < B; ++b)
        for (Index t = 0; t < T; ++t)
          for (Index s = 0; s < K; ++s) {
            const Index src = t - K + 1 + s;
            if (src >= 0) Y(i, j * N + b * T + t) += w(i * dv + j, s) * X(i, j * N + b * T + src);
          }
  return Y;
}

MatX<double> refExpansion(const MatX<double>& w, const MatX<double>& x, Index d, Index dv, Index B, Index T) {
  const Index N = B * T;
  MatX<double> X(d, dv * N);
  for (Index j = 0; j < dv; ++j) X.middleCols(j * N, N) = x;
  return refStateConv(w, X, d, dv, B, T);  // a conv of the repetition x 1ᵀ
}

MatX<double> refTokenCompressor(const MatX<double>& w, const MatX<double>& r, const MatX<double>& X, Index d,
                                Index dv, Index B, Index T) {
  const Index N = B * T;
  const MatX<double> Y = refStateConv(w, X, d, dv, B, T);
  MatX<double> xin = MatX<double>::Zero(d, N);
  for (Index j = 0; j < dv; ++j) xin += r(j, 0) * Y.middleCols(j * N, N);
  return xin;
}

// Every parameter random in [-1, 1].
template <class Module>
void randomParams(Module& m) {
  m.visitParams("", [](const std::string&, ddl::Param<double>& p) { p.value.setRandom(); });
}

// Central-difference check of the input and of every parameter for loss = <W, out>, dOut = W, of a
// module with forward(in, layout, out), forwardInference and backward(dOut, dIn). Conv weights ("weight",
// "conv.weight") must have exactly zero gradient on the taps s < K - T, which only ever see padding.
template <class Module>
void checkGrads(Module& m, MatX<double>& in, const TokenLayout& layout, Index K) {
  MatX<double> out;
  m.forward(in, layout, out);
  const MatX<double> W = MatX<double>::Random(out.rows(), out.cols());
  auto loss = [&] {
    MatX<double> o;
    m.forwardInference(in, layout, o);
    return (W.array() * o.array()).sum();
  };
  ddl::zeroGrad(m);
  MatX<double> dIn;
  m.backward(W, dIn);
  REQUIRE(dIn.rows() == in.rows());
  REQUIRE(dIn.cols() == in.cols());
  FD_CHECK(dIn, numericGrad(in, loss));
  m.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    CAPTURE(name);
    FD_CHECK(p.grad, numericGrad(p.value, loss));
    if (name != "read.weight") {
      const Index dead = std::max<Index>(0, K - layout.length);
      CHECK(p.grad.leftCols(dead).isZero(0));
      CHECK(p.grad.rightCols(K - dead).norm() > 0);
    } else {
      CHECK(p.grad.norm() > 0);
    }
  });
}

// For every shape: a Module(d, dv, K) with random parameters, on a random input of d rows and dv * N
// columns (a state) or N columns (a token vector), gives ref(module, input, shape) to 1e-14, and its
// backward matches central differences (checkGrads).
template <class Module, class Ref>
void checkDefinitionOnAllShapes(bool stateInput, Ref ref) {
  for (const Shape& c : allShapes()) {
    CAPTURE(c.d, c.dv, c.K, c.B, c.T);
    Module m(c.d, c.dv, c.K);
    randomParams(m);
    const auto layout = TokenLayout::sequence(c.B, c.T);
    MatX<double> in = MatX<double>::Random(c.d, (stateInput ? c.dv : 1) * layout.tokens()), out;
    m.forward(in, layout, out);
    CHECK(relErr(out, ref(m, in, c)) < 1e-14);
    checkGrads(m, in, layout, c.K);
  }
}

// A Module<double>(d, dv, K) with random parameters and its float twin (the same values, cast), on the
// same input and output gradient: forward, then backward, each double first; the outputs, the input
// gradients and every parameter's gradient agree to tol.
template <template <class> class Module>
void checkFloatTwin(Index d, Index dv, Index K, const MatX<double>& in, const MatX<double>& dOut,
                    const TokenLayout& layout, double tol) {
  Module<double> md(d, dv, K);
  Module<float> mf(d, dv, K);
  randomParams(md);
  const std::vector<MatX<double>> values = ddl_test::paramValues(md);
  std::size_t i = 0;
  mf.visitParams("", [&](const std::string&, ddl::Param<float>& p) { p.value = values[i++].cast<float>(); });
  MatX<double> out, dIn;
  MatX<float> outf, dInf;
  md.forward(in, layout, out);
  mf.forward(in.cast<float>(), layout, outf);
  md.backward(dOut, dIn);
  mf.backward(dOut.cast<float>(), dInf);
  CHECK(relErr(outf.cast<double>(), out) < tol);
  CHECK(relErr(dInf.cast<double>(), dIn) < tol);
  std::vector<MatX<double>> grads;
  md.visitParams("", [&](const std::string&, ddl::Param<double>& p) { grads.push_back(p.grad); });
  i = 0;
  mf.visitParams("", [&](const std::string& name, ddl::Param<float>& p) {
    CAPTURE(name);
    CHECK(relErr(p.grad.cast<double>(), grads[i++]) < tol);
  });
}

}  // namespace

// ---------------------------------------------------------------- definitions and gradients

TEST_CASE("StateConv computes the definition and its backward matches central differences", "[state_conv][grad]") {
  std::srand(101);
  checkDefinitionOnAllShapes<ddl::StateConv<double>>(true, [](auto& conv, const MatX<double>& X, const Shape& c) {
    return refStateConv(conv.weight().value, X, c.d, c.dv, c.B, c.T);
  });
}

TEST_CASE("ConvExpansion computes the definition and its backward matches central differences",
          "[conv_expansion][grad]") {
  std::srand(102);
  checkDefinitionOnAllShapes<ddl::ConvExpansion<double>>(false, [](auto& ec, const MatX<double>& x, const Shape& c) {
    return refExpansion(ec.weight().value, x, c.d, c.dv, c.B, c.T);
  });
}

TEST_CASE("TokenCompressor computes the definition and its backward matches central differences",
          "[token_compressor][grad]") {
  std::srand(103);
  checkDefinitionOnAllShapes<ddl::TokenCompressor<double>>(true, [](auto& tc, const MatX<double>& X, const Shape& c) {
    return refTokenCompressor(tc.conv().weight().value, tc.read().value, X, c.d, c.dv, c.B, c.T);
  });
}

TEST_CASE("the channel order is PyTorch's o = i*dv + j: a hand-computed case", "[state_conv][conv_expansion]") {
  // d = 2, dv = 2, K = 2, one sequence of T = 2: N = 2, X = [X_0 | X_1], rows o = i*dv + j.
  ddl::StateConv<double> conv(2, 2, 2);
  conv.weight().value << 1, 2,   // o = 0: i = 0, j = 0
                         3, 4,   // o = 1: i = 0, j = 1
                         5, 6,   // o = 2: i = 1, j = 0
                         7, 8;   // o = 3: i = 1, j = 1
  MatX<double> X(2, 4), Y;
  X << 1, 10, 100, 1000,   // feature 0: X_0 = (1, 10), X_1 = (100, 1000)
       2, 20, 200, 2000;   // feature 1
  conv.forward(X, TokenLayout::sequence(1, 2), Y);
  MatX<double> expected(2, 4);
  // Y_j[i, 0] = w[o, 1] X_j[i, 0];  Y_j[i, 1] = w[o, 0] X_j[i, 0] + w[o, 1] X_j[i, 1]
  expected << 2 * 1, 1 * 1 + 2 * 10, 4 * 100, 3 * 100 + 4 * 1000,
              6 * 2, 5 * 2 + 6 * 20, 8 * 200, 7 * 200 + 8 * 2000;
  CHECK(Y == expected);

  ddl::ConvExpansion<double> ec(2, 2, 2);
  ec.weight().value = conv.weight().value;
  MatX<double> x(2, 2), Xe;
  x << 1, 10,
       2, 20;
  ec.forward(x, TokenLayout::sequence(1, 2), Xe);
  MatX<double> expectedE(2, 4);
  expectedE << 2 * 1, 1 * 1 + 2 * 10, 4 * 1, 3 * 1 + 4 * 10,
               6 * 2, 5 * 2 + 6 * 20, 8 * 2, 7 * 2 + 8 * 20;
  CHECK(Xe == expectedE);

  ddl::TokenCompressor<double> tc(2, 2, 2);
  tc.conv().weight().value = conv.weight().value;
  tc.read().value << 0.5, -1;
  MatX<double> xin;
  tc.forward(X, TokenLayout::sequence(1, 2), xin);
  const MatX<double> expectedC = 0.5 * expected.leftCols(2) - expected.rightCols(2);
  CHECK(relErr(xin, expectedC) < 1e-15);
}

TEST_CASE("StateConv with dv = 1 is TokenConv, bit for bit", "[state_conv][token_conv]") {
  std::srand(7);
  const Index d = 5, K = 3;
  const auto layout = TokenLayout::sequence(3, 7);
  ddl::TokenConv<double> tok(d, K);
  ddl::StateConv<double> st(d, 1, K);
  ddl::Rng rng(7);
  tok.init(rng);
  st.weight().value = tok.weight().value;
  const MatX<double> x = MatX<double>::Random(d, layout.tokens()), dy = MatX<double>::Random(d, layout.tokens());
  MatX<double> y1, y2, dx1, dx2;
  tok.forward(x, layout, y1);
  st.forward(x, layout, y2);
  CHECK(y1 == y2);
  ddl::zeroGrad(tok);
  ddl::zeroGrad(st);
  tok.backward(dy, dx1);
  st.backward(dy, dx2);
  CHECK(dx1 == dx2);
  CHECK(tok.weight().grad == st.weight().grad);
}

TEST_CASE("parameters have PyTorch's names, shapes and decay", "[state_conv][conv_expansion][token_compressor]") {
  using Seen = std::vector<std::pair<std::string, std::vector<Index>>>;
  auto walk = [](auto& m, const std::string& prefix) {
    Seen seen;
    m.visitParams(prefix, [&](const std::string& name, ddl::Param<double>& p) {
      seen.emplace_back(name, p.shape);
      CHECK(p.decay);
      CHECK(p.value.rows() == p.shape[0]);
    });
    return seen;
  };
  ddl::StateConv<double> conv(5, 3, 4);
  ddl::ConvExpansion<double> ec(5, 3, 2);
  ddl::TokenCompressor<double> tc(5, 3, 4);
  CHECK(walk(conv, "c") == Seen{{"c.weight", {15, 1, 4}}});
  CHECK(walk(ec, "expand") == Seen{{"expand.weight", {15, 1, 2}}});
  CHECK(walk(tc, "blocks.0.compress") ==
        Seen{{"blocks.0.compress.conv.weight", {15, 1, 4}}, {"blocks.0.compress.read.weight", {3}}});
  CHECK(conv.weight().value.cols() == 4);
  CHECK(ec.weight().value.cols() == 2);
  CHECK(ddl::StateConv<double>(2, 2).kernel() == 4);  // the default kernel
  CHECK(ddl::numParams(tc) == 15 * 4 + 3);
  ddl::Rng rng(1);
  conv.init(rng);  // fan_in = K, as torch.nn.Conv1d(groups=d*dv)
  CHECK(conv.weight().value.cwiseAbs().maxCoeff() <= 0.5);
  CHECK(conv.weight().value.cwiseAbs().maxCoeff() > 0.3);
  ec.init(rng);
  CHECK(ec.weight().value.cwiseAbs().maxCoeff() <= 1 / std::sqrt(2.0));
}

// ---------------------------------------------------------------- initialisation

TEST_CASE("the initial modules are the identity, the repetition and the mean, exactly",
          "[state_conv][conv_expansion][token_compressor]") {
  std::srand(11);
  for (const Shape& c : allShapes()) {
    CAPTURE(c.d, c.dv, c.K, c.B, c.T);
    const auto layout = TokenLayout::sequence(c.B, c.T);
    const Index N = layout.tokens();
    const MatX<double> X = 1e3 * MatX<double>::Random(c.d, c.dv * N), x = 1e3 * MatX<double>::Random(c.d, N);
    const MatX<double> dOut = MatX<double>::Random(c.d, c.dv * N), dxin = MatX<double>::Random(c.d, N);

    ddl::StateConv<double> conv(c.d, c.dv, c.K);  // starts as the identity
    MatX<double> Y, dX;
    conv.forward(X, layout, Y);
    CHECK(Y == X);
    conv.backward(dOut, dX);
    CHECK(dX == dOut);
    ddl::Rng rng(3);
    conv.init(rng);
    conv.initIdentity();  // clears a drawn weight
    conv.forwardInference(X, layout, Y);
    CHECK(Y == X);

    ddl::ConvExpansion<double> ec(c.d, c.dv, c.K);  // starts as the repetition x 1ᵀ
    MatX<double> Xe, dx;
    ec.forward(x, layout, Xe);
    CHECK(Xe == x.replicate(1, c.dv));
    ec.backward(dOut, dx);
    MatX<double> dxSum = dOut.leftCols(N);
    for (Index j = 1; j < c.dv; ++j) dxSum += dOut.middleCols(j * N, N);
    CHECK(dx == dxSum);

    // The mean over channels at the current token, exactly CC's initial value and input gradient.
    ddl::TokenCompressor<double> tc(c.d, c.dv, c.K);
    ddl::Compressor<double> cc(c.d, c.dv, ddl::CompressorKind::Structured, 3);
    MatX<double> xin, xinCC, dXtc, dXcc;
    tc.forward(X, layout, xin);
    cc.forward(X, xinCC);
    CHECK(xin == xinCC);
    MatX<double> mean = X.leftCols(N) / double(c.dv);
    for (Index j = 1; j < c.dv; ++j) mean += X.middleCols(j * N, N) / double(c.dv);
    CHECK(relErr(xin, mean) < 1e-15);
    ddl::zeroGrad(tc);
    ddl::zeroGrad(cc);
    tc.backward(dxin, dXtc);
    cc.backward(dxin, dXcc);
    CHECK(dXtc == dXcc);
    Index visited = 0;
    cc.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
      if (name != "read.weight") return;
      CHECK(relErr(tc.read().grad, p.grad) < 1e-13);  // the read vector sees the same input at identity
      ++visited;
    });
    CHECK(visited == 1);
  }
}

// ---------------------------------------------------------------- causality

TEST_CASE("every module is causal and keeps the sequences of a batch apart",
          "[state_conv][conv_expansion][token_compressor]") {
  std::srand(17);
  const Index d = 3, dv = 2, K = 4, B = 3, T = 7, N = B * T;
  const auto layout = TokenLayout::sequence(B, T);
  ddl::StateConv<double> conv(d, dv, K);
  ddl::ConvExpansion<double> ec(d, dv, K);
  ddl::TokenCompressor<double> tc(d, dv, K);
  randomParams(conv);
  randomParams(ec);
  randomParams(tc);
  const MatX<double> X = MatX<double>::Random(d, dv * N), x = MatX<double>::Random(d, N);
  MatX<double> Ybase, Xbase, xinBase;
  conv.forwardInference(X, layout, Ybase);
  ec.forwardInference(x, layout, Xbase);
  tc.forwardInference(X, layout, xinBase);

  // Unchanged: every column of the other sequences and of this one before t, in every output channel.
  auto unchangedBefore = [&](const MatX<double>& out, const MatX<double>& base, Index channels, Index b, Index t) {
    bool same = true;
    for (Index j = 0; j < channels; ++j)
      for (Index bb = 0; bb < B; ++bb) {
        const Index upTo = bb == b ? t : T;
        same = same && out.middleCols(j * N + bb * T, upTo) == base.middleCols(j * N + bb * T, upTo);
      }
    return same;
  };
  for (Index b = 0; b < B; ++b)
    for (Index t = 0; t < T; ++t) {
      CAPTURE(b, t);
      for (Index j = 0; j < dv; ++j) {
        CAPTURE(j);
        MatX<double> Xc = X, Y, xin;
        Xc.col(j * N + b * T + t).array() += 1.0;
        conv.forwardInference(Xc, layout, Y);
        CHECK(unchangedBefore(Y, Ybase, dv, b, t));
        CHECK(Y.middleCols(j * N + b * T + t, 1) != Ybase.middleCols(j * N + b * T + t, 1));  // it reaches t
        for (Index jj = 0; jj < dv; ++jj)  // StateConv does not mix channels
          if (jj != j) CHECK(Y.middleCols(jj * N, N) == Ybase.middleCols(jj * N, N));
        tc.forwardInference(Xc, layout, xin);
        CHECK(unchangedBefore(xin, xinBase, 1, b, t));
        CHECK(xin.col(b * T + t) != xinBase.col(b * T + t));
      }
      MatX<double> xc = x, Xe;
      xc.col(b * T + t).array() += 1.0;
      ec.forwardInference(xc, layout, Xe);
      CHECK(unchangedBefore(Xe, Xbase, dv, b, t));
      for (Index j = 0; j < dv; ++j) CHECK(Xe.col(j * N + b * T + t) != Xbase.col(j * N + b * T + t));
    }

  // Each sequence alone gives the same columns as the batch.
  for (Index b = 0; b < B; ++b) {
    MatX<double> Xb(d, dv * T), Y, xin;
    for (Index j = 0; j < dv; ++j) Xb.middleCols(j * T, T) = X.middleCols(j * N + b * T, T);
    conv.forwardInference(Xb, TokenLayout::sequence(1, T), Y);
    tc.forwardInference(Xb, TokenLayout::sequence(1, T), xin);
    for (Index j = 0; j < dv; ++j) CHECK(Y.middleCols(j * T, T) == Ybase.middleCols(j * N + b * T, T));
    CHECK(xin == xinBase.middleCols(b * T, T));
  }
}

// ---------------------------------------------------------------- one module applied twice

TEST_CASE("StateConv applied twice in one step: per-application caches match central differences",
          "[state_conv][shared][grad]") {
  const unsigned seed = GENERATE(1u, 2u, 3u);
  const Shape shape = seededShape(seed);
  const Index d = shape.d, dv = shape.dv, K = shape.K, B = shape.B, T = shape.T;
  CAPTURE(seed, d, dv, K, T);
  const auto layout = TokenLayout::sequence(B, T);
  ddl::StateConv<double> conv(d, dv, K);
  randomParams(conv);
  MatX<double> X = MatX<double>::Random(d, dv * B * T);
  const MatX<double> A = MatX<double>::Random(d, dv * B * T), C = MatX<double>::Random(d, dv * B * T);
  // loss = <A, Y1> + <C, Y2>, Y1 = conv(X), Y2 = conv(tanh(Y1)): one weight on two inputs in a chain
  auto loss = [&] {
    MatX<double> Y1, Z, Y2;
    conv.forwardInference(X, layout, Y1);
    Z = Y1.array().tanh().matrix();
    conv.forwardInference(Z, layout, Y2);
    return (A.array() * Y1.array()).sum() + (C.array() * Y2.array()).sum();
  };
  ddl::StateConv<double>::Cache first, second;
  MatX<double> Y1, Z, Y2, dZ, dX;
  conv.forward(X, layout, Y1, first);
  Z = Y1.array().tanh().matrix();
  conv.forward(Z, layout, Y2, second);
  ddl::zeroGrad(conv);
  conv.backward(C, dZ, second);  // reverse order
  const MatX<double> dY1 = A + (dZ.array() * (1 - Z.array().square())).matrix();
  conv.backward(dY1, dX, first);
  FD_CHECK(dX, numericGrad(X, loss));
  FD_CHECK(conv.weight().grad, numericGrad(conv.weight().value, loss));
}

TEST_CASE("TokenCompressor shared by two sublayers: per-application caches match central differences",
          "[token_compressor][shared][grad]") {
  const unsigned seed = GENERATE(4u, 5u, 6u);
  const Shape shape = seededShape(seed);
  const Index d = shape.d, dv = shape.dv, K = shape.K, B = shape.B, T = shape.T;
  CAPTURE(seed, d, dv, K, T);
  const auto layout = TokenLayout::sequence(B, T);
  const Index N = layout.tokens();
  ddl::TokenCompressor<double> tc(d, dv, K);
  randomParams(tc);
  MatX<double> X1 = MatX<double>::Random(d, dv * N), X2 = MatX<double>::Random(d, dv * N);
  const MatX<double> A = MatX<double>::Random(d, N), Bm = MatX<double>::Random(d, N);
  auto forward = [&](const MatX<double>& X, MatX<double>& x, ddl::TokenCompressor<double>::Cache& c) {
    tc.forward(X, layout, x, c);
  };
  ddl_test::checkTwoApplications(tc, X1, X2, A, Bm, forward,
                                 [&](const MatX<double>& X, MatX<double>& x) { tc.forwardInference(X, layout, x); });
}

// ---------------------------------------------------------------- decoding

TEST_CASE("decoding one token at a time equals forwardInference column by column",
          "[state_conv][conv_expansion][token_compressor][decode]") {
  std::srand(29);
  struct Case {
    Index d, dv, K, T;
  };
  const Case c = GENERATE(Case{1, 1, 1, 3}, Case{3, 3, 4, 9}, Case{4, 2, 2, 1}, Case{5, 4, 4, 3}, Case{2, 3, 3, 6});
  CAPTURE(c.d, c.dv, c.K, c.T);
  const auto layout = TokenLayout::sequence(1, c.T);
  ddl::StateConv<double> conv(c.d, c.dv, c.K);
  ddl::ConvExpansion<double> ec(c.d, c.dv, c.K);
  ddl::TokenCompressor<double> tc(c.d, c.dv, c.K);
  randomParams(conv);
  randomParams(ec);
  randomParams(tc);
  const MatX<double> X = MatX<double>::Random(c.d, c.dv * c.T), x = MatX<double>::Random(c.d, c.T);
  MatX<double> Y, Xe, xin;
  conv.forwardInference(X, layout, Y);
  ec.forwardInference(x, layout, Xe);
  tc.forwardInference(X, layout, xin);

  ddl::StateConv<double>::StepCache sc;
  ddl::ConvExpansion<double>::StepCache se;
  ddl::TokenCompressor<double>::StepCache st;
  MatX<double> Xt(c.d, c.dv), Yt, Et, xt;
  for (int pass = 0; pass < 2; ++pass) {  // startStep again restarts the sequence
    CAPTURE(pass);
    conv.startStep(sc);
    ec.startStep(se);
    tc.startStep(st);
    for (Index t = 0; t < c.T; ++t) {
      CAPTURE(t);
      for (Index j = 0; j < c.dv; ++j) Xt.col(j) = X.col(j * c.T + t);
      if (t > 0) Eigen::internal::set_is_malloc_allowed(false);  // no allocation per step
      conv.forwardStep(Xt, sc, Yt);
      ec.forwardStep(x.col(t), se, Et);
      tc.forwardStep(Xt, st, xt);
      Eigen::internal::set_is_malloc_allowed(true);
      MatX<double> Ycol(c.d, c.dv), Ecol(c.d, c.dv);
      for (Index j = 0; j < c.dv; ++j) {
        Ycol.col(j) = Y.col(j * c.T + t);
        Ecol.col(j) = Xe.col(j * c.T + t);
      }
      CHECK(relErr(Yt, Ycol, 1e-300) < 1e-12);
      CHECK(relErr(Et, Ecol, 1e-300) < 1e-12);
      CHECK(relErr(xt, xin.col(t), 1e-300) < 1e-12);
      // The same vector operations in the same order: the same bits.
      CHECK(Yt == Ycol);
      CHECK(Et == Ecol);
      CHECK(xt == xin.col(t));
    }
  }
  // In place: Yt may be Xt.
  conv.startStep(sc);
  for (Index t = 0; t < c.T; ++t) {
    MatX<double> inout(c.d, c.dv), Ycol(c.d, c.dv);
    for (Index j = 0; j < c.dv; ++j) {
      inout.col(j) = X.col(j * c.T + t);
      Ycol.col(j) = Y.col(j * c.T + t);
    }
    conv.forwardStep(inout, sc, inout);
    CHECK(relErr(inout, Ycol, 1e-300) < 1e-12);
  }
}

// ---------------------------------------------------------------- float, threads, allocation

TEST_CASE("float agrees with double", "[state_conv][conv_expansion][token_compressor][float]") {
  std::srand(31);
  const Index d = 16, dv = 4, K = 4, B = 3, T = 20, N = B * T;
  const auto layout = TokenLayout::sequence(B, T);
  const MatX<double> X = MatX<double>::Random(d, dv * N), x = MatX<double>::Random(d, N);
  const MatX<double> dY = MatX<double>::Random(d, dv * N), dxin = MatX<double>::Random(d, N);
  constexpr double tol = 1e-5;
  checkFloatTwin<ddl::StateConv>(d, dv, K, X, dY, layout, tol);
  checkFloatTwin<ddl::ConvExpansion>(d, dv, K, x, dY, layout, tol);
  checkFloatTwin<ddl::TokenCompressor>(d, dv, K, X, dxin, layout, tol);
}

TEST_CASE("1 and 2 threads give identical bits above every parallel threshold, and no allocation in steady state",
          "[state_conv][conv_expansion][token_compressor][threads]") {
  const int saved = ddl::numThreads();
  std::srand(37);
  // d * K * N = 96 * 4 * 100 >= 2^15 (kParallelMinWork): every per-token loop and the weight-gradient
  // tasks (one per channel, dv = 3 of them on 2 threads) split over the threads.
  const Index d = 96, dv = 3, K = 4, B = 2, T = 50, N = B * T;
  const auto layout = TokenLayout::sequence(B, T);
  ddl::StateConv<float> conv(d, dv, K);
  ddl::ConvExpansion<float> ec(d, dv, K);
  ddl::TokenCompressor<float> tc(d, dv, K);
  ddl::Rng rng(37);
  conv.init(rng);
  ec.init(rng);
  tc.conv().init(rng);
  tc.read().value.setRandom();
  const MatX<float> X = MatX<float>::Random(d, dv * N), x = MatX<float>::Random(d, N);
  const MatX<float> dY = MatX<float>::Random(d, dv * N), dxin = MatX<float>::Random(d, N);

  struct Outputs {
    MatX<float> Y, dX, gw, Xe, dx, ge, xin, dXc, gc, gr;
  };
  auto run = [&](int threads) {
    ddl::setNumThreads(threads);
#if DDL_WITH_OPENMP
    REQUIRE(ddl::numThreads() == threads);  // otherwise the comparison would be 1 thread vs 1 thread
#endif
    Outputs o;
    ddl::zeroGrad(conv);
    ddl::zeroGrad(ec);
    ddl::zeroGrad(tc);
    auto trainPass = [&] {
      conv.forward(X, layout, o.Y);
      conv.backward(dY, o.dX);
      ec.forward(x, layout, o.Xe);
      ec.backward(dY, o.dx);
      tc.forward(X, layout, o.xin);
      tc.backward(dxin, o.dXc);
    };
    trainPass();
    // Steady state: the same calls again allocate nothing (the gradients accumulate twice).
    Eigen::internal::set_is_malloc_allowed(false);
    trainPass();
    conv.forwardInference(X, layout, o.Y);
    ec.forwardInference(x, layout, o.Xe);
    tc.forwardInference(X, layout, o.xin);
    Eigen::internal::set_is_malloc_allowed(true);
    o.gw = conv.weight().grad;
    o.ge = ec.weight().grad;
    o.gc = tc.conv().weight().grad;
    o.gr = tc.read().grad;
    return o;
  };
  const Outputs one = run(1), two = run(2);
  ddl::setNumThreads(saved);
  CHECK(one.Y == two.Y);
  CHECK(one.dX == two.dX);
  CHECK(one.gw == two.gw);
  CHECK(one.Xe == two.Xe);
  CHECK(one.dx == two.dx);
  CHECK(one.ge == two.ge);
  CHECK(one.xin == two.xin);
  CHECK(one.dXc == two.dXc);
  CHECK(one.gc == two.gc);
  CHECK(one.gr == two.gr);
  // And the threaded path computes the definition.
  const MatX<double> Xd = X.cast<double>(), xd = x.cast<double>();
  CHECK(relErr(two.Y.cast<double>(), refStateConv(conv.weight().value.cast<double>(), Xd, d, dv, B, T)) < 1e-5);
  CHECK(relErr(two.Xe.cast<double>(), refExpansion(ec.weight().value.cast<double>(), xd, d, dv, B, T)) < 1e-5);
  CHECK(relErr(two.xin.cast<double>(), refTokenCompressor(tc.conv().weight().value.cast<double>(),
                                                           tc.read().value.cast<double>(), Xd, d, dv, B, T)) < 1e-5);
}

TEST_CASE("on a wide state every backward is the adjoint of its forward",
          "[state_conv][conv_expansion][token_compressor][grad]") {
  // Each output is linear in the input and in each parameter, so for random probes P and V
  // <dOut, f(P)> = <dIn, P> and <dOut, f_V(X)> = <grad, V>: every entry of every gradient at d = 150
  // (wider than a SIMD packet loop's tail; central differences above use d <= 3).
  std::srand(41);
  const Index d = 150, dv = 3, K = 4, B = 2, T = 9, N = B * T;
  const auto layout = TokenLayout::sequence(B, T);
  auto dot = [](const MatX<double>& a, const MatX<double>& b) { return (a.array() * b.array()).sum(); };
  auto close = [](double a, double b) { return std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b)); };
  const MatX<double> X = MatX<double>::Random(d, dv * N), x = MatX<double>::Random(d, N);
  const MatX<double> P = MatX<double>::Random(d, dv * N), p = MatX<double>::Random(d, N);
  const MatX<double> dY = MatX<double>::Random(d, dv * N), dxin = MatX<double>::Random(d, N);
  const MatX<double> V = MatX<double>::Random(d * dv, K), u = MatX<double>::Random(dv, 1);

  ddl::StateConv<double> conv(d, dv, K), convV(d, dv, K);
  randomParams(conv);
  convV.weight().value = V;
  MatX<double> Y, dX, fP, fV;
  conv.forward(X, layout, Y);
  ddl::zeroGrad(conv);
  conv.backward(dY, dX);
  conv.forwardInference(P, layout, fP);
  convV.forwardInference(X, layout, fV);
  CHECK(close(dot(dY, fP), dot(dX, P)));
  CHECK(close(dot(dY, fV), dot(conv.weight().grad, V)));

  ddl::ConvExpansion<double> ec(d, dv, K), ecV(d, dv, K);
  randomParams(ec);
  ecV.weight().value = V;
  MatX<double> Xe, dx;
  ec.forward(x, layout, Xe);
  ddl::zeroGrad(ec);
  ec.backward(dY, dx);
  ec.forwardInference(p, layout, fP);
  ecV.forwardInference(x, layout, fV);
  CHECK(close(dot(dY, fP), dot(dx, p)));
  CHECK(close(dot(dY, fV), dot(ec.weight().grad, V)));

  ddl::TokenCompressor<double> tc(d, dv, K), tcV(d, dv, K), tcU(d, dv, K);
  randomParams(tc);
  tcV.conv().weight().value = V;
  tcV.read().value = tc.read().value;
  tcU.conv().weight().value = tc.conv().weight().value;
  tcU.read().value = u;
  MatX<double> xin, dXc, fU;
  tc.forward(X, layout, xin);
  ddl::zeroGrad(tc);
  tc.backward(dxin, dXc);
  tc.forwardInference(P, layout, fP);
  tcV.forwardInference(X, layout, fV);
  tcU.forwardInference(X, layout, fU);
  CHECK(close(dot(dxin, fP), dot(dXc, P)));
  CHECK(close(dot(dxin, fV), dot(tc.conv().weight().grad, V)));
  CHECK(close(dot(dxin, fU), dot(tc.read().grad, u)));
}

TEST_CASE("the allocation guard of this file fires", "[alloc]") { CHECK(ddl_test::allocationGuardFires()); }

// ---------------------------------------------------------------- errors

TEST_CASE("bad options, shapes and layouts throw errors naming the function and the shapes",
          "[state_conv][conv_expansion][token_compressor][errors]") {
  const auto k0 = thrownMessage<ddl::ValueError>([] { ddl::StateConv<double>(3, 2, 0); });
  CHECK(contains(k0, "ddl::StateConv"));
  CHECK(contains(k0, "kernel = 0"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::ConvExpansion<double>(0, 2, 4); }), "d = 0"));
  const auto dv0 = thrownMessage<ddl::ValueError>([] { ddl::TokenCompressor<double>(3, 0, 4); });
  CHECK(contains(dv0, "ddl::TokenCompressor"));
  CHECK(contains(dv0, "dv = 0"));

  ddl::StateConv<double> conv(3, 2, 4);
  ddl::ConvExpansion<double> ec(3, 2, 4);
  ddl::TokenCompressor<double> tc(3, 2, 4);
  const auto seq = TokenLayout::sequence(2, 4);  // N = 8
  MatX<double> out, dIn;

  // backward before forward
  for (const std::string& msg :
       {thrownMessage<ddl::Error>([&] { conv.backward(MatX<double>::Zero(3, 16), dIn); }),
        thrownMessage<ddl::Error>([&] { ec.backward(MatX<double>::Zero(3, 16), dIn); }),
        thrownMessage<ddl::Error>([&] { tc.backward(MatX<double>::Zero(3, 8), dIn); })})
    CHECK(contains(msg, "before forward"));
  CHECK(contains(thrownMessage<ddl::Error>([&] { conv.backward(MatX<double>::Zero(3, 16), dIn); }),
                 "ddl::StateConv::backward"));

  // an image layout
  const auto image = thrownMessage<ddl::ShapeError>(
      [&] { conv.forward(MatX<double>::Zero(3, 16), TokenLayout::image(2, 2, 2), out); });
  CHECK(contains(image, "ddl::StateConv::forward"));
  CHECK(contains(image, "sequence layout"));
  CHECK(contains(image, "H=2"));
  CHECK(contains(thrownMessage<ddl::ShapeError>(
                     [&] { ec.forwardInference(MatX<double>::Zero(3, 8), TokenLayout::image(2, 2, 2), out); }),
                 "ddl::ConvExpansion::forwardInference"));

  // wrong columns and rows
  const auto cols = thrownMessage<ddl::ShapeError>([&] { conv.forward(MatX<double>::Zero(3, 8), seq, out); });
  CHECK(contains(cols, "ddl::StateConv::forward"));
  CHECK(contains(cols, "(3, 8)"));
  CHECK(contains(cols, "(3, 16)"));
  CHECK(contains(cols, "T=4"));
  const auto rows = thrownMessage<ddl::ShapeError>([&] { tc.forwardInference(MatX<double>::Zero(2, 16), seq, out); });
  CHECK(contains(rows, "ddl::TokenCompressor::forwardInference"));
  CHECK(contains(rows, "(2, 16)"));
  CHECK(contains(rows, "(3, 16)"));
  const auto ecCols = thrownMessage<ddl::ShapeError>([&] { ec.forward(MatX<double>::Zero(3, 16), seq, out); });
  CHECK(contains(ecCols, "ddl::ConvExpansion::forward"));
  CHECK(contains(ecCols, "(3, 16)"));
  CHECK(contains(ecCols, "(3, 8)"));
  CHECK(contains(thrownMessage<ddl::ShapeError>([&] { tc.forward(MatX<double>::Zero(3, 8), seq, out); }),
                 "ddl::TokenCompressor::forward"));

  // outputs aliasing inputs
  MatX<double> X = MatX<double>::Zero(3, 16), x = MatX<double>::Zero(3, 8);
  CHECK(contains(thrownMessage<ddl::Error>([&] { conv.forward(X, seq, X); }), "must not alias"));
  CHECK(contains(thrownMessage<ddl::Error>([&] { ec.forward(x, seq, x); }), "must not alias"));
  CHECK(contains(thrownMessage<ddl::Error>([&] { tc.forward(X, seq, X); }), "must not alias"));

  // backward with the wrong gradient shape
  conv.forward(X, seq, out);
  ec.forward(x, seq, out);
  tc.forward(X, seq, out);
  const auto dY = thrownMessage<ddl::ShapeError>([&] { conv.backward(MatX<double>::Zero(3, 15), dIn); });
  CHECK(contains(dY, "ddl::StateConv::backward"));
  CHECK(contains(dY, "(3, 15)"));
  CHECK(contains(dY, "(3, 16)"));
  const auto dX = thrownMessage<ddl::ShapeError>([&] { ec.backward(MatX<double>::Zero(3, 8), dIn); });
  CHECK(contains(dX, "ddl::ConvExpansion::backward"));
  CHECK(contains(dX, "(3, 16)"));
  const auto dXin = thrownMessage<ddl::ShapeError>([&] { tc.backward(MatX<double>::Zero(3, 16), dIn); });
  CHECK(contains(dXin, "ddl::TokenCompressor::backward"));
  CHECK(contains(dXin, "(3, 8)"));

  // decoding: before startStep, a cache of another shape, a wrong token shape
  ddl::StateConv<double>::StepCache sc;
  ddl::TokenCompressor<double>::StepCache st;
  ddl::ConvExpansion<double>::StepCache se;
  MatX<double> yt;
  const auto before = thrownMessage<ddl::Error>([&] { conv.forwardStep(MatX<double>::Zero(3, 2), sc, yt); });
  CHECK(contains(before, "ddl::StateConv::forwardStep"));
  CHECK(contains(before, "before startStep"));
  CHECK(contains(thrownMessage<ddl::Error>([&] { tc.forwardStep(MatX<double>::Zero(3, 2), st, yt); }),
                 "ddl::TokenCompressor::forwardStep"));
  ddl::StateConv<double>(3, 2, 3).startStep(sc);  // K = 3, not this module's 4
  CHECK(contains(thrownMessage<ddl::Error>([&] { conv.forwardStep(MatX<double>::Zero(3, 2), sc, yt); }),
                 "before startStep"));
  conv.startStep(sc);
  ec.startStep(se);
  tc.startStep(st);
  const auto xt = thrownMessage<ddl::ShapeError>([&] { conv.forwardStep(MatX<double>::Zero(3, 1), sc, yt); });
  CHECK(contains(xt, "ddl::StateConv::forwardStep"));
  CHECK(contains(xt, "(3, 1)"));
  CHECK(contains(xt, "(3, 2)"));
  const auto et = thrownMessage<ddl::ShapeError>([&] { ec.forwardStep(MatX<double>::Zero(3, 2), se, yt); });
  CHECK(contains(et, "ddl::ConvExpansion::forwardStep"));
  CHECK(contains(et, "(3, 1)"));
  CHECK(contains(thrownMessage<ddl::ShapeError>([&] { tc.forwardStep(MatX<double>::Zero(2, 2), st, yt); }),
                 "(2, 2)"));
}

}  // namespace test_state_conv
