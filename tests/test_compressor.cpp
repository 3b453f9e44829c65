// CC, the per-token compressor (nn/blocks/compressor.hpp): the structured form is the authors'
// ResidualShortConvCompressor (one kernel per feature along dv, "same" padding, then a read vector), its
// backward matches central differences on every shape class, and the const inference path gives
// forward's bits.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fd_check.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/nn/blocks/compressor.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_compressor {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl::testing::numericGrad;
using ddl::testing::relErr;

namespace {

struct Shape {
  Index d, dv, K, N;
};

// d = 1, dv = 1, dv > K, dv < K, K = dv, K even and odd, one token.
std::vector<Shape> shapes() {
  return {{1, 1, 1, 1}, {1, 4, 4, 1}, {3, 1, 4, 2}, {2, 5, 2, 3}, {3, 6, 3, 1}, {4, 2, 5, 2},
          {2, 3, 4, 1}, {5, 4, 4, 3}, {1, 7, 6, 2}, {3, 4, 1, 2}, {2, 2, 2, 1}, {6, 3, 3, 4}};
}

MatX<double> randomMat(std::mt19937& gen, Index r, Index c) {
  std::normal_distribution<double> nd;
  MatX<double> M(r, c);
  for (Index i = 0; i < M.size(); ++i) M.data()[i] = nd(gen);
  return M;
}

// The authors' formula written out: a per-feature cross-correlation along the dv axis with (K-1)/2 zeros
// on the left and the rest on the right, then the read vector. a: (d, K), r: (dv), X: (d, dv*N).
MatX<double> authorsCompress(const MatX<double>& a, const MatX<double>& r, const MatX<double>& X, Index dv) {
  const Index d = a.rows(), K = a.cols(), N = X.cols() / dv, left = (K - 1) / 2;
  MatX<double> out = MatX<double>::Zero(d, N);
  for (Index n = 0; n < N; ++n)
    for (Index i = 0; i < d; ++i)
      for (Index o = 0; o < dv; ++o) {  // output channel o of the conv
        double conv = 0;
        for (Index k = 0; k < K; ++k) {
          const Index src = o + k - left;
          if (src >= 0 && src < dv) conv += a(i, k) * X(i, src * N + n);
        }
        out(i, n) += r(o, 0) * conv;
      }
  return out;
}

// Their construction for K = dv, literally: pad the kernel rows by K - 1 zeros on both sides, unfold in
// windows of K, pick windows b = (K - 1 + left) down to left; x_conv[i, k] = sum_v X[i, v] new[i, k, v].
MatX<double> authorsUnfold(const MatX<double>& a, const MatX<double>& r, const MatX<double>& X) {
  const Index d = a.rows(), K = a.cols(), dv = K, N = X.cols() / dv, pad = K - 1, left = pad / 2;
  MatX<double> padded = MatX<double>::Zero(d, K + 2 * pad);
  padded.middleCols(pad, K) = a;
  MatX<double> out = MatX<double>::Zero(d, N);
  for (Index n = 0; n < N; ++n)
    for (Index i = 0; i < d; ++i)
      for (Index k = 0; k < K; ++k) {
        const Index b = pad + left - k;  // torch.arange(pad + left, left - 1, -1)[k]
        double conv = 0;
        for (Index v = 0; v < dv; ++v) conv += X(i, v * N + n) * padded(i, b + v);  // unfold(...)[:, b, v]
        out(i, n) += r(k, 0) * conv;
      }
  return out;
}

ddl::Param<double>& param(ddl::Compressor<double>& cc, const std::string& want) {
  ddl::Param<double>* found = nullptr;
  cc.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    if (name == want) found = &p;
  });
  REQUIRE(found != nullptr);
  return *found;
}

}  // namespace

