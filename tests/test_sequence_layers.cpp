// Tests for the layers of the causal language model: SwiGluBranch (nn/blocks/swiglu_branch.hpp) and
// TokenConv (nn/layers/token_conv.hpp). Gradients are proven by central differences in double.
#include "eigen_guard.hpp"  // first: live allocation checks even with NDEBUG

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "fd_check.hpp"
#include "layer_grad_check.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/nn/blocks/delta_block.hpp"
#include "ddl/nn/blocks/swiglu_branch.hpp"
#include "ddl/nn/layers/token_conv.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_sequence_layers {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl::TokenLayout;
using ddl_test::checkLayerGradients;
using ddl_test::contains;
using ddl_test::randInt;
using ddl_test::thrownMessage;

namespace {

ddl::DeltaBlockBranchOptions siluOptions(Index hidden = 0) {
  return ddl::DeltaBlockBranchOptions{hidden, ddl::Activation::SiLU};
}


// out[c, b*T + t] = sum_s w[c, s] x[c, b*T + t - K + 1 + s], zero before the sequence start: the
// definition, written independently of the layer's loop.
MatX<double> convReference(const MatX<double>& w, const MatX<double>& x, Index B, Index T) {
  const Index C = w.rows(), K = w.cols();
  MatX<double> out = MatX<double>::Zero(C, B * T);
  for (Index b = 0; b < B; ++b)
    for (Index t = 0; t < T; ++t)
      for (Index s = 0; s < K; ++s) {
        const Index src = t - K + 1 + s;
        if (src >= 0) out.col(b * T + t) += w.col(s).cwiseProduct(x.col(b * T + src));
      }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- SwiGluBranch

TEST_CASE("SwiGluBranch backward matches central differences", "[grad][swiglu]") {
  const auto seed = GENERATE(take(8, random(1u, 1000000u)));
  std::mt19937 gen(seed);
  std::srand(seed);
  const int d = randInt(gen, 1, 6), hidden = randInt(gen, 0, 7), B = randInt(gen, 1, 3), T = randInt(gen, 1, 4);
  CAPTURE(seed, d, hidden, B, T);
  ddl::SwiGluBranch<double> branch(d, siluOptions(hidden));
  ddl::Rng rng(seed);
  branch.init(rng);
  const auto layout = TokenLayout::sequence(B, T);
  MatX<double> C = 2 * MatX<double>::Random(d, layout.tokens());
  const auto names = checkLayerGradients(branch, C, layout);
  CHECK(names == std::vector<std::string>{"fc1.weight", "fc2.weight", "fc3.weight"});
}

TEST_CASE("SwiGluBranch with d = 1 and one token matches central differences", "[grad][swiglu]") {
  std::srand(3);
  ddl::SwiGluBranch<double> branch(1, siluOptions());
  CHECK(branch.hidden() == 2);  // floor(8/3)
  ddl::Rng rng(3);
  branch.init(rng);
  MatX<double> C = MatX<double>::Constant(1, 1, 1.7);
  checkLayerGradients(branch, C, TokenLayout::vectors(1));
}

TEST_CASE("SwiGluBranch computes W2 (silu(W1 c) * W3 c) with PyTorch shapes and no biases", "[swiglu]") {
  std::srand(5);
  const Index d = 4, hidden = 5, N = 6;
  ddl::SwiGluBranch<double> branch(d, siluOptions(hidden));
  ddl::Rng rng(5);
  branch.init(rng);
  std::vector<std::vector<Index>> shapes;
  branch.visitParams("mlp", [&](const std::string& name, ddl::Param<double>& p) {
    CAPTURE(name);
    shapes.push_back(p.shape);
    CHECK(p.decay);
  });
  CHECK(shapes == std::vector<std::vector<Index>>{{hidden, d}, {d, hidden}, {hidden, d}});
  CHECK(ddl::numParams(branch) == 3 * d * hidden);

  const MatX<double> C = MatX<double>::Random(d, N);
  const MatX<double>& W1 = branch.fc1().weight().value;
  const MatX<double>& W2 = branch.fc2().weight().value;
  const MatX<double>& W3 = branch.fc3().weight().value;
  MatX<double> m(hidden, N);
  for (Index n = 0; n < N; ++n)
    for (Index i = 0; i < hidden; ++i) {
      const double a = W1.row(i).dot(C.col(n)), b = W3.row(i).dot(C.col(n));
      m(i, n) = a / (1 + std::exp(-a)) * b;
    }
  const MatX<double> expected = W2 * m;
  MatX<double> H, Hinf;
  branch.forward(C, TokenLayout::vectors(N), H);
  CHECK(ddl::testing::relErr(H, expected) < 1e-14);
  branch.forwardInference(C, TokenLayout::sequence(2, 3), Hinf);  // per token: any layout of N tokens
  CHECK(Hinf == H);

  // Gradients accumulate over two backwards; dC is overwritten.
  const MatX<double> dH = MatX<double>::Random(d, N);
  MatX<double> dC1, dC2;
  ddl::zeroGrad(branch);
  branch.backward(dH, dC1);
  const MatX<double> g3 = branch.fc3().weight().grad;
  branch.backward(dH, dC2);
  CHECK(dC2 == dC1);
  CHECK(branch.fc3().weight().grad.isApprox(2 * g3, 1e-14));
}

TEST_CASE("SwiGluBranch hidden defaults to floor(8 d / 3)", "[swiglu]") {
  struct Case {
    Index d, hidden;
  };
  const Case c = GENERATE(Case{3, 8}, Case{8, 21}, Case{100, 266});
  CAPTURE(c.d);
  CHECK(ddl::SwiGluBranch<double>::defaultHidden(c.d) == c.hidden);
  ddl::SwiGluBranch<double> branch(c.d, siluOptions());
  CHECK(branch.hidden() == c.hidden);
  CHECK(branch.fc1().weight().shape == std::vector<Index>{c.hidden, c.d});
  CHECK(ddl::SwiGluBranch<double>(c.d, siluOptions(7)).hidden() == 7);
}

TEST_CASE("SwiGluBranch is the branch of a DeltaBlock", "[swiglu]") {
  std::srand(9);
  ddl::DeltaBlockOptions opt;
  opt.activation = ddl::Activation::SiLU;
  ddl::DeltaBlock<double, ddl::SwiGluBranch<double>> block(6, 1, opt);
  ddl::Rng rng(9);
  block.init(rng);
  CHECK(block.hidden() == 16);
  std::vector<std::string> names;
  block.visitParams("blocks.0", [&](const std::string& name, ddl::Param<double>&) { names.push_back(name); });
  CHECK(std::find(names.begin(), names.end(), "blocks.0.mlp.fc3.weight") != names.end());
  const auto layout = TokenLayout::sequence(2, 3);
  MatX<double> X = MatX<double>::Random(6, layout.tokens());
  checkLayerGradients(block, X, layout);
}

TEST_CASE("SwiGluBranch rejects bad options and shapes with clear errors", "[swiglu][errors]") {
  const auto gelu = thrownMessage<ddl::ValueError>(
      [] { ddl::SwiGluBranch<double>(4, ddl::DeltaBlockBranchOptions{0, ddl::Activation::GELU}); });
  CHECK(contains(gelu, "ddl::SwiGluBranch"));
  CHECK(contains(gelu, "gelu"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::SwiGluBranch<double>(0, siluOptions()); }), "got 0"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::SwiGluBranch<double>(4, siluOptions(-2)); }), "got -2"));

  ddl::SwiGluBranch<double> branch(4, siluOptions());
  MatX<double> H, dC;
  const auto before = thrownMessage<ddl::Error>([&] { branch.backward(MatX<double>::Zero(4, 3), dC); });
  CHECK(contains(before, "ddl::SwiGluBranch::backward"));
  CHECK(contains(before, "before forward"));
  const auto rows = thrownMessage<ddl::ShapeError>(
      [&] { branch.forward(MatX<double>::Zero(3, 6), TokenLayout::sequence(2, 3), H); });
  CHECK(contains(rows, "ddl::SwiGluBranch::forward"));
  CHECK(contains(rows, "(3, 6)"));
  CHECK(contains(rows, "(4, 6)"));
  const auto cols = thrownMessage<ddl::ShapeError>(
      [&] { branch.forwardInference(MatX<double>::Zero(4, 5), TokenLayout::sequence(2, 3), H); });
  CHECK(contains(cols, "ddl::SwiGluBranch::forwardInference"));
  CHECK(contains(cols, "(4, 5)"));
  CHECK(contains(cols, "T=3"));
  MatX<double> C = MatX<double>::Zero(4, 6);
  const auto alias = thrownMessage<ddl::Error>([&] { branch.forward(C, TokenLayout::sequence(2, 3), C); });
  CHECK(contains(alias, "ddl::SwiGluBranch::forward"));
  CHECK(contains(alias, "must not alias"));
  branch.forward(C, TokenLayout::sequence(2, 3), H);
  const auto dH = thrownMessage<ddl::ShapeError>([&] { branch.backward(MatX<double>::Zero(4, 5), dC); });
  CHECK(contains(dH, "ddl::SwiGluBranch::backward"));
  CHECK(contains(dH, "(4, 5)"));
}

