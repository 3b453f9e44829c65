// core/bf16.hpp: floats round to bf16 to nearest, ties to even, on the bits (subnormals too, NaN stays a
// quiet NaN, Inf stays Inf, overflow goes to Inf), and the vector conversion gives the scalar's bits.
// core/gemm.hpp under Precision::BF16 without a native kernel: the emulated product equals a double
// product of the rounded inputs within float summation error, for every transpose, alpha and accumulate;
// core/bf16_weights.hpp: products read a weight's copy while its scope is active, and only then;
// core/bf16_copy.hpp: products read blocks of a thread's copy while its scope is active, on that thread only.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "catch_compat.hpp"
#include "emulated_bf16.hpp"
#include "ddl/core/bf16.hpp"
#include "ddl/core/bf16_copy.hpp"
#include "ddl/core/bf16_weights.hpp"
#include "ddl/core/gemm.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/precision.hpp"
#include "ddl/train/task_step.hpp"

namespace test_bf16 {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl_test::emulatedBf16;

float fromBits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

TEST_CASE("toBf16 rounds to nearest, ties to even", "[core][bf16]") {
  CHECK(ddl::toBf16(1.0f) == 0x3f80);
  CHECK(ddl::toBf16(fromBits(0x3f808000u)) == 0x3f80);  // tie, even below: down
  CHECK(ddl::toBf16(fromBits(0x3f818000u)) == 0x3f82);  // tie, odd below: up to even
  CHECK(ddl::toBf16(fromBits(0x3f808001u)) == 0x3f81);  // above the tie: up
  CHECK(ddl::toBf16(fromBits(0x3f807fffu)) == 0x3f80);  // below the tie: down
  CHECK(ddl::toBf16(fromBits(0xbf818000u)) == 0xbf82);  // the sign does not matter
  CHECK(ddl::toBf16(fromBits(0x3fffffffu)) == 0x4000);  // the carry moves into the exponent
  CHECK(ddl::roundToBf16(1.0f + 1.0f / 1024) == 1.0f);
  CHECK(ddl::fromBf16(0x4049) == 3.140625f);
}

TEST_CASE("toBf16 keeps subnormals, Inf and NaN", "[core][bf16]") {
  CHECK(ddl::toBf16(fromBits(0x00008000u)) == 0x0000);  // subnormal tie, even below
  CHECK(ddl::toBf16(fromBits(0x00018000u)) == 0x0002);  // subnormal tie, odd below
  CHECK(ddl::toBf16(fromBits(0x00008001u)) == 0x0001);  // the smallest bf16 subnormal, not flushed
  CHECK(ddl::toBf16(fromBits(0x807fffffu)) == 0x8080);  // the largest subnormal rounds to the smallest normal
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(ddl::toBf16(inf) == 0x7f80);
  CHECK(ddl::toBf16(-inf) == 0xff80);
  CHECK(ddl::toBf16(std::numeric_limits<float>::max()) == 0x7f80);  // overflow rounds to Inf
  CHECK(ddl::toBf16(fromBits(0x7f7f7fffu)) == 0x7f7f);              // the largest that stays finite
  const std::uint16_t quiet = ddl::toBf16(std::numeric_limits<float>::quiet_NaN());
  CHECK(std::isnan(ddl::fromBf16(quiet)));
  const std::uint16_t signaling = ddl::toBf16(fromBits(0x7f800001u));  // its payload would round away
  CHECK(signaling == 0x7fc0);
  CHECK(ddl::toBf16(fromBits(0xff800001u)) == 0xffc0);
  CHECK(ddl::toBf16(fromBits(0x7fffffffu)) == 0x7fff);  // a NaN never rounds into Inf or the sign
}

TEST_CASE("the block conversion gives the scalar's bits on any length and stride", "[core][bf16]") {
  std::mt19937 rng(7);
  std::vector<float> src(4099);
  for (float& x : src) x = fromBits(static_cast<std::uint32_t>(rng()));  // every kind of bit pattern
  src[5] = fromBits(0x7f800001u), src[6] = fromBits(0x00018000u), src[7] = fromBits(0x3f818000u);
  for (Index n : {Index(1), Index(15), Index(16), Index(17), Index(4099)}) {
    std::vector<std::uint16_t> bits(static_cast<std::size_t>(n), 0xdead);
    ddl::toBf16(src.data(), n, n, 1, bits.data());
    for (Index i = 0; i < n; ++i) REQUIRE(bits[static_cast<std::size_t>(i)] == ddl::toBf16(src[static_cast<std::size_t>(i)]));
  }
  std::vector<std::uint16_t> bits(21 * 13);  // rows 21 of a column stride 37
  ddl::toBf16(src.data(), 37, 21, 13, bits.data());
  for (Index j = 0; j < 13; ++j)
    for (Index i = 0; i < 21; ++i)
      REQUIRE(bits[static_cast<std::size_t>(i + 21 * j)] == ddl::toBf16(src[static_cast<std::size_t>(i + 37 * j)]));
}

// max |C - expected| / (k eps sum |a||b| + tiny) over the elements.
double boundRatio(const MatX<float>& C, const MatX<double>& expected, const MatX<double>& absProduct, Index k) {
  const double eps = std::numeric_limits<float>::epsilon();
  double worst = 0.0;
  for (Index j = 0; j < C.cols(); ++j)
    for (Index i = 0; i < C.rows(); ++i)
      worst = std::max(worst, std::abs(C(i, j) - expected(i, j)) / (k * eps * absProduct(i, j) + 1e-30));
  return worst;
}

TEST_CASE("the emulated bf16 product is a float product of the rounded inputs", "[core][bf16][gemm]") {
  const auto seed = GENERATE(1u, 2u, 3u, 4u);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dim(1, 90);
  const Index m = dim(rng), n = dim(rng), k = dim(rng) + 300;  // more than one depth panel
  const bool transA = seed % 2, transB = (seed / 2) % 2;
  CAPTURE(seed, m, n, k, transA, transB);
  std::srand(seed);
  const MatX<float> A = transA ? MatX<float>::Random(k, m) : MatX<float>::Random(m, k);
  const MatX<float> B = transB ? MatX<float>::Random(n, k) : MatX<float>::Random(k, n);
  const auto round = [](const MatX<float>& X) { return X.unaryExpr([](float x) { return ddl::roundToBf16(x); }); };
  const MatX<double> a = round(A).cast<double>(), b = round(B).cast<double>();
  const MatX<double> opA = transA ? MatX<double>(a.transpose()) : a, opB = transB ? MatX<double>(b.transpose()) : b;
  const MatX<double> expected = opA * opB, absProduct = opA.cwiseAbs() * opB.cwiseAbs();
  const MatX<float> C0 = MatX<float>::Random(m, n);
  MatX<float> C = C0;
  ddl::GemmWorkspace<float> ws;
  emulatedBf16([&] {
    ws.product(A, transA, B, transB, C, 1.0f, false);
    CHECK(boundRatio(C, expected, absProduct, k) < 1.0);
    C = C0;
    ws.product(A, transA, B, transB, C, -0.5f, true);  // C = C0 - 0.5 op(A) op(B)
  });
  const MatX<double> accumulated = C0.cast<double>() - 0.5 * expected;
  CHECK(boundRatio(C, accumulated, 0.5 * absProduct + C0.cast<double>().cwiseAbs(), k) < 1.0);
  // The inputs were rounded: the float product of the unrounded ones is far from it.
  MatX<float> F(m, n);
  ws.product(A, transA, B, transB, F, 1.0f, false);
  CHECK((F - expected.cast<float>()).cwiseAbs().maxCoeff() > 1e-4f);
}

TEST_CASE("the bf16 policy rounds what a float product would keep", "[core][bf16][gemm]") {
  const MatX<float> A = MatX<float>::Constant(3, 64, 1.0f + 1.0f / 1024), B = MatX<float>::Ones(64, 2);
  MatX<float> C(3, 2);
  ddl::GemmWorkspace<float> ws;
  emulatedBf16([&] { ws.product(A, false, B, false, C, 1.0f, false); });
  CHECK((C.array() == 64.0f).all());
  ws.product(A, false, B, false, C, 1.0f, false);  // float again
  CHECK((C.array() == 64.0f * (1.0f + 1.0f / 1024)).all());
  ddl::GemmWorkspace<double> wd;  // double products never change
  MatX<double> D(3, 2);
  emulatedBf16([&] { wd.product(A.cast<double>(), false, B.cast<double>(), false, D, 1.0, false); });
  CHECK((D.array() == 64.0 * (1.0 + 1.0 / 1024)).all());
}

struct TwoWeights {  // a module's walk: two matrices and a vector (which is not converted)
  ddl::Param<float> w{40, 30}, v{7, 5}, gain{9, 1};
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    f(ddl::joinName(prefix, "w"), w);
    f(ddl::joinName(prefix, "v"), v);
    f(ddl::joinName(prefix, "gain"), gain);
  }
};

