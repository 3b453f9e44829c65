// Tests for nn/layers/conv2d.hpp (and the window geometry of nn/layers/window2d.hpp), and RmsNorm as the per-pixel
// channel norm of an image activation: central differences in double, agreement with a naive direct
// convolution kept here as the reference (forward and backward, on one and two threads, at a size above
// the threading threshold), PyTorch's weight layout on hand-computed cases, initialisation, no
// allocation in steady state, the error messages, and the bits under the emulated bf16 policy.
#include "eigen_guard.hpp"  // first: live allocation checks even with NDEBUG

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "conv_bf16_cases.hpp"
#include "fixtures.hpp"
#include "eigen_guard_fires.hpp"
#include "emulated_bf16.hpp"
#include "fd_check.hpp"
#include "ddl/core/bf16.hpp"
#include "ddl/core/bf16_copy.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/precision.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/nn/layers/conv2d.hpp"
#include "ddl/nn/layers/init.hpp"
#include "ddl/nn/layers/rms_norm.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_conv {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl::TokenLayout;
using ddl::VecX;
using ddl::Window2d;
using ddl_test::contains;
using ddl_test::emulatedBf16;
using ddl_test::randInt;
using ddl_test::thrownMessage;

namespace {

// The reference: a direct loop over output pixels, channels and taps, written from the definition
//   Y(o, (b, oy, ox)) = bias(o) + Σ_{c,i,j} Wt[o, c, i, j] X(c, (b, oy*sh - ph + i, ox*sw - pw + j)),
// with Wt[o, c, i, j] = weight(o, (c*kh + i)*kw + j) and pixels outside the image read as zero.
// Backward by the same loop: every term contributes dY * X to dW, dY * Wt to dX and dY to db.
struct NaiveConv {
  Index in, out;
  Window2d w;
  MatX<double> weight;  // (out, in*kh*kw)
  VecX<double> bias;    // (out) or empty

  TokenLayout outLayout(const TokenLayout& l) const {
    return TokenLayout::image(l.batch, (l.height + 2 * w.padH - w.kernelH) / w.strideH + 1,
                              (l.width + 2 * w.padW - w.kernelW) / w.strideW + 1);
  }
  // Calls f(o, outColumn, c, inColumn, weightColumn) for every term with an input pixel inside the image.
  template <class F>
  void forEachTerm(const TokenLayout& l, F&& f) const {
    const TokenLayout ol = outLayout(l);
    for (Index b = 0; b < l.batch; ++b)
      for (Index oy = 0; oy < ol.height; ++oy)
        for (Index ox = 0; ox < ol.width; ++ox)
          for (Index c = 0; c < in; ++c)
            for (Index i = 0; i < w.kernelH; ++i)
              for (Index j = 0; j < w.kernelW; ++j) {
                const Index y = oy * w.strideH - w.padH + i, x = ox * w.strideW - w.padW + j;
                if (y < 0 || y >= l.height || x < 0 || x >= l.width) continue;
                const Index ocol = (b * ol.height + oy) * ol.width + ox, icol = (b * l.height + y) * l.width + x;
                for (Index o = 0; o < out; ++o) f(o, ocol, c, icol, (c * w.kernelH + i) * w.kernelW + j);
              }
  }
  MatX<double> forward(const MatX<double>& X, const TokenLayout& l) const {
    MatX<double> Y = MatX<double>::Zero(out, outLayout(l).tokens());
    if (bias.size() > 0) Y.colwise() += bias;
    forEachTerm(l, [&](Index o, Index oc, Index c, Index ic, Index wc) { Y(o, oc) += weight(o, wc) * X(c, ic); });
    return Y;
  }
  void backward(const MatX<double>& X, const TokenLayout& l, const MatX<double>& dY, MatX<double>& dX,
                MatX<double>& dW, VecX<double>& db) const {
    dX = MatX<double>::Zero(in, l.tokens());
    dW = MatX<double>::Zero(out, weight.cols());
    db = dY.rowwise().sum();
    forEachTerm(l, [&](Index o, Index oc, Index c, Index ic, Index wc) {
      dW(o, wc) += dY(o, oc) * X(c, ic);
      dX(c, ic) += weight(o, wc) * dY(o, oc);
    });
  }
};

NaiveConv naiveOf(const ddl::Conv2d<double>& conv) {
  NaiveConv n{conv.inChannels(), conv.outChannels(), conv.window(), conv.weight().value, VecX<double>()};
  if (conv.hasBias()) n.bias = conv.bias().value.col(0);
  return n;
}

// Random geometry whose kernel fits the padded image: kernel 1..3 per axis, stride 1..3, padding 0..2,
// images 1..6 pixels per side (1x1 images included), batch 1..3, channels 1..4.
struct RandomCase {
  Index in, out;
  Window2d w;
  TokenLayout layout;
  bool bias;
};
RandomCase randomCase(std::mt19937& gen) {
  RandomCase rc{randInt(gen, 1, 4), randInt(gen, 1, 4), Window2d(), TokenLayout(), randInt(gen, 0, 1) == 1};
  const Index kh = randInt(gen, 1, 3), kw = randInt(gen, 1, 3);
  const Index ph = randInt(gen, 0, 2), pw = randInt(gen, 0, 2);
  rc.w = Window2d::make(kh, kw, randInt(gen, 1, 3), randInt(gen, 1, 3), ph, pw);
  const Index H = std::max<Index>(randInt(gen, 1, 6), kh - 2 * ph), W = std::max<Index>(randInt(gen, 1, 6), kw - 2 * pw);
  rc.layout = TokenLayout::image(randInt(gen, 1, 3), std::max<Index>(H, 1), std::max<Index>(W, 1));
  return rc;
}

// Central-difference check of dX, weight and bias for loss = <R, Y> (so dY = R), relErr and entryRelErr.
void checkConvGrads(ddl::Conv2d<double>& conv, const TokenLayout& layout) {
  MatX<double> X = MatX<double>::Random(conv.inChannels(), layout.tokens()), Y, dX;
  conv.forward(X, layout, Y);
  const MatX<double> R = MatX<double>::Random(Y.rows(), Y.cols());
  auto loss = [&] {
    MatX<double> Yl;
    conv.forward(X, layout, Yl);
    return (R.array() * Yl.array()).sum();
  };
  ddl::zeroGrad(conv);
  conv.backward(R, dX);
  const MatX<double> numX = ddl::testing::numericGrad(X, loss);
  FD_CHECK(dX, numX);
  CHECK(ddl::testing::entryRelErr(dX, numX) < 1e-6);
  conv.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    CAPTURE(name);
    const MatX<double> num = ddl::testing::numericGrad(p.value, loss);
    FD_CHECK(p.grad, num);
    CHECK(ddl::testing::entryRelErr(p.grad, num) < 1e-6);
  });
}

