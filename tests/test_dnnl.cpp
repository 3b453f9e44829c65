// ddl/dnnl/matmul.hpp: oneDNN's float matmul, through the same descriptors, layouts, strides and primitive
// cache as the bf16 one, agrees with ddl's float product for every transpose, alpha, accumulate and block
// (runs on every CPU); oneDNN's bf16 products, installed as the policy's kernel, agree with the emulation
// within float summation error, and a convolution's products give the same bits whether they read their
// operands from copies converted once (core/bf16_copy.hpp) or convert them per product (exit 77, "skipped",
// where the CPU or DNNL_MAX_CPU_ISA has no bf16).
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>

#include "catch_compat.hpp"
#include "conv_bf16_cases.hpp"
#include "ddl/core/bf16.hpp"
#include "ddl/core/bf16_copy.hpp"
#include "ddl/core/gemm.hpp"
#include "ddl/core/precision.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/dnnl/matmul.hpp"

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
  ddl::setBf16Kernel(kernel);
  ddl::setProductPrecision(previous);
}

}  // namespace test_dnnl