TEST_CASE("products read a weight's bf16 copy while its scope is active", "[core][bf16][gemm]") {
  TwoWeights model;
  std::srand(11);
  model.w.value.setRandom();
  model.v.value.setRandom();
  ddl::Bf16Weights weights;
  weights.refresh(model);
  CHECK(weights.count() == 2);
  CHECK(weights.find(model.w.value.data() + 45, 40) == weights.find(model.w.value.data(), 40) + 45);
  CHECK(weights.find(model.w.value.data() + 45, 41) == nullptr);  // another stride: not this weight's block
  CHECK(weights.find(model.gain.value.data(), 9) == nullptr);
  const MatX<float> X = MatX<float>::Random(15, 6);
  const MatX<float> before = model.w.value;
  model.w.value *= 2.0f;  // changed after the refresh: only the copy knows the old values
  MatX<float> inScope(20, 6), outOfScope(20, 6), expected(20, 6), expectedNow(20, 6);
  ddl::GemmWorkspace<float> ws;
  emulatedBf16([&] {
    {
      ddl::Bf16WeightScope scope(weights);
      ws.product(model.w.value.block(5, 10, 20, 15), false, X, false, inScope, 1.0f, false);
    }
    ws.product(model.w.value.block(5, 10, 20, 15), false, X, false, outOfScope, 1.0f, false);
    const MatX<float> old = before.block(5, 10, 20, 15);
    ws.product(old, false, X, false, expected, 1.0f, false);
    const MatX<float> now = model.w.value.block(5, 10, 20, 15);
    ws.product(now, false, X, false, expectedNow, 1.0f, false);
  });
  CHECK(inScope == expected);
  CHECK(outOfScope == expectedNow);
  weights.refresh(model);  // the same storage: converted again, no rebuild
  CHECK(weights.find(model.w.value.data(), 40) != nullptr);
  CHECK(ddl::fromBf16(*weights.find(model.w.value.data(), 40)) == ddl::roundToBf16(model.w.value(0, 0)));
}