// Restores the thread count a test changed.
struct ThreadGuard {
  int saved = ddl::numThreads();
  ~ThreadGuard() { ddl::setNumThreads(saved); }
};

}  // namespace

// ---------------------------------------------------------------- gradients

TEST_CASE("Conv2d backward matches central differences on random geometries", "[grad][conv2d]") {
  const auto seed = GENERATE(take(16, random(1u, 1000000u)));
  std::mt19937 gen(seed);
  std::srand(seed);
  const RandomCase rc = randomCase(gen);
  CAPTURE(seed, rc.in, rc.out, rc.bias, ddl::toString(rc.w), ddl::toString(rc.layout));
  ddl::Conv2d<double> conv(rc.in, rc.out, rc.w, rc.bias);
  ddl::Rng rng(seed);
  conv.init(rng);
  checkConvGrads(conv, rc.layout);
}

TEST_CASE("Conv2d by shifted products matches central differences on random stride-1 geometries",
          "[grad][conv2d][shifted]") {
  const auto seed = GENERATE(take(16, random(1u, 1000000u)));
  std::mt19937 gen(seed);
  std::srand(seed);
  RandomCase rc = randomCase(gen);
  rc.w = Window2d::make(rc.w.kernelH, rc.w.kernelW, 1, 1, rc.w.padH, rc.w.padW);
  // Scratch for 1 .. 4 output rows per band: bands split images, the last band is shorter.
  const Index rowBytes = (rc.layout.width + 2 * rc.w.padW) * (2 * rc.in + rc.out) * Index(sizeof(double));
  const Index rows = randInt(gen, 1, 4);
  CAPTURE(seed, rc.in, rc.out, rc.bias, ddl::toString(rc.w), ddl::toString(rc.layout), rows);
  ddl::Conv2d<double> conv(rc.in, rc.out, rc.w, rc.bias);
  conv.setAlgorithm(ddl::ConvAlgorithm::ShiftedProducts);
  conv.setScratchBytes(rows * rowBytes);
  ddl::Rng rng(seed);
  conv.init(rng);
  checkConvGrads(conv, rc.layout);
}