// ---------------------------------------------------------------- TokenConv

TEST_CASE("TokenConv backward matches central differences", "[grad][token_conv]") {
  struct Case {
    int C, K, B, T;
  };
  // B = 1 and > 1; T = 1, T < K, T = K, T > K; C = 1; K = 1.
  const Case fixed = GENERATE(Case{1, 4, 1, 1}, Case{3, 4, 2, 2}, Case{2, 3, 3, 3}, Case{1, 2, 2, 7},
                              Case{4, 1, 2, 5}, Case{3, 4, 1, 9}, Case{0, 0, 0, 0});
  const auto seed = GENERATE(take(2, random(1u, 1000000u)));
  std::mt19937 gen(seed);
  std::srand(seed);
  Case c = fixed;
  if (c.C == 0) c = Case{randInt(gen, 1, 5), randInt(gen, 1, 5), randInt(gen, 1, 4), randInt(gen, 1, 8)};
  for (bool bias : {false, true}) {
    CAPTURE(seed, c.C, c.K, c.B, c.T, bias);
    ddl::TokenConv<double> conv(c.C, c.K, bias);
    ddl::Rng rng(seed);
    conv.init(rng);
    const auto layout = TokenLayout::sequence(c.B, c.T);
    MatX<double> X = MatX<double>::Random(c.C, layout.tokens());
    MatX<double> Y;
    conv.forward(X, layout, Y);
    CHECK(ddl::testing::relErr(Y - (bias ? MatX<double>(conv.bias().value.replicate(1, Y.cols()))
                                          : MatX<double>::Zero(Y.rows(), Y.cols())),
                               convReference(conv.weight().value, X, c.B, c.T)) < 1e-14);
    if (c.T >= c.K) {
      const auto names = checkLayerGradients(conv, X, layout);
      CHECK(names == (bias ? std::vector<std::string>{"weight", "bias"} : std::vector<std::string>{"weight"}));
    } else {
      // Taps s < K - T only ever see padding, so their gradient is exactly zero (checkGrads would
      // refuse a zero gradient); the rest is still checked against central differences.
      MatX<double> dX;
      const MatX<double> W = MatX<double>::Random(Y.rows(), Y.cols());
      auto loss = [&] {
        MatX<double> Yl;
        conv.forwardInference(X, layout, Yl);
        return (W.array() * Yl.array()).sum();
      };
      ddl::zeroGrad(conv);
      conv.backward(W, dX);
      FD_CHECK(dX, ddl::testing::numericGrad(X, loss));
      FD_CHECK(conv.weight().grad, ddl::testing::numericGrad(conv.weight().value, loss));
      CHECK(conv.weight().grad.leftCols(c.K - c.T).isZero(0));
      if (bias) FD_CHECK(conv.bias().grad, ddl::testing::numericGrad(conv.bias().value, loss));
    }
  }
}