TEST_CASE("products read blocks of a thread's bf16 copy while its scope is active, on that thread only",
          "[core][bf16][gemm]") {
  std::srand(12);
  MatX<float> X = MatX<float>::Random(12, 40);  // a band: products read overlapping column blocks
  const MatX<float> before = X;
  const MatX<float> W = MatX<float>::Random(7, 12);
  ddl::Bf16Copy copy;
  CHECK(!copy.bound());
  copy.bind(X.data(), X.outerStride(), X.rows(), X.cols());
  CHECK(copy.bound());
  MatX<float> floatProduct(7, 40);
  ddl::GemmWorkspace<float> ws;
  {
    ddl::Bf16CopyScope scope(&copy);
    ws.product(W, false, X, false, floatProduct, 1.0f, false);  // the float policy: nothing converted
  }
  CHECK(!copy.converted());
  MatX<float> floatOutside(7, 40);
  ws.product(W, false, X, false, floatOutside, 1.0f, false);
  CHECK(floatProduct == floatOutside);
  Index ld = 0;
  const std::uint16_t* all = copy.find(X.data(), 12, 12, 40, ld);
  REQUIRE(all != nullptr);
  CHECK(ld == 12);
  CHECK(copy.converted());
  CHECK(copy.find(X.col(5).data(), 12, 12, 20, ld) == all + 5 * 12);
  CHECK(copy.find(X.data() + 3 + 5 * 12, 12, 9, 35, ld) == all + 3 + 5 * 12);  // a block to the last row and column
  CHECK(copy.find(X.data() + 3 + 5 * 12, 12, 10, 35, ld) == nullptr);          // one row past the matrix
  CHECK(copy.find(X.col(5).data(), 12, 12, 36, ld) == nullptr);                // one column past it
  CHECK(copy.find(X.col(5).data(), 13, 12, 20, ld) == nullptr);                // another stride
  CHECK(copy.find(before.data(), 12, 1, 1, ld) == nullptr);                   // another matrix
  CHECK(ddl::fromBf16(all[7 + 12 * 30]) == ddl::roundToBf16(X(7, 30)));
  CHECK(!ddl::Bf16Copy(copy).bound());  // a copy of a copy holds nothing

  X *= 2.0f;  // changed after the conversion: only the copy knows the old values
  const auto block = X.middleCols(5, 20);
  MatX<float> inScope(7, 20), switchedOff(7, 20), otherThread(7, 20), nested(7, 20), outOfScope(7, 20);
  MatX<float> expected(7, 20), expectedNow(7, 20);
  emulatedBf16([&] {
    {
      ddl::Bf16CopyScope scope(&copy);
      ws.product(W, false, block, false, inScope, 1.0f, false);
      const bool previous = ddl::setBf16CopiesEnabled(false);
      ws.product(W, false, block, false, switchedOff, 1.0f, false);
      ddl::setBf16CopiesEnabled(previous);
      std::thread([&] {
        ddl::GemmWorkspace<float> other;
        other.product(W, false, block, false, otherThread, 1.0f, false);
      }).join();
      ddl::Bf16Copy unrelated;
      const MatX<float> Z = MatX<float>::Ones(3, 3);
      unrelated.bind(Z.data(), 3, 3, 3);
      ddl::Bf16CopyScope inner(&unrelated, nullptr);  // the enclosing scope's copy stays visible
      ws.product(W, false, block, false, nested, 1.0f, false);
    }
    ws.product(W, false, block, false, outOfScope, 1.0f, false);
    ws.product(W, false, MatX<float>(before.middleCols(5, 20)), false, expected, 1.0f, false);
    ws.product(W, false, MatX<float>(block), false, expectedNow, 1.0f, false);
  });
  CHECK(inScope == expected);
  CHECK(nested == expected);
  CHECK(switchedOff == expectedNow);
  CHECK(otherThread == expectedNow);
  CHECK(outOfScope == expectedNow);
  CHECK(expected != expectedNow);
  CHECK(ddl::detail::activeBf16Copies() == nullptr);
}