TEST_CASE("Conv2d backward matches central differences on edge shapes", "[grad][conv2d]") {
  struct Case {
    Index in, out, kh, kw, sh, sw, ph, pw, B, H, W;
  };
  const Case c = GENERATE(Case{1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1},   // 1x1 image, C = 1, batch 1, all padding
                          Case{1, 2, 1, 1, 1, 1, 0, 0, 1, 1, 1},   // 1x1 kernel on a 1x1 image
                          Case{3, 1, 3, 3, 1, 1, 1, 1, 1, 5, 7},   // one output channel, odd sizes
                          Case{2, 3, 2, 3, 2, 1, 0, 1, 2, 5, 4},   // rectangular kernel, unequal strides
                          Case{2, 2, 3, 1, 3, 2, 2, 0, 3, 7, 3},   // stride larger than padding
                          Case{1, 1, 5, 5, 1, 1, 2, 2, 1, 3, 3},   // kernel larger than the image
                          Case{4, 2, 3, 3, 2, 2, 1, 1, 2, 8, 8});  // stride-2 transition shape
  CAPTURE(c.in, c.out, c.kh, c.kw, c.sh, c.sw, c.ph, c.pw, c.B, c.H, c.W);
  for (auto algorithm : {ddl::ConvAlgorithm::Patches, ddl::ConvAlgorithm::ShiftedProducts})
    for (bool bias : {true, false}) {
      if (algorithm == ddl::ConvAlgorithm::ShiftedProducts && (c.sh != 1 || c.sw != 1)) continue;
      CAPTURE(ddl::toString(algorithm), bias);
      std::srand(static_cast<unsigned>(c.in * 7 + c.kh * 5 + c.H));
      ddl::Conv2d<double> conv(c.in, c.out, Window2d::make(c.kh, c.kw, c.sh, c.sw, c.ph, c.pw), bias);
      conv.setAlgorithm(algorithm);
      ddl::Rng rng(17);
      conv.init(rng);
      checkConvGrads(conv, TokenLayout::image(c.B, c.H, c.W));
    }
}

// ---------------------------------------------------------------- naive reference

TEST_CASE("Conv2d forward and backward equal the naive direct convolution", "[conv2d]") {
  const auto seed = GENERATE(take(8, random(1u, 1000000u)));
  std::mt19937 gen(seed);
  std::srand(seed);
  // Sizes where patch chunks end inside rows and images: K = kh*kw*in up to 9*24 (chunk ~ 110 columns).
  const Index in = randInt(gen, 1, 24), out = randInt(gen, 1, 12);
  const Index k = randInt(gen, 1, 3) * 2 - 1, s = randInt(gen, 1, 2), p = randInt(gen, 0, k / 2 + 1);
  const TokenLayout layout = TokenLayout::image(randInt(gen, 1, 4), randInt(gen, k, 15), randInt(gen, k, 15));
  const bool bias = seed % 2 == 0;
  CAPTURE(seed, in, out, k, s, p, bias, ddl::toString(layout));
  ddl::Conv2d<double> conv(in, out, k, s, p, bias);
  ddl::Rng rng(seed);
  conv.init(rng);
  const NaiveConv ref = naiveOf(conv);
  const MatX<double> X = MatX<double>::Random(in, layout.tokens());
  const TokenLayout refL = ref.outLayout(layout);
  const MatX<double> Yref = ref.forward(X, layout);
  const MatX<double> dY = MatX<double>::Random(out, refL.tokens());
  MatX<double> dXref, dWref;
  VecX<double> dbref;
  ref.backward(X, layout, dY, dXref, dWref, dbref);
  for (auto algorithm : {ddl::ConvAlgorithm::Patches, ddl::ConvAlgorithm::ShiftedProducts}) {
    if (algorithm == ddl::ConvAlgorithm::ShiftedProducts && s != 1) continue;
    // Scratch from one patch chunk / band row up to the default: chunks and bands end inside images.
    const Index scratch = Index(1) << randInt(gen, 8, 18);
    CAPTURE(ddl::toString(algorithm), scratch);
    conv.setAlgorithm(algorithm);
    conv.setScratchBytes(scratch);
    MatX<double> Y, dX;
    const TokenLayout outL = conv.forward(X, layout, Y);
    CHECK(outL == refL);
    CHECK(outL == conv.lastOutputLayout());
    CHECK(ddl::testing::relErr(Y, Yref) < 1e-13);
    ddl::zeroGrad(conv);
    conv.backward(dY, dX);
    CHECK(ddl::testing::relErr(dX, dXref) < 1e-13);
    CHECK(ddl::testing::relErr(conv.weight().grad, dWref) < 1e-13);
    if (bias) CHECK(ddl::testing::relErr(conv.bias().grad.col(0), dbref) < 1e-13);
  }
}

TEST_CASE("Conv2d by patches: a chunk ending one column into a row whose first taps are all padding",
          "[conv2d][regression]") {
  // 5x5, padding 2, 14 columns per row, chunks of 32 columns: the chunk [347, 379) ends with the one
  // column (oy = 12, ox = 0) of a row, whose taps j < 2 lie wholly in the padding (tapSpan once gave
  // lo = 2 > n = 1 there).
  std::srand(531849);
  ddl::Conv2d<double> conv(21, 12, 5, 1, 2, /*bias=*/false);
  conv.setAlgorithm(ddl::ConvAlgorithm::Patches);
  conv.setScratchBytes(Index(1) << 17);  // 131072 / (25 * 21 * 8) -> the 32-column minimum
  ddl::Rng rng(3);
  conv.init(rng);
  const TokenLayout layout = TokenLayout::image(3, 15, 14);
  const NaiveConv ref = naiveOf(conv);
  const MatX<double> X = MatX<double>::Random(21, layout.tokens()), dY = MatX<double>::Random(12, layout.tokens());
  MatX<double> Y, dX, dXref, dWref;
  VecX<double> dbref;
  conv.forward(X, layout, Y);
  CHECK(ddl::testing::relErr(Y, ref.forward(X, layout)) < 1e-13);
  ref.backward(X, layout, dY, dXref, dWref, dbref);
  ddl::zeroGrad(conv);
  conv.backward(dY, dX);
  CHECK(ddl::testing::relErr(dX, dXref) < 1e-13);
  CHECK(ddl::testing::relErr(conv.weight().grad, dWref) < 1e-13);
}