TEST_CASE("TokenConv stores its weight as PyTorch's depthwise Conv1d", "[token_conv]") {
  ddl::TokenConv<double> conv(5, 3, true);
  std::vector<std::pair<std::string, std::vector<Index>>> seen;
  conv.visitParams("conv", [&](const std::string& name, ddl::Param<double>& p) {
    seen.emplace_back(name, p.shape);
    CHECK(p.decay == (name == "conv.weight"));
  });
  CHECK(seen == std::vector<std::pair<std::string, std::vector<Index>>>{{"conv.weight", {5, 1, 3}},
                                                                        {"conv.bias", {5}}});
  CHECK(conv.weight().value.rows() == 5);
  CHECK(conv.weight().value.cols() == 3);
  CHECK(ddl::TokenConv<double>(2).kernel() == 4);  // the default kernel
  ddl::Rng rng(1);
  conv.init(rng);  // fan_in = K, as torch.nn.Conv1d(groups=C)
  CHECK(conv.weight().value.cwiseAbs().maxCoeff() <= 1 / std::sqrt(3.0));
  CHECK(conv.weight().value.cwiseAbs().maxCoeff() > 0.3 / std::sqrt(3.0));
}

TEST_CASE("TokenConv matches a hand-computed case", "[token_conv]") {
  // C = 2, K = 3, B = 2 sequences of T = 4.
  ddl::TokenConv<double> conv(2, 3);
  conv.weight().value << 1, 2, 3,     // channel 0: out[t] = x[t-2] + 2 x[t-1] + 3 x[t]
                         -1, 0, 0.5;  // channel 1: out[t] = -x[t-2] + 0.5 x[t]
  MatX<double> x(2, 8), out;
  x << 1, 2, 3, 4, 10, 20, 30, 40,
       2, 4, 6, 8, 1, 1, 1, 1;
  conv.forward(x, TokenLayout::sequence(2, 4), out);
  MatX<double> expected(2, 8);
  expected << 3, 8, 1 + 4 + 9, 2 + 6 + 12, 30, 20 + 60, 10 + 40 + 90, 20 + 60 + 120,
              1, 2, -2 + 3, -4 + 4, 0.5, 0.5, -1 + 0.5, -1 + 0.5;
  CHECK(out == expected);

  // dOut = ones: dx[t] = sum of the taps that reach t within its sequence; dw[c, s] = sum of the
  // inputs tap s reads over both sequences.
  MatX<double> dx;
  conv.backward(MatX<double>::Ones(2, 8), dx);
  MatX<double> dxExpected(2, 8);
  dxExpected << 6, 6, 5, 3, 6, 6, 5, 3,
                -0.5, -0.5, 0.5, 0.5, -0.5, -0.5, 0.5, 0.5;
  CHECK(dx == dxExpected);
  MatX<double> dw(2, 3);
  dw << 1 + 2 + 10 + 20, 1 + 2 + 3 + 10 + 20 + 30, 10 + 100,
        2 + 4 + 1 + 1, 2 + 4 + 6 + 1 + 1 + 1, 20 + 4;
  CHECK(conv.weight().grad == dw);
}

