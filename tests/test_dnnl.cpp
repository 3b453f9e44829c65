// ddl/dnnl/matmul.hpp: oneDNN's float matmul, through the same descriptors, layouts, strides and primitive
// cache as the bf16 one, agrees with ddl's float product for every transpose, alpha, accumulate and block
// (runs on every CPU); oneDNN's bf16 products, installed as the policy's kernel, agree with the emulation
// within float summation error, and a convolution's products give the same bits whether they read their
// operands from copies converted once (core/bf16_copy.hpp) or convert them per product (exit 77, "skipped",
// where the CPU or DNNL_MAX_CPU_ISA has no bf16). ddl/dnnl/convolution.hpp: oneDNN's float convolution agrees
// with Conv2d's float passes on every CPU (strides, rectangular windows, batch 1, one channel, blocks of
// larger inputs); under the bf16 policy Conv2d on oneDNN's bf16 convolution agrees with the emulated
// products within float summation error (exit 77 without bf16).
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "conv_bf16_cases.hpp"
#include "ddl/core/bf16.hpp"
#include "ddl/core/bf16_copy.hpp"
#include "ddl/core/gemm.hpp"
#include "ddl/core/precision.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/dnnl/bf16.hpp"
#include "ddl/nn/layers/conv2d.hpp"