TEST_CASE("Conv2d on two threads above the threading threshold equals the naive reference and one thread",
          "[conv2d][threads]") {
  ThreadGuard guard;
  std::srand(2024);
  // 8 -> 8 channels, 3x3: 576 multiply-adds per output pixel, 4 x 24 x 24 pixels: 1.3e6 > kConvParallelMin.
  const Index in = 8, out = 8;
  const TokenLayout layout = TokenLayout::image(4, 24, 24);
  REQUIRE(out * 9 * in * layout.tokens() >= ddl::detail::kConvParallelMin);
  ddl::Conv2d<double> conv(in, out, 3, 1, 1);
  ddl::Rng rng(5);
  conv.init(rng);
  const NaiveConv ref = naiveOf(conv);
  const MatX<double> X = MatX<double>::Random(in, layout.tokens());
  const MatX<double> dY = MatX<double>::Random(out, layout.tokens());
  MatX<double> dXref, dWref;
  VecX<double> dbref;
  ref.backward(X, layout, dY, dXref, dWref, dbref);
  const MatX<double> Yref = ref.forward(X, layout);

  for (auto algorithm : {ddl::ConvAlgorithm::Patches, ddl::ConvAlgorithm::ShiftedProducts})
  for (Index scratch : {Index(4) << 10, ddl::detail::kConvScratchBytes})  // 1-row bands, whole images
  for (int threads : {1, 2}) {
    CAPTURE(ddl::toString(algorithm), scratch, threads);
    ddl::setNumThreads(threads);
    conv.setAlgorithm(algorithm);
    conv.setScratchBytes(scratch);
    MatX<double> Y, dX;
    conv.forward(X, layout, Y);
    ddl::zeroGrad(conv);
    conv.backward(dY, dX);
    CHECK(ddl::testing::relErr(Y, Yref) < 1e-13);
    CHECK(ddl::testing::relErr(dX, dXref) < 1e-13);
    CHECK(ddl::testing::relErr(conv.weight().grad, dWref) < 1e-13);
    CHECK(ddl::testing::relErr(conv.bias().grad.col(0), dbref) < 1e-13);
  }
}

TEST_CASE("Conv2d in float agrees with double", "[conv2d]") {
  std::srand(99);
  ddl::Conv2d<double> convD(3, 5, Window2d::make(3, 2, 1, 2, 1, 0));
  ddl::Conv2d<float> convF(3, 5, Window2d::make(3, 2, 1, 2, 1, 0));
  ddl::Rng rngD(3), rngF(3);
  convD.init(rngD);
  convF.init(rngF);
  const TokenLayout layout = TokenLayout::image(2, 9, 6);
  const MatX<double> X = MatX<double>::Random(3, layout.tokens());
  MatX<double> Yd;
  MatX<float> Yf;
  convD.forward(X, layout, Yd);
  const MatX<float> Xf = X.cast<float>();  // the layer keeps a view of its input until backward
  convF.forward(Xf, layout, Yf);
  CHECK(ddl::testing::relErr(Yf.cast<double>(), Yd) < 1e-5);
  MatX<float> dXf;
  convF.backward(MatX<float>::Ones(5, Yf.cols()), dXf);
  CHECK(dXf.allFinite());
  CHECK(dXf.cols() == layout.tokens());
}

// ---------------------------------------------------------------- the bf16 policy

namespace {
MatX<float> roundedToBf16(const MatX<float>& X) { return X.unaryExpr([](float x) { return ddl::roundToBf16(x); }); }
}  // namespace