TEST_CASE("Structured compressor is the authors' per-feature same-padded conv along dv, then the read vector",
          "[nn][compressor]") {
  std::mt19937 gen(3);
  for (const Shape& s : shapes()) {
    CAPTURE(s.d, s.dv, s.K, s.N);
    ddl::Compressor<double> cc(s.d, s.dv, ddl::CompressorKind::Structured, s.K);
    ddl::Param<double>& a = param(cc, "conv.weight");
    ddl::Param<double>& r = param(cc, "read.weight");
    CHECK(a.shape == std::vector<Index>{s.d, s.K});
    CHECK(r.shape == std::vector<Index>{s.dv});
    a.value = randomMat(gen, s.d, s.K);
    r.value = randomMat(gen, s.dv, 1);
    const MatX<double> X = randomMat(gen, s.d, s.dv * s.N);
    MatX<double> Xin;
    cc.forward(X, Xin);
    CHECK(relErr(Xin, authorsCompress(a.value, r.value, X, s.dv)) < 1e-14);
    if (s.K == s.dv) CHECK(relErr(Xin, authorsUnfold(a.value, r.value, X)) < 1e-14);
  }
}

TEST_CASE("Structured compressor starts as the mean, and init draws the kernel N(0, (0.5/sqrt(d))^2)", "[nn][compressor]") {
  const Index d = 3, dv = 4, N = 2;
  for (Index K : {1, 2, 3, 4, 5}) {
    CAPTURE(K);
    ddl::Compressor<double> cc(d, dv, ddl::CompressorKind::Structured, K);
    const MatX<double> X = MatX<double>::Random(d, dv * N);
    MatX<double> mean = MatX<double>::Zero(d, N), Xin;
    for (Index j = 0; j < dv; ++j) mean += X.middleCols(j * N, N) / double(dv);
    cc.forward(X, Xin);
    CHECK(relErr(Xin, mean) < 1e-15);
  }
  ddl::Compressor<double> set(d, dv, ddl::CompressorKind::Structured, 4, 0.5);  // ddl_state_read_init
  CHECK((param(set, "read.weight").value.array() == 0.5).all());

  const Index wide = 400;
  ddl::Compressor<double> cc(wide, dv, ddl::CompressorKind::Structured, 4);
  ddl::Rng rng(1);
  cc.init(rng);
  const MatX<double>& a = param(cc, "conv.weight").value;
  const double stddev = std::sqrt(a.array().square().mean()), want = 0.5 / std::sqrt(double(wide));
  CHECK(std::abs(stddev / want - 1) < 0.05);
  CHECK(std::abs(a.mean()) < 0.1 * want);
  CHECK((param(cc, "read.weight").value.array() == 1.0 / dv).all());
  // Rows differ: the effective compressor starts random per feature.
  CHECK((a.row(0) - a.row(1)).norm() > 0);

  ddl::Compressor<double> free(wide, dv, ddl::CompressorKind::Free);
  const MatX<double> before = param(free, "weight").value;
  free.init(rng);
  CHECK(param(free, "weight").value == before);
}

TEST_CASE("Compressor backward matches central differences on every shape class", "[nn][compressor][grad]") {
  std::mt19937 gen(11);
  double worstX = 0, worstKernel = 0, worstRead = 0;
  for (auto kind : {ddl::CompressorKind::Structured, ddl::CompressorKind::Free})
    for (const Shape& s : shapes()) {
      CAPTURE(ddl::toString(kind), s.d, s.dv, s.K, s.N);
      ddl::Compressor<double> cc(s.d, s.dv, kind, s.K);
      cc.visitParams("", [&](const std::string&, ddl::Param<double>& p) {
        p.value = randomMat(gen, p.value.rows(), p.value.cols());
      });
      MatX<double> X = randomMat(gen, s.d, s.dv * s.N);
      const MatX<double> G = randomMat(gen, s.d, s.N);
      auto loss = [&] {
        MatX<double> Y;
        cc.forwardInference(X, Y);
        return (G.array() * Y.array()).sum();
      };
      MatX<double> Y, dX;
      cc.forward(X, Y);
      cc.backward(G, dX);
      const MatX<double> numX = numericGrad(X, loss);
      FD_CHECK(dX, numX);
      worstX = std::max(worstX, relErr(dX, numX));
      cc.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
        CAPTURE(name);
        const MatX<double> num = numericGrad(p.value, loss);
        FD_CHECK(p.grad, num);
        double& worst = name == "read.weight" ? worstRead : worstKernel;
        if (kind == ddl::CompressorKind::Structured) worst = std::max(worst, relErr(p.grad, num));
      });
    }
  // Run with -s to see the worst relative errors over the shapes.
  CHECK(worstX < ddl_test::kFdTensorTol);
  CHECK(worstKernel < ddl_test::kFdTensorTol);
  CHECK(worstRead < ddl_test::kFdTensorTol);
}