TEST_CASE("parsePrecision reads float and bf16 and names what it refuses", "[core][bf16]") {
  CHECK(ddl::parsePrecision("float") == ddl::Precision::Float);
  CHECK(ddl::parsePrecision("bf16") == ddl::Precision::BF16);
  CHECK(std::string(ddl::precisionName(ddl::Precision::BF16)) == "bf16");
  const std::string what = ddl_test::thrownMessage<ddl::Error>([] { ddl::parsePrecision("half", "--precision"); });
  CHECK(what.find("--precision") != std::string::npos);
  CHECK(what.find("half") != std::string::npos);
  CHECK(ddl::productPrecision() == ddl::Precision::Float);  // the default
}

// A one-matrix model that records, in its forward and backward, whether its weight's bf16 copy is visible.
struct ProbeModel {
  ddl::Param<float> w{6, 4};
  ddl::GemmWorkspace<float> gemm;
  ddl::MatX<float> X;
  bool seenInForward = false, seenInBackward = false;
  bool seen() const {
    const ddl::Bf16Weights* active = ddl::detail::activeBf16Weights().load();
    return active != nullptr && active->find(w.value.data(), w.value.rows()) != nullptr;
  }
  void forward(const ddl::MatX<float>& in, ddl::MatX<float>& out) {
    seenInForward = seen();
    X = in;
    out.resize(6, in.cols());
    gemm.product(w.value, false, in, false, out, 1.0f, false);
  }
  void backward(const ddl::MatX<float>& dOut) {
    seenInBackward = seen();
    gemm.product(dOut, false, X, true, w.grad, 1.0f, true);
  }
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    f(ddl::joinName(prefix, "w"), w);
  }
};
struct SumTask {  // loss = sum of the outputs
  using Scalar = float;
  using Target = int;
  ddl::StepStats lossAndGradient(const ddl::MatX<float>& out, const Target&, ddl::MatX<float>& dOut) {
    ddl::StepStats s;
    s.loss = out.sum();
    s.count = out.cols();
    dOut.setOnes(out.rows(), out.cols());
    return s;
  }
};
struct SeenAtUpdate {  // an optimizer that records whether the copies are still visible when it updates
  bool seen = true;
  void step(ddl::ParamList<float>&) { seen = ddl::detail::activeBf16Weights().load() != nullptr; }
};

TEST_CASE("taskStep makes the weights' bf16 copies visible to forward and backward, not to the update", "[core][bf16]") {
  ProbeModel model;
  model.w.value.setRandom();
  SumTask task;
  SeenAtUpdate opt;
  ddl::StepBuffers<float> buf;
  const ddl::MatX<float> X = ddl::MatX<float>::Random(4, 3);
  ddl::taskStep(model, task, opt, X, 0, buf);  // float: no copies at all
  CHECK(!model.seenInForward);
  CHECK(!model.seenInBackward);
  emulatedBf16([&] { ddl::taskStep(model, task, opt, X, 0, buf); });
  CHECK(model.seenInForward);
  CHECK(model.seenInBackward);
  CHECK(!opt.seen);
  CHECK(ddl::detail::activeBf16Weights().load() == nullptr);
}

}  // namespace test_bf16