// The emulated bf16 product is the float product of the rounded inputs, so the layer under the emulated policy
// must give the float layer's bits on rounded weights, input and output gradient (the bias gradient sums dY
// itself), whether its products read the band, the output gradient and the weight converted once
// (core/bf16_copy.hpp) or convert their operands per product.
TEST_CASE("Conv2d under the emulated bf16 policy is the float convolution of rounded inputs, bit for bit",
          "[conv2d][bf16]") {
  ThreadGuard guard;
  for (const ddl_test::ConvBf16Case& c : ddl_test::convBf16Cases())
    for (int threads : {1, 2}) {
      CAPTURE(c.name, threads);
      ddl::setNumThreads(threads);
      std::srand(31);
      ddl::Conv2d<float> conv = ddl_test::convOf(c), rounded = ddl_test::convOf(c);
      rounded.weight().value = roundedToBf16(conv.weight().value);
      const TokenLayout outL = conv.outputLayout(TokenLayout::image(c.batch, c.height, c.width));
      const MatX<float> X = MatX<float>::Random(c.in, c.batch * c.height * c.width);
      const MatX<float> dY = MatX<float>::Random(c.out, outL.tokens());
      const MatX<float> Xr = roundedToBf16(X), dYr = roundedToBf16(dY);
      ddl_test::ConvBf16Run once, perProduct;
      emulatedBf16([&] {
        once = ddl_test::runConv(conv, c, X, dY);
        const bool previous = ddl::setBf16CopiesEnabled(false);
        perProduct = ddl_test::runConv(conv, c, X, dY);
        ddl::setBf16CopiesEnabled(previous);
      });
      const ddl_test::ConvBf16Run reference = ddl_test::runConv(rounded, c, Xr, dYr);
      const ddl_test::ConvBf16Run unrounded = ddl_test::runConv(conv, c, X, dY);  // float, for the bias gradient
      CHECK(ddl_test::sameBits(once.Y, reference.Y));
      CHECK(ddl_test::sameBits(once.dX, reference.dX));
      CHECK(ddl_test::sameBits(once.dW, reference.dW));
      CHECK(ddl_test::sameBits(once.db, unrounded.db));
      CHECK(ddl_test::sameBits(perProduct.Y, once.Y));
      CHECK(ddl_test::sameBits(perProduct.dX, once.dX));
      CHECK(ddl_test::sameBits(perProduct.dW, once.dW));
      CHECK(!ddl_test::sameBits(unrounded.Y, once.Y));  // the policy did round
    }
}

// ---------------------------------------------------------------- PyTorch layout

TEST_CASE("Conv2d weight is PyTorch's [out, in, kh, kw] in row-major order", "[conv2d][torch]") {
  // weight = arange(1, 13).view(1, 2, 2, 3); input one-hot at channel 1, pixel (y=1, x=0) of a 2x3 image:
  // the single output equals weight[0, 1, 1, 0] = flat index ((0*2 + 1)*2 + 1)*3 + 0 = 9, value 10.
  ddl::Conv2d<double> conv(2, 1, Window2d::make(2, 3, 1, 1, 0, 0), /*bias=*/false);
  REQUIRE(conv.weight().shape == std::vector<Index>{1, 2, 2, 3});
  for (Index f = 0; f < 12; ++f) conv.weight().value(0, f) = static_cast<double>(f + 1);
  const TokenLayout layout = TokenLayout::image(1, 2, 3);
  MatX<double> X = MatX<double>::Zero(2, 6), Y;
  X(1, 1 * 3 + 0) = 1.0;
  conv.forward(X, layout, Y);
  REQUIRE(Y.rows() == 1);
  REQUIRE(Y.cols() == 1);
  CHECK(Y(0, 0) == 10.0);
  // With an all-ones input the output is the sum of all weights: 78.
  X.setOnes();
  conv.forward(X, layout, Y);
  CHECK(Y(0, 0) == 78.0);
}

TEST_CASE("Conv2d stride 2, padding 1 matches a hand-computed case", "[conv2d][torch]") {
  // F.conv2d(arange(1, 10).view(1, 1, 3, 3), tensor([[1, 2], [3, 4]]).view(1, 1, 2, 2), bias=[0.5],
  //          stride=2, padding=1): windows start at (-1, -1), (-1, 1), (1, -1), (1, 1):
  //   (0,0): 4*1 = 4;  (0,1): 3*2 + 4*3 = 18;  (1,0): 2*4 + 4*7 = 36;  (1,1): 1*5 + 2*6 + 3*8 + 4*9 = 77
  ddl::Conv2d<double> conv(1, 1, 2, 2, 1);
  conv.weight().value << 1, 2, 3, 4;
  conv.bias().value(0, 0) = 0.5;
  MatX<double> X(1, 9), Y;
  for (Index p = 0; p < 9; ++p) X(0, p) = static_cast<double>(p + 1);
  const TokenLayout outL = conv.forward(X, TokenLayout::image(1, 3, 3), Y);
  CHECK(outL == TokenLayout::image(1, 2, 2));
  MatX<double> expected(1, 4);
  expected << 4.5, 18.5, 36.5, 77.5;
  CHECK(Y == expected);
  // dX = col2im(Wᵀ 1): pixel p gets the sum of the weights that touch it.
  MatX<double> dX;
  conv.backward(MatX<double>::Ones(1, 4), dX);
  MatX<double> dXexpected(1, 9);
  dXexpected << 4, 3, 4,
                2, 1, 2,
                4, 3, 4;
  CHECK(dX == dXexpected);
  CHECK(conv.bias().grad(0, 0) == 4.0);
}