namespace test_dnnl {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;

// max |X - Y| / (k eps sum |a||b| + tiny).
double boundRatio(const MatX<float>& X, const MatX<float>& Y, const MatX<float>& absProduct, Index k) {
  const double eps = std::numeric_limits<float>::epsilon();
  double worst = 0.0;
  for (Index j = 0; j < X.cols(); ++j)
    for (Index i = 0; i < X.rows(); ++i)
      worst = std::max(worst, std::abs(double(X(i, j)) - Y(i, j)) / (k * eps * absProduct(i, j) + 1e-30));
  return worst;
}

struct Operands {
  MatX<float> A, B, C0;
  Index m, n, k;
  bool transA, transB;
  MatX<float> absProduct() const {
    const MatX<float> a = transA ? MatX<float>(A.transpose()) : A, b = transB ? MatX<float>(B.transpose()) : B;
    return a.cwiseAbs() * b.cwiseAbs();
  }
};

Operands operands(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dim(1, 120);
  Operands o;
  o.m = dim(rng), o.n = dim(rng), o.k = dim(rng) + 200;
  o.transA = seed % 2, o.transB = (seed / 2) % 2;
  std::srand(seed);
  o.A = o.transA ? MatX<float>::Random(o.k, o.m) : MatX<float>::Random(o.m, o.k);
  o.B = o.transB ? MatX<float>::Random(o.n, o.k) : MatX<float>::Random(o.k, o.n);
  o.C0 = MatX<float>::Random(o.m, o.n);
  return o;
}

TEST_CASE("oneDNN's float matmul agrees with ddl's float product", "[dnnl]") {
  const auto seed = GENERATE(1u, 2u, 3u, 4u);
  const Operands o = operands(seed);
  CAPTURE(seed, o.m, o.n, o.k, o.transA, o.transB);
  for (const float alpha : {1.0f, -0.5f}) {
    for (const bool accumulate : {false, true}) {
      MatX<float> expected = o.C0, C = o.C0;
      ddl::GemmWorkspace<float> ws;
      ws.product(o.A, o.transA, o.B, o.transB, expected, alpha, accumulate);
      ddl::DnnlProduct p;
      p.m = o.m, p.n = o.n, p.k = o.k, p.A = o.A.data(), p.lda = o.A.rows(), p.transA = o.transA;
      p.B = o.B.data(), p.ldb = o.B.rows(), p.transB = o.transB, p.C = C.data(), p.ldc = C.rows();
      p.alpha = alpha, p.accumulate = accumulate;
      ddl::dnnlProduct(p);
      const MatX<float> bound = std::abs(alpha) * o.absProduct() + (accumulate ? MatX<float>(o.C0.cwiseAbs()) : MatX<float>::Zero(o.m, o.n));
      CHECK(boundRatio(C, expected, bound, 2 * o.k) < 1.0);
    }
  }
}

TEST_CASE("oneDNN's matmul reads and writes blocks of larger matrices and keeps one primitive per shape", "[dnnl]") {
  std::srand(5);
  const MatX<float> W = MatX<float>::Random(70, 60), X = MatX<float>::Random(60, 90);
  MatX<float> Y = MatX<float>::Zero(70, 90);
  const auto w = W.block(5, 3, 40, 50);  // column stride 70
  const auto x = X.block(3, 10, 50, 33);  // column stride 60
  auto y = Y.block(20, 40, 40, 33);       // column stride 70
  ddl::DnnlProduct p;
  p.m = 40, p.n = 33, p.k = 50, p.A = w.data(), p.lda = 70, p.B = x.data(), p.ldb = 60, p.C = y.data(), p.ldc = 70;
  ddl::dnnlProduct(p);
  const std::size_t primitives = ddl::detail::dnnlThread().primitives.size();
  ddl::dnnlProduct(p);  // the same shape: the cached primitive
  CHECK(ddl::detail::dnnlThread().primitives.size() == primitives);
  const MatX<float> expected = w * x;
  CHECK((Y.block(20, 40, 40, 33) - expected).cwiseAbs().maxCoeff() < 1e-4f);
  Y.block(20, 40, 40, 33).setZero();
  CHECK(Y.isZero());  // nothing written outside the block
  CHECK(!ddl::dnnlImplementation(p).empty());
}

TEST_CASE("bf16 is refused with a reason exactly where oneDNN cannot run it", "[dnnl]") {
  const std::string refusal = ddl::dnnlBf16Refusal();
  const char* maxIsa = std::getenv("DNNL_MAX_CPU_ISA");
  if (maxIsa != nullptr && std::string(maxIsa) == "AVX2") {
    CHECK(refusal.find("DNNL_MAX_CPU_ISA") != std::string::npos);
  }
  if (!refusal.empty()) {
    const ddl::Bf16Kernel before = ddl::bf16Kernel();
    CHECK(!ddl::installDnnlBf16());
    CHECK(ddl::bf16Kernel() == before);  // nothing installed
  }
}

TEST_CASE("oneDNN's bf16 products agree with the emulation", "[dnnl][bf16]") {
  const std::string refusal = ddl::dnnlBf16Refusal();
  if (!refusal.empty()) {
    std::printf("skipped: %s\n", refusal.c_str());
    std::exit(77);
  }
  const auto seed = GENERATE(1u, 2u, 3u, 4u);
  const Operands o = operands(seed);
  CAPTURE(seed, o.m, o.n, o.k, o.transA, o.transB);
  const ddl::Precision previous = ddl::setProductPrecision(ddl::Precision::BF16);
  const ddl::Bf16Kernel kernel = ddl::setBf16Kernel(nullptr);
  MatX<float> emulated = o.C0, native = o.C0;
  ddl::GemmWorkspace<float> ws;
  ws.product(o.A, o.transA, o.B, o.transB, emulated, -0.5f, true);
  REQUIRE(ddl::installDnnlBf16());
  ws.product(o.A, o.transA, o.B, o.transB, native, -0.5f, true);
  ddl::setBf16Kernel(kernel);
  ddl::setProductPrecision(previous);
  CHECK(boundRatio(native, emulated, 0.5f * o.absProduct() + MatX<float>(o.C0.cwiseAbs()), 2 * o.k) < 1.0);
  // bf16: far from the float product of the unrounded inputs.
  MatX<float> F = o.C0;
  ws.product(o.A, o.transA, o.B, o.transB, F, -0.5f, true);
  CHECK((F - native).cwiseAbs().maxCoeff() > 1e-4f);
  ddl::DnnlProduct p;  // oneDNN's own bf16 kernel, not a reference one
  p.m = o.m, p.n = o.n, p.k = o.k, p.lda = o.A.rows(), p.transA = o.transA, p.ldb = o.B.rows(), p.transB = o.transB;
  p.ldc = o.m, p.type = ddl::DnnlType::BF16;
  CHECK(ddl::dnnlImplementation(p).find("ref") == std::string::npos);
  INFO(ddl::dnnlImplementation(p));
}

TEST_CASE("Conv2d on oneDNN's bf16 products: operands converted once give the bits of converting per product",
          "[dnnl][bf16]") {
  const std::string refusal = ddl::dnnlBf16Refusal();
  if (!refusal.empty()) {
    std::printf("skipped: %s\n", refusal.c_str());
    std::exit(77);
  }
  const ddl::Precision previous = ddl::setProductPrecision(ddl::Precision::BF16);
  const ddl::Bf16Kernel kernel = ddl::bf16Kernel();
  REQUIRE(ddl::installDnnlBf16());
  const ddl::Bf16ConvKernel convKernel = ddl::setBf16ConvKernel(nullptr);  // the products, not the convolution
  const int savedThreads = ddl::numThreads();
  for (const ddl_test::ConvBf16Case& c : ddl_test::convBf16Cases())
    for (int threads : {1, 2}) {
      CAPTURE(c.name, threads);
      ddl::setNumThreads(threads);
      std::srand(32);
      ddl::Conv2d<float> conv = ddl_test::convOf(c);
      const ddl::TokenLayout outL = conv.outputLayout(ddl::TokenLayout::image(c.batch, c.height, c.width));
      const MatX<float> X = MatX<float>::Random(c.in, c.batch * c.height * c.width);
      const MatX<float> dY = MatX<float>::Random(c.out, outL.tokens());
      const ddl_test::ConvBf16Run once = ddl_test::runConv(conv, c, X, dY);
      const bool copies = ddl::setBf16CopiesEnabled(false);
      const ddl_test::ConvBf16Run perProduct = ddl_test::runConv(conv, c, X, dY);
      ddl::setBf16CopiesEnabled(copies);
      CHECK(ddl_test::sameBits(once.Y, perProduct.Y));
      CHECK(ddl_test::sameBits(once.dX, perProduct.dX));
      CHECK(ddl_test::sameBits(once.dW, perProduct.dW));
      CHECK(ddl_test::sameBits(once.db, perProduct.db));
    }
  ddl::setNumThreads(savedThreads);
  ddl::setBf16ConvKernel(convKernel);
  ddl::setBf16Kernel(kernel);
  ddl::setProductPrecision(previous);
}

// |A - B| / |B| in the Frobenius norm (0 for two empty or zero matrices).
double relativeDifference(const MatX<float>& A, const MatX<float>& B) {
  REQUIRE(A.rows() == B.rows());
  REQUIRE(A.cols() == B.cols());
  const double norm = B.cast<double>().norm();
  return norm == 0.0 ? (A - B).cast<double>().norm() : (A - B).cast<double>().norm() / norm;
}

struct ConvCase {
  const char* name;
  Index in, out, batch, height, width;
  ddl::Window2d window;
  bool bias;
};

std::vector<ConvCase> convCases() {
  using W = ddl::Window2d;
  return {{"ddl-cifar's stage 0: 24 channels, 16 x 16, 3 x 3", 24, 24, 2, 16, 16, W::square(3, 1, 1), true},
          {"a stride-2 transition, odd sizes", 24, 48, 2, 9, 11, W::square(3, 2, 1), true},
          {"the stem: 3 channels, stride 2", 3, 24, 2, 32, 32, W::square(3, 2, 1), true},
          {"one channel, batch 1, 5 x 7, no bias", 1, 1, 1, 5, 7, W::square(3, 1, 1), false},
          {"a rectangular window and strides, no padding", 5, 7, 2, 10, 9, W::make(3, 2, 2, 1, 0, 0), true},
          {"1 x 1", 6, 4, 2, 4, 5, W::square(1, 1, 0), true},
          {"padding wider than the stride needs", 4, 3, 1, 6, 6, W::make(3, 3, 2, 2, 2, 1), true}};
}

ddl::Conv2d<float> convOf(const ConvCase& c) {
  ddl::Conv2d<float> conv(c.in, c.out, c.window, c.bias);
  ddl::Rng rng(11);
  conv.init(rng);
  return conv;
}

TEST_CASE("oneDNN's float convolution agrees with Conv2d's float passes", "[dnnl]") {
  for (const ConvCase& c : convCases()) {
    CAPTURE(c.name);
    ddl::Conv2d<float> conv = convOf(c);
    const ddl::TokenLayout inL = ddl::TokenLayout::image(c.batch, c.height, c.width);
    const ddl::TokenLayout outL = conv.outputLayout(inL);
    std::srand(3);
    const MatX<float> X = MatX<float>::Random(c.in, inL.tokens());
    const MatX<float> dY = MatX<float>::Random(c.out, outL.tokens());
    MatX<float> Y, dX;
    conv.forward(X, inL, Y);
    ddl::zeroGrad(conv);
    conv.backward(dY, dX);

    ddl::DnnlConv p;
    p.g.batch = c.batch, p.g.in = c.in, p.g.out = c.out, p.g.height = c.height, p.g.width = c.width;
    p.g.outHeight = outL.height, p.g.outWidth = outL.width;
    p.g.kernelH = c.window.kernelH, p.g.kernelW = c.window.kernelW, p.g.strideH = c.window.strideH;
    p.g.strideW = c.window.strideW, p.g.padH = c.window.padH, p.g.padW = c.window.padW;
    p.X = X.data(), p.W = conv.weight().value.data(), p.dY = dY.data();
    p.bias = c.bias ? conv.bias().value.data() : nullptr;
    MatX<float> Yd = MatX<float>::Constant(c.out, outL.tokens(), 7.0f);
    MatX<float> dXd = MatX<float>::Constant(c.in, inL.tokens(), 7.0f);
    const MatX<float> dW0 = MatX<float>::Random(conv.weight().grad.rows(), conv.weight().grad.cols());
    MatX<float> dWd = dW0;
    p.pass = ddl::ConvPass::Forward, p.out = Yd.data();
    ddl::dnnlConvolution(p);
    p.pass = ddl::ConvPass::BackwardData, p.out = dXd.data();
    ddl::dnnlConvolution(p);
    p.pass = ddl::ConvPass::BackwardWeights, p.out = dWd.data();
    ddl::dnnlConvolution(p);
    const std::size_t primitives = ddl::detail::dnnlConvThread().primitives.size();
    ddl::dnnlConvolution(p);  // the same geometry: the cached primitive; the gradient accumulates again
    CHECK(ddl::detail::dnnlConvThread().primitives.size() == primitives);
    CHECK(relativeDifference(Yd, Y) < 1e-6);
    CHECK(relativeDifference(dXd, dX) < 1e-6);
    CHECK(relativeDifference(dWd, dW0 + 2 * conv.weight().grad) < 1e-6);
    INFO(ddl::dnnlConvImplementation(p));
  }
}

TEST_CASE("Conv2d on oneDNN's bf16 convolution agrees with the emulated bf16 products", "[dnnl][bf16]") {
  const std::string refusal = ddl::dnnlBf16Refusal();
  if (!refusal.empty()) {
    std::printf("skipped: %s\n", refusal.c_str());
    std::exit(77);
  }
  const ddl::Precision previous = ddl::setProductPrecision(ddl::Precision::BF16);
  const ddl::Bf16Kernel kernel = ddl::setBf16Kernel(nullptr);
  const ddl::Bf16ConvKernel convKernel = ddl::setBf16ConvKernel(nullptr);
  for (const ConvCase& c : convCases()) {
    CAPTURE(c.name);
    ddl::Conv2d<float> conv = convOf(c);
    const ddl::TokenLayout inL = ddl::TokenLayout::image(c.batch, c.height, c.width);
    const ddl::TokenLayout outL = conv.outputLayout(inL);
    std::srand(4);
    // X a block of a wider matrix: the native route reads any column stride.
    const MatX<float> wide = MatX<float>::Random(c.in + 3, inL.tokens());
    const auto X = wide.topRows(c.in);
    const MatX<float> dY = MatX<float>::Random(c.out, outL.tokens());
    auto run = [&](MatX<float>& Y, MatX<float>& dX, MatX<float>& dW, MatX<float>& db) {
      conv.forward(X, inL, Y);
      ddl::zeroGrad(conv);
      conv.backward(dY, dX);
      dW = conv.weight().grad;
      db = c.bias ? conv.bias().grad : MatX<float>();
    };
    MatX<float> Ye, dXe, dWe, dbe, Yn, dXn, dWn, dbn, Yf, dXf, dWf, dbf;
    run(Ye, dXe, dWe, dbe);  // emulated products
    REQUIRE(ddl::installDnnlBf16());
    REQUIRE(ddl::bf16ConvKernel() == &ddl::dnnlBf16ConvKernel);
    run(Yn, dXn, dWn, dbn);  // oneDNN's bf16 convolution
    {  // backward reads the training forward's X, with an inference forward of other pixels between them
      MatX<float> Y, Yother, dX;
      conv.forward(X, inL, Y);
      conv.forwardInference(MatX<float>::Random(c.in, inL.tokens()), inL, Yother);
      ddl::zeroGrad(conv);
      conv.backward(dY, dX);
      CHECK(ddl_test::sameBits(conv.weight().grad, dWn));
      CHECK(ddl_test::sameBits(dX, dXn));
    }
    ddl::setBf16Kernel(nullptr);
    ddl::setBf16ConvKernel(nullptr);
    ddl::setProductPrecision(ddl::Precision::Float);
    run(Yf, dXf, dWf, dbf);  // float
    ddl::setProductPrecision(ddl::Precision::BF16);
    CHECK(relativeDifference(Yn, Ye) < 1e-6);
    CHECK(relativeDifference(dXn, dXe) < 1e-6);
    CHECK(relativeDifference(dWn, dWe) < 1e-6);
    CHECK(relativeDifference(dbn, dbe) == 0.0);  // ddl's own sum on both routes
    CHECK(relativeDifference(Yn, Yf) > 1e-4);    // and bf16, not float
    CHECK(relativeDifference(dWn, dWf) > 1e-4);
  }
  ddl::DnnlConv p;  // oneDNN's own bf16 kernels, not reference ones, at ddl-cifar's stage-0 shape
  p.g.batch = 128, p.g.in = 24, p.g.out = 24, p.g.height = p.g.width = p.g.outHeight = p.g.outWidth = 16;
  p.g.kernelH = p.g.kernelW = 3, p.g.padH = p.g.padW = 1, p.type = ddl::DnnlType::BF16;
  for (const auto pass : {ddl::ConvPass::Forward, ddl::ConvPass::BackwardData, ddl::ConvPass::BackwardWeights}) {
    p.pass = pass;
    INFO(ddl::dnnlConvImplementation(p));
    CHECK(ddl::dnnlConvImplementation(p).find("ref") == std::string::npos);
  }
  ddl::setBf16ConvKernel(convKernel);
  ddl::setBf16Kernel(kernel);
  ddl::setProductPrecision(previous);
}

}  // namespace test_dnnl