TEST_CASE("TokenConv initIdentity reproduces its input exactly", "[token_conv]") {
  struct Case {
    int C, K, B, T;
  };
  const Case c = GENERATE(Case{1, 4, 1, 1}, Case{3, 4, 2, 3}, Case{5, 2, 3, 9}, Case{2, 1, 1, 4});
  CAPTURE(c.C, c.K, c.B, c.T);
  std::srand(static_cast<unsigned>(c.C * 7 + c.T));
  ddl::TokenConv<double> conv(c.C, c.K, true);
  ddl::Rng rng(2);
  conv.init(rng);  // nonzero first, so initIdentity has to clear it
  conv.initIdentity();
  const auto layout = TokenLayout::sequence(c.B, c.T);
  const MatX<double> x = MatX<double>::Random(c.C, layout.tokens()) * 1e3;
  MatX<double> out, dx;
  conv.forward(x, layout, out);
  CHECK(out == x);
  const MatX<double> dOut = MatX<double>::Random(c.C, layout.tokens());
  conv.backward(dOut, dx);
  CHECK(dx == dOut);

  ddl::TokenConv<float> f(c.C, c.K);
  f.initIdentity();
  const MatX<float> xf = x.cast<float>();
  MatX<float> outf;
  f.forwardInference(xf, layout, outf);
  CHECK(outf == xf);
}