TEST_CASE("Compressor gradients accumulate and two applications chain in reverse order", "[nn][compressor][grad]") {
  std::mt19937 gen(5);
  const Index d = 3, dv = 5, K = 4, N = 2;
  ddl::Compressor<double> cc(d, dv, ddl::CompressorKind::Structured, K);
  cc.visitParams("", [&](const std::string&, ddl::Param<double>& p) { p.value = randomMat(gen, p.value.rows(), p.value.cols()); });
  MatX<double> X1 = randomMat(gen, d, dv * N), X2 = randomMat(gen, d, dv * N);
  const MatX<double> G1 = randomMat(gen, d, N), G2 = randomMat(gen, d, N);
  auto loss = [&] {
    MatX<double> Y1, Y2;
    cc.forwardInference(X1, Y1);
    cc.forwardInference(X2, Y2);
    return (G1.array() * Y1.array()).sum() + (G2.array() * Y2.array()).sum();
  };
  ddl::Compressor<double>::Cache c1, c2;
  MatX<double> Y1, Y2, dX1, dX2;
  cc.forward(X1, Y1, c1);
  cc.forward(X2, Y2, c2);
  cc.backward(G2, dX2, c2);
  cc.backward(G1, dX1, c1);
  FD_CHECK(dX1, numericGrad(X1, loss));
  FD_CHECK(dX2, numericGrad(X2, loss));
  cc.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    CAPTURE(name);
    FD_CHECK(p.grad, numericGrad(p.value, loss));
  });
}

TEST_CASE("Compressor<float> gradients match the double ones", "[nn][compressor][grad][float]") {
  std::mt19937 gen(8);
  for (const Shape& s : shapes()) {
    CAPTURE(s.d, s.dv, s.K, s.N);
    ddl::Compressor<double> cd(s.d, s.dv, ddl::CompressorKind::Structured, s.K);
    ddl::Compressor<float> cf(s.d, s.dv, ddl::CompressorKind::Structured, s.K);
    std::vector<MatX<double>> values;
    cd.visitParams("", [&](const std::string&, ddl::Param<double>& p) {
      p.value = randomMat(gen, p.value.rows(), p.value.cols()).cast<float>().cast<double>();
      values.push_back(p.value);
    });
    std::size_t i = 0;
    cf.visitParams("", [&](const std::string&, ddl::Param<float>& p) { p.value = values[i++].cast<float>(); });
    const MatX<double> X = randomMat(gen, s.d, s.dv * s.N).cast<float>().cast<double>();
    const MatX<double> G = randomMat(gen, s.d, s.N).cast<float>().cast<double>();
    MatX<double> Yd, dXd;
    MatX<float> Yf, dXf;
    cd.forward(X, Yd);
    cd.backward(G, dXd);
    const MatX<float> Xf = X.cast<float>();
    cf.forward(Xf, Yf);
    cf.backward(G.cast<float>(), dXf);
    CHECK(relErr(Yf.cast<double>(), Yd) < 1e-6);
    CHECK(relErr(dXf.cast<double>(), dXd) < 1e-6);
    std::vector<MatX<double>> grads;
    cd.visitParams("", [&](const std::string&, ddl::Param<double>& p) { grads.push_back(p.grad); });
    i = 0;
    cf.visitParams("", [&](const std::string& name, ddl::Param<float>& p) {
      CAPTURE(name);
      CHECK(relErr(p.grad.cast<double>(), grads[i++]) < 1e-6);
    });
  }
}