TEST_CASE("Conv2d channels are rows and pixels are columns in (b*H + y)*W + x order", "[conv2d]") {
  // A 1x1 convolution with weight I is the identity on any layout; a 1x2 kernel [0, 1] with padding
  // (0, 0) shifts each row left by one pixel, never across rows or images.
  ddl::Conv2d<double> shift(1, 1, Window2d::make(1, 2, 1, 1, 0, 0), false);
  shift.weight().value << 0, 1;
  const TokenLayout layout = TokenLayout::image(2, 2, 3);
  MatX<double> X(1, 12), Y;
  for (Index p = 0; p < 12; ++p) X(0, p) = static_cast<double>(p);
  const TokenLayout outL = shift.forward(X, layout, Y);
  CHECK(outL == TokenLayout::image(2, 2, 2));
  MatX<double> expected(1, 8);
  expected << 1, 2, 4, 5, 7, 8, 10, 11;
  CHECK(Y == expected);
}

// ---------------------------------------------------------------- parameters and init

TEST_CASE("Conv2d parameters: names, PyTorch shapes, decay, default init bounds and draw order", "[conv2d][init]") {
  ddl::Conv2d<double> conv(3, 4, Window2d::make(3, 2, 1, 1, 1, 0));
  std::vector<std::string> names;
  std::vector<std::vector<Index>> shapes;
  conv.visitParams("stem", [&](const std::string& name, ddl::Param<double>& p) {
    names.push_back(name);
    shapes.push_back(p.shape);
  });
  CHECK(names == std::vector<std::string>{"stem.weight", "stem.bias"});
  CHECK(shapes == std::vector<std::vector<Index>>{{4, 3, 3, 2}, {4}});
  CHECK(conv.weight().value.rows() == 4);
  CHECK(conv.weight().value.cols() == 18);
  CHECK(conv.weight().decay);
  CHECK_FALSE(conv.bias().decay);
  CHECK(ddl::numParams(conv) == 4 * 18 + 4);

  ddl::Rng rng(42);
  conv.init(rng);
  const double bound = 1.0 / std::sqrt(18.0);
  CHECK(conv.weight().value.cwiseAbs().maxCoeff() <= bound);
  CHECK(conv.bias().value.cwiseAbs().maxCoeff() <= bound);
  CHECK(conv.weight().value.cwiseAbs().maxCoeff() > 0.5 * bound);
  // Draw order: the (out, in*kh*kw) weight column by column, then the bias, as initLinearParams.
  MatX<double> W(4, 18), b(4, 1);
  ddl::Rng same(42);
  ddl::initLinearParams(W, &b, same, ddl::InitScheme::pytorchDefault());
  CHECK(conv.weight().value == W);
  CHECK(conv.bias().value == b);
}

TEST_CASE("Conv2d: gradients accumulate, dX is overwritten, backwardParamsOnly and forwardInference agree",
          "[conv2d]") {
  std::srand(5);
  ddl::Conv2d<double> conv(3, 4, 3, 1, 1);
  ddl::Rng rng(5);
  conv.init(rng);
  const TokenLayout layout = TokenLayout::image(2, 5, 4);
  const MatX<double> X = MatX<double>::Random(3, layout.tokens()), dY = MatX<double>::Random(4, layout.tokens());
  MatX<double> Y, Yinf, dX1, dX2;
  conv.forward(X, layout, Y);
  conv.backward(dY, dX1);
  const MatX<double> gW = conv.weight().grad, gb = conv.bias().grad;
  conv.backward(dY, dX2);
  CHECK(conv.weight().grad.isApprox(2 * gW, 1e-14));
  CHECK(conv.bias().grad.isApprox(2 * gb, 1e-14));
  CHECK(dX2 == dX1);

  // An inference forward on other data changes neither the output of forward nor what backward uses.
  const MatX<double> other = MatX<double>::Random(3, TokenLayout::image(1, 6, 6).tokens());
  MatX<double> Yother;
  CHECK(conv.forwardInference(other, TokenLayout::image(1, 6, 6), Yother) == TokenLayout::image(1, 6, 6));
  conv.forwardInference(X, layout, Yinf);
  CHECK(Yinf == Y);
  ddl::zeroGrad(conv);
  conv.backwardParamsOnly(dY);
  CHECK(conv.weight().grad.isApprox(gW, 1e-14));
  CHECK(conv.bias().grad.isApprox(gb, 1e-14));
  CHECK(conv.lastInputLayout() == layout);
}

TEST_CASE("Conv2d with batch 0 gives empty outputs", "[conv2d]") {
  ddl::Conv2d<double> conv(2, 3, 3, 1, 1);
  MatX<double> X(2, 0), Y, dX;
  const TokenLayout outL = conv.forward(X, TokenLayout::image(0, 4, 4), Y);
  CHECK(outL.tokens() == 0);
  CHECK(Y.rows() == 3);
  CHECK(Y.cols() == 0);
  conv.backward(MatX<double>(3, 0), dX);
  CHECK(dX.rows() == 2);
  CHECK(dX.cols() == 0);
  CHECK(conv.weight().grad.isZero());
}