TEST_CASE("TokenConv is causal and keeps the sequences of a batch apart", "[token_conv]") {
  std::srand(17);
  const Index C = 3, K = 4, B = 3, T = 7;
  const auto layout = TokenLayout::sequence(B, T);
  ddl::TokenConv<double> conv(C, K, true);
  ddl::Rng rng(17);
  conv.init(rng);
  const MatX<double> x = MatX<double>::Random(C, B * T);
  MatX<double> base;
  conv.forwardInference(x, layout, base);

  for (Index b = 0; b < B; ++b)
    for (Index t = 0; t + 1 < T; ++t) {
      CAPTURE(b, t);
      MatX<double> changed = x, out;
      changed.col(b * T + t + 1).array() += 1.0;
      conv.forwardInference(changed, layout, out);
      for (Index bb = 0; bb < B; ++bb) {
        const Index upTo = bb == b ? t + 1 : T;  // the same sequence up to t; all of the others
        CHECK(out.middleCols(bb * T, upTo) == base.middleCols(bb * T, upTo));
      }
      CHECK(out.col(b * T + t + 1) != base.col(b * T + t + 1));  // the change does reach t + 1
    }

  // Each sequence alone gives the same columns as the batch.
  MatX<double> one;
  for (Index b = 0; b < B; ++b) {
    const MatX<double> xb = x.middleCols(b * T, T);
    conv.forwardInference(xb, TokenLayout::sequence(1, T), one);
    CHECK(one == base.middleCols(b * T, T));
  }
}

TEST_CASE("TokenConv rejects bad layouts, shapes and options with clear errors", "[token_conv][errors]") {
  const auto k0 = thrownMessage<ddl::ValueError>([] { ddl::TokenConv<double>(3, 0); });
  CHECK(contains(k0, "ddl::TokenConv"));
  CHECK(contains(k0, "kernel = 0"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::TokenConv<double>(0, 4); }), "channels = 0"));

  ddl::TokenConv<double> conv(3, 4);
  MatX<double> out, dx;
  const auto before = thrownMessage<ddl::Error>([&] { conv.backward(MatX<double>::Zero(3, 4), dx); });
  CHECK(contains(before, "ddl::TokenConv::backward"));
  CHECK(contains(before, "before forward"));

  const auto image = thrownMessage<ddl::ShapeError>(
      [&] { conv.forward(MatX<double>::Zero(3, 8), TokenLayout::image(2, 2, 2), out); });
  CHECK(contains(image, "ddl::TokenConv::forward"));
  CHECK(contains(image, "sequence layout"));
  CHECK(contains(image, "H=2"));
  const auto cols = thrownMessage<ddl::ShapeError>(
      [&] { conv.forward(MatX<double>::Zero(3, 7), TokenLayout::sequence(2, 4), out); });
  CHECK(contains(cols, "ddl::TokenConv::forward"));
  CHECK(contains(cols, "(3, 7)"));
  CHECK(contains(cols, "(3, 8)"));
  const auto rows = thrownMessage<ddl::ShapeError>(
      [&] { conv.forwardInference(MatX<double>::Zero(2, 8), TokenLayout::sequence(2, 4), out); });
  CHECK(contains(rows, "ddl::TokenConv::forwardInference"));
  CHECK(contains(rows, "(2, 8)"));
  CHECK(contains(rows, "(3, 8)"));

  MatX<double> x = MatX<double>::Zero(3, 8);
  CHECK(contains(thrownMessage<ddl::Error>([&] { conv.forward(x, TokenLayout::sequence(2, 4), x); }),
                 "must not alias"));
  conv.forward(x, TokenLayout::sequence(2, 4), out);
  const auto dOut = thrownMessage<ddl::ShapeError>([&] { conv.backward(MatX<double>::Zero(3, 6), dx); });
  CHECK(contains(dOut, "ddl::TokenConv::backward"));
  CHECK(contains(dOut, "(3, 6)"));
  CHECK(contains(thrownMessage<ddl::Error>([&] { ddl::TokenConv<double>(3).bias(); }), "without a bias"));
}