TEST_CASE("Compressor::forwardInference, const with a caller's workspace or not, gives forward's bits",
          "[nn][compressor][inference]") {
  std::mt19937 gen(2);
  for (auto kind : {ddl::CompressorKind::Structured, ddl::CompressorKind::Free})
    for (const Shape& s : shapes()) {
      CAPTURE(ddl::toString(kind), s.d, s.dv, s.K, s.N);
      ddl::Compressor<float> cc(s.d, s.dv, kind, s.K);
      cc.visitParams("", [&](const std::string&, ddl::Param<float>& p) {
        p.value = randomMat(gen, p.value.rows(), p.value.cols()).cast<float>();
      });
      const MatX<float> X = randomMat(gen, s.d, s.dv * s.N).cast<float>();
      MatX<float> train, own, shared;
      cc.forward(X, train);
      cc.forwardInference(X, own);
      const ddl::Compressor<float>& constCc = cc;
      ddl::Compressor<float>::Workspace ws;
      constCc.forwardInference(X, shared, ws);
      CHECK(own == train);
      CHECK(shared == train);
      // A second call reuses the workspace: same bits, same buffers.
      const float* wsData = ws.W.data();
      const float* outData = shared.data();
      constCc.forwardInference(X, shared, ws);
      CHECK(shared == train);
      CHECK(ws.W.data() == wsData);
      CHECK(shared.data() == outData);
    }
}

TEST_CASE("Compressor refuses bad shapes and options, naming the function and the shapes", "[nn][compressor][errors]") {
  using ddl_test::contains;
  using ddl_test::thrownMessage;
  const std::string k0 = thrownMessage<ddl::ValueError>([] { ddl::Compressor<double>(3, 4, ddl::CompressorKind::Structured, 0); });
  CHECK(contains(k0, "ddl::Compressor"));
  CHECK(contains(k0, "kernel must be >= 1, got 0 (d = 3, dv = 4)"));
  const std::string nan = thrownMessage<ddl::ValueError>(
      [] { ddl::Compressor<double>(3, 4, ddl::CompressorKind::Structured, 4, std::nan("")); });
  CHECK(contains(nan, "ddl::Compressor: readInit must be finite"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::Compressor<double>(0, 4); }), "d = 0, dv = 4"));

  ddl::Compressor<double> cc(3, 4, ddl::CompressorKind::Structured, 4);
  const ddl::Compressor<double>& constCc = cc;
  ddl::Compressor<double>::Workspace ws;
  MatX<double> Xin;
  const MatX<double> bad = MatX<double>::Zero(3, 6);
  const std::string shape = thrownMessage<ddl::ShapeError>([&] { constCc.forwardInference(bad, Xin, ws); });
  CHECK(contains(shape, "ddl::Compressor::forwardInference: X has shape (3, 6), expected (3, 4*N)"));
  CHECK(contains(thrownMessage<ddl::ShapeError>([&] { cc.forward(MatX<double>::Zero(2, 8), Xin); }),
                 "ddl::Compressor::forward: X has shape (2, 8)"));
  cc.forward(MatX<double>::Zero(3, 8), Xin);
  MatX<double> dX;
  CHECK(contains(thrownMessage<ddl::ShapeError>([&] { cc.backward(MatX<double>::Zero(3, 3), dX); }),
                 "ddl::Compressor::backward"));
}

}  // namespace test_compressor