// ---------------------------------------------------------------- allocation

TEST_CASE("Conv2d steady-state forward and backward allocate nothing on one and two threads", "[conv2d][alloc]") {
  ThreadGuard guard;
  std::srand(8);
  const TokenLayout layout = TokenLayout::image(4, 24, 24);  // above the threading threshold
  for (auto algorithm : {ddl::ConvAlgorithm::Patches, ddl::ConvAlgorithm::ShiftedProducts})
  for (int threads : {1, 2}) {
    CAPTURE(ddl::toString(algorithm), threads);
    ddl::setNumThreads(threads);
    ddl::Conv2d<float> conv(8, 8, 3, 1, 1);
    conv.setAlgorithm(algorithm);
    conv.setScratchBytes(Index(8) << 10);  // several bands per image, a shorter last band
    ddl::Rng rng(8);
    conv.init(rng);
    const MatX<float> X = MatX<float>::Random(8, layout.tokens()), dY = MatX<float>::Random(8, layout.tokens());
    MatX<float> Y, dX;
    conv.forward(X, layout, Y);
    conv.backward(dY, dX);
    Eigen::internal::set_is_malloc_allowed(false);
    conv.forward(X, layout, Y);
    conv.backward(dY, dX);
    conv.backwardParamsOnly(dY);
    Eigen::internal::set_is_malloc_allowed(true);
    CHECK(dX.allFinite());
  }
}

TEST_CASE("the allocation guard of this file fires", "[conv2d][alloc]") { CHECK(ddl_test::allocationGuardFires()); }

// ---------------------------------------------------------------- errors

TEST_CASE("Conv2d rejects bad construction, shapes and layouts with clear messages", "[conv2d][errors]") {
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::Conv2d<double>(0, 2, 3); }), "ddl::Conv2d"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::Conv2d<double>(2, 2, 0); }), "kernel >= 1"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::Conv2d<double>(2, 2, 3, 0); }), "stride >= 1"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::Conv2d<double>(2, 2, 3, 1, -1); }), "padding >= 0"));

  ddl::Conv2d<double> conv(2, 3, 3, 1, 0);
  MatX<double> Y, dX;
  const std::string rows =
      thrownMessage<ddl::ShapeError>([&] { conv.forward(MatX<double>::Zero(3, 16), TokenLayout::image(1, 4, 4), Y); });
  CHECK(contains(rows, "ddl::Conv2d::forward"));
  CHECK(contains(rows, "(3, 16)"));
  CHECK(contains(rows, "expected (2, 16)"));
  const std::string cols =
      thrownMessage<ddl::ShapeError>([&] { conv.forward(MatX<double>::Zero(2, 15), TokenLayout::image(1, 4, 4), Y); });
  CHECK(contains(cols, "(B=1, H=4, W=4, T=1)"));
  const std::string seq =
      thrownMessage<ddl::ShapeError>([&] { conv.forward(MatX<double>::Zero(2, 8), TokenLayout::sequence(2, 4), Y); });
  CHECK(contains(seq, "image layout"));
  const std::string small =
      thrownMessage<ddl::ShapeError>([&] { conv.forward(MatX<double>::Zero(2, 4), TokenLayout::image(1, 2, 2), Y); });
  CHECK(contains(small, "does not fit"));
  CHECK(contains(thrownMessage<ddl::Error>([&] { conv.backward(MatX<double>::Zero(3, 4), dX); }), "before forward"));

  conv.forward(MatX<double>::Zero(2, 16), TokenLayout::image(1, 4, 4), Y);  // output 2x2
  const std::string dy = thrownMessage<ddl::ShapeError>([&] { conv.backward(MatX<double>::Zero(3, 16), dX); });
  CHECK(contains(dy, "ddl::Conv2d::backward"));
  CHECK(contains(dy, "expected (3, 4)"));
  CHECK(contains(thrownMessage<ddl::ShapeError>([&] { conv.backwardParamsOnly(MatX<double>::Zero(2, 4)); }),
                 "dY has shape (2, 4)"));

  ddl::Conv2d<double> noBias(2, 3, 3, 1, 0, false);
  CHECK(contains(thrownMessage<ddl::Error>([&] { noBias.bias(); }), "without a bias"));
  ddl::Conv2d<double> rect(2, 3, Window2d::make(3, 1, 1, 1, 1, 0));
  CHECK(contains(thrownMessage<ddl::Error>([&] { (void)rect.kernel(); }), "square window"));
  CHECK(conv.kernel() == 3);
  CHECK(conv.stride() == 1);
  CHECK(conv.padding() == 0);
}

// ---------------------------------------------------------------- channel RMSNorm per pixel