TEST_CASE("TokenConv and SwiGluBranch on shapes that split over threads agree with the definition",
          "[token_conv][swiglu][threads]") {
  const int saved = ddl::numThreads();
  std::srand(23);
  // TokenConv: C * K * N = 2^16 >= kParallelMinWork, so forward and dx are split over the threads.
  const Index C = 64, K = 4, B = 4, T = 64;
  const auto layout = TokenLayout::sequence(B, T);
  ddl::TokenConv<double> conv(C, K);
  ddl::Rng rng(23);
  conv.init(rng);
  const MatX<double> x = MatX<double>::Random(C, B * T), dOut = MatX<double>::Random(C, B * T);
  // SwiGLU: hidden * N = 170 * 512 >= 2^16, so the gate and its backward are split too.
  const Index d = 64, N = 512;
  ddl::SwiGluBranch<double> branch(d, siluOptions());
  branch.init(rng);
  const MatX<double> Cin = MatX<double>::Random(d, N), dH = MatX<double>::Random(d, N);
  const MatX<double> &W1 = branch.fc1().weight().value, &W2 = branch.fc2().weight().value,
                     &W3 = branch.fc3().weight().value;
  const MatX<double> A = W1 * Cin, Bv = W3 * Cin;
  const MatX<double> sig = A.unaryExpr([](double v) { return 1 / (1 + std::exp(-v)); });
  const MatX<double> Hexp = W2 * (A.array() * sig.array() * Bv.array()).matrix();
  const MatX<double> dM = W2.transpose() * dH;
  const MatX<double> dA = (dM.array() * Bv.array() * sig.array() * (1 + A.array() * (1 - sig.array()))).matrix();
  const MatX<double> dB = (dM.array() * A.array() * sig.array()).matrix();
  const MatX<double> dCexp = W1.transpose() * dA + W3.transpose() * dB;

  MatX<double> out1, dx1, dw1;
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    ddl::setNumThreads(threads);
    MatX<double> out, dx, H, dC;
    conv.forward(x, layout, out);
    ddl::zeroGrad(conv);
    conv.backward(dOut, dx);
    CHECK(ddl::testing::relErr(out, convReference(conv.weight().value, x, B, T)) < 1e-14);
    if (threads == 1) {
      out1 = out;
      dx1 = dx;
      dw1 = conv.weight().grad;
    }
    CHECK(out == out1);  // per-token columns and a one-thread weight sum: the same bits
    CHECK(dx == dx1);
    CHECK(conv.weight().grad == dw1);

    branch.forward(Cin, TokenLayout::vectors(N), H);
    branch.backward(dH, dC);
    CHECK(ddl::testing::relErr(H, Hexp) < 1e-12);
    CHECK(ddl::testing::relErr(dC, dCexp) < 1e-12);
  }
  ddl::setNumThreads(saved);
}

}  // namespace test_sequence_layers