TEST_CASE("Conv2d algorithm choice: Automatic resolves by stride, width and padding, bad settings are refused",
          "[conv2d][shifted][errors]") {
  using ddl::ConvAlgorithm;
  ddl::Conv2d<double> narrow(16, 16, 3, 1, 1);
  CHECK(narrow.algorithm() == ConvAlgorithm::Automatic);
  CHECK(narrow.effectiveAlgorithm(TokenLayout::image(2, 32, 32)) == ConvAlgorithm::ShiftedProducts);
  CHECK(narrow.effectiveAlgorithm(TokenLayout::image(2, 8, 8)) == ConvAlgorithm::ShiftedProducts);   // 100/64
  CHECK(narrow.effectiveAlgorithm(TokenLayout::image(2, 4, 4)) == ConvAlgorithm::Patches);           // 36/16
  CHECK(ddl::Conv2d<double>(ddl::detail::kShiftedMaxChannels + 1, 8, 3, 1, 1)
            .effectiveAlgorithm(TokenLayout::image(1, 32, 32)) == ConvAlgorithm::Patches);
  ddl::Conv2d<double> strided(4, 4, 3, 2, 1);
  CHECK(strided.effectiveAlgorithm(TokenLayout::image(1, 32, 32)) == ConvAlgorithm::Patches);
  narrow.setAlgorithm(ConvAlgorithm::Patches);
  CHECK(narrow.effectiveAlgorithm(TokenLayout::image(2, 32, 32)) == ConvAlgorithm::Patches);
  narrow.setAlgorithm(ConvAlgorithm::ShiftedProducts);
  CHECK(narrow.effectiveAlgorithm(TokenLayout::image(2, 4, 4)) == ConvAlgorithm::ShiftedProducts);

  const std::string msg =
      thrownMessage<ddl::ValueError>([&] { strided.setAlgorithm(ConvAlgorithm::ShiftedProducts); });
  CHECK(contains(msg, "ddl::Conv2d::setAlgorithm"));
  CHECK(contains(msg, "stride (2, 2)"));
  CHECK(strided.algorithm() == ConvAlgorithm::Automatic);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { narrow.setScratchBytes(0); }), "bytes >= 1"));
  const ddl::Conv2d<double> automatic(16, 16, 3, 1, 1);
  CHECK(contains(thrownMessage<ddl::ShapeError>([&] { (void)automatic.effectiveAlgorithm(TokenLayout::sequence(3, 4)); }),
                 "ddl::Conv2d::effectiveAlgorithm"));
}

TEST_CASE("RmsNorm on an image activation is the per-pixel RMSNorm over channels", "[rms_norm][image]") {
  const auto seed = GENERATE(take(4, random(1u, 1000000u)));
  std::mt19937 gen(seed);
  std::srand(seed);
  const Index C = randInt(gen, 1, 6);
  const TokenLayout layout = TokenLayout::image(randInt(gen, 1, 3), randInt(gen, 1, 5), randInt(gen, 1, 5));
  CAPTURE(seed, C, ddl::toString(layout));
  ddl::RmsNorm<double> norm(C, 1e-5);
  norm.weight().value = MatX<double>::Random(C, 1);
  MatX<double> X = MatX<double>::Random(C, layout.tokens()), Y;
  REQUIRE(X.cols() == layout.tokens());
  norm.forward(X, Y);
  // Naive: for every image b and pixel (y, x), normalise the channel vector of that pixel.
  for (Index b = 0; b < layout.batch; ++b)
    for (Index y = 0; y < layout.height; ++y)
      for (Index x = 0; x < layout.width; ++x) {
        const Index p = (b * layout.height + y) * layout.width + x;
        double ms = 0;
        for (Index c = 0; c < C; ++c) ms += X(c, p) * X(c, p);
        const double r = 1.0 / std::sqrt(ms / static_cast<double>(C) + 1e-5);
        for (Index c = 0; c < C; ++c) CHECK(std::abs(Y(c, p) - norm.weight().value(c, 0) * X(c, p) * r) < 1e-14);
      }
  // and its backward on that layout matches central differences
  const MatX<double> R = MatX<double>::Random(C, layout.tokens());
  auto loss = [&] {
    MatX<double> Yl;
    norm.forward(X, Yl);
    return (R.array() * Yl.array()).sum();
  };
  norm.forward(X, Y);
  ddl::zeroGrad(norm);
  MatX<double> dX;
  norm.backward(R, dX);
  const MatX<double> numX = ddl::testing::numericGrad(X, loss);
  CHECK(ddl::testing::relErr(dX, numX) < 1e-6);
  CHECK(ddl::testing::entryRelErr(dX, numX) < 1e-6);
  const MatX<double> numG = ddl::testing::numericGrad(norm.weight().value, loss);
  CHECK(ddl::testing::relErr(norm.weight().grad, numG) < 1e-6);
  CHECK(ddl::testing::entryRelErr(norm.weight().grad, numG) < 1e-6);
}

}  // namespace test_conv
