// Threaded code paths, at sizes above the parallel thresholds (the FD tests elsewhere use d <= 9,
// N <= 5 and so run single-threaded): finite differences on sampled entries of the batched Delta
// kernels, of direction normalisation with the linear gate, and of Linear on 2 threads.
// (test_threads_identical.cpp: a whole DeltaNet trains bit-identically on 1 and 2 threads.)
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "catch_compat.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/nn/layers/linear.hpp"
#include "ddl/ops/delta_write.hpp"
#include "ddl/ops/direction.hpp"
#include "ddl/ops/gate.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_threaded_paths {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl::RowX;

namespace {

// Central difference of loss() in entry (i, j) of P, restored exactly.
template <class M, class L>
double fdEntry(M& P, Index i, Index j, L&& loss, double h = 1e-6) {
  const double saved = P(i, j);
  P(i, j) = saved + h;
  const double up = loss();
  P(i, j) = saved - h;
  const double down = loss();
  P(i, j) = saved;
  return (up - down) / (2 * h);
}

// Compares the analytic gradient G of loss w.r.t. P with central differences on `samples` random
// entries; returns the worst per-entry relative error (floor 1e-3, see entryRelErr). Per entry the
// tolerance is 1e-4, as in gradErr: the loss sums ~10^5 terms, and its rounding (~1e-10 |loss| after
// dividing by 2h) is the same for small and large entries.
template <class M, class L>
double sampledErr(M& P, const MatX<double>& G, L&& loss, std::mt19937& rng, int samples = 12) {
  std::uniform_int_distribution<Index> ri(0, P.rows() - 1), ci(0, P.cols() - 1);
  MatX<double> a(1, samples), n(1, samples);
  for (int s = 0; s < samples; ++s) {
    const Index i = ri(rng), j = ci(rng);
    a(0, s) = G(i, j);
    n(0, s) = fdEntry(P, i, j, loss);
  }
  return ddl::testing::entryRelErr(a, n);
}

struct ThreadsGuard {
  ~ThreadsGuard() { ddl::setNumThreads(1); }
};

}  // namespace

TEST_CASE("deltaWrite backward above the parallel threshold matches sampled central differences",
          "[threads][delta_write][grad]") {
  ThreadsGuard guard;
  ddl::setNumThreads(2);
  std::mt19937 rng(11);
  std::srand(11);
  const Index d = 64, N = 700, dv = 2;  // d * N * dv = 89600 > kParallelMinWork (32768)
  REQUIRE(d * N * dv >= ddl::detail::kParallelMinWork);
  MatX<double> K = MatX<double>::Random(d, N);
  for (Index n = 0; n < N; ++n) K.col(n).normalize();
  RowX<double> beta = (RowX<double>::Random(1, N).array() + 1.0).matrix();  // in (0, 2)
  MatX<double> V = MatX<double>::Random(dv, N), X = MatX<double>::Random(d, dv * N);
  const MatX<double> W = MatX<double>::Random(d, dv * N);  // loss = <W, Y>
  auto loss = [&] {
    MatX<double> Y, D;
    ddl::deltaWrite(K, beta, V, X, Y, D);
    return (W.array() * Y.array()).sum();
  };
  MatX<double> Y, Delta, dX, dK, dV;
  RowX<double> dBeta;
  ddl::deltaWrite(K, beta, V, X, Y, Delta);
  ddl::deltaWriteBackward(K, beta, X, Delta, W, dX, dK, dBeta, dV);
  CHECK(sampledErr(X, dX, loss, rng) < 1e-4);
  CHECK(sampledErr(K, dK, loss, rng) < 1e-4);
  CHECK(sampledErr(V, dV, loss, rng) < 1e-4);
  CHECK(sampledErr(beta, MatX<double>(dBeta), loss, rng) < 1e-4);
  // The threaded result equals the one-thread result exactly (each token is one thread's work).
  ddl::setNumThreads(1);
  MatX<double> Y1, Delta1, dX1, dK1, dV1;
  RowX<double> dBeta1;
  ddl::deltaWrite(K, beta, V, X, Y1, Delta1);
  ddl::deltaWriteBackward(K, beta, X, Delta1, W, dX1, dK1, dBeta1, dV1);
  CHECK(Y1 == Y);
  CHECK(dX1 == dX);
  CHECK(dK1 == dK);
  CHECK(dBeta1 == dBeta);
}

TEST_CASE("direction normalisation and the linear gate above the parallel threshold match sampled central "
          "differences on 2 threads and equal 1 thread bit for bit",
          "[threads][direction][gate][grad]") {
  ThreadsGuard guard;
  std::mt19937 rng(17);
  std::srand(17);
  const Index d = 3, N = 40000;  // d * N and N (the gate's per-token loops) above kParallelMinWork
  REQUIRE(N >= ddl::detail::kParallelMinWork);
  MatX<double> Kt = MatX<double>::Random(d, N), C = MatX<double>::Random(d, N);
  Kt.col(5).setConstant(1e-7);  // |k~| far below eps: the guard dominates
  MatX<double> w = MatX<double>::Random(1, d), b(1, 1);
  b(0, 0) = 0.3;
  const MatX<double> Wk = MatX<double>::Random(d, N);  // loss = <Wk, K> + <wb, beta>
  const RowX<double> wb = RowX<double>::Random(1, N);
  const double eps = 1e-5;
  for (ddl::DirectionNorm kind : {ddl::DirectionNorm::SqrtEps, ddl::DirectionNorm::AddEps}) {
    auto loss = [&] {
      MatX<double> K;
      RowX<double> norm, z, beta;
      ddl::normalizeDirections(Kt, kind, eps, K, norm);
      ddl::linearGateLogits(w, b(0, 0), C, z);
      ddl::gateFromLogits(z, beta);
      return (Wk.array() * K.array()).sum() + (wb.array() * beta.array()).sum();
    };
    struct Grads {
      MatX<double> K, dKt, dC, dw, db;
      RowX<double> norm, z, beta, dZ;
    };
    auto run = [&](int threads) {
      ddl::setNumThreads(threads);
      Grads g;
      g.dw = MatX<double>::Zero(1, d);
      g.db = MatX<double>::Zero(1, 1);
      ddl::normalizeDirections(Kt, kind, eps, g.K, g.norm);
      ddl::normalizeDirectionsBackward(g.K, g.norm, kind, eps, Wk, g.dKt);
      ddl::linearGateLogits(w, b(0, 0), C, g.z);
      ddl::gateFromLogits(g.z, g.beta);
      ddl::gateFromLogitsBackward(g.z, wb, g.dZ);
      ddl::linearGateLogitsBackward(w, C, g.dZ, g.dC, g.dw, g.db);
      return g;
    };
    const Grads two = run(2);
    CHECK(sampledErr(Kt, two.dKt, loss, rng) < 1e-4);
    CHECK(sampledErr(C, two.dC, loss, rng) < 1e-4);
    CHECK(sampledErr(w, two.dw, loss, rng, 3) < 1e-4);
    CHECK(sampledErr(b, two.db, loss, rng, 1) < 1e-4);
    const Grads one = run(1);
    CHECK(one.K == two.K);
    CHECK(one.norm == two.norm);
    CHECK(one.dKt == two.dKt);
    CHECK(one.beta == two.beta);
    CHECK(one.dC == two.dC);
    CHECK(one.dw == two.dw);
    CHECK(one.db == two.db);
  }
}

TEST_CASE("normalizeDirections above the parallel threshold names the first bad token and keeps an "
          "overflowing column unit, on 2 threads",
          "[threads][direction]") {
  ThreadsGuard guard;
  ddl::setNumThreads(2);
  const Index d = 8, N = 6000;
  REQUIRE(d * N >= ddl::detail::kParallelMinWork);
  MatX<float> Kt = MatX<float>::Random(d, N);
  Kt.col(4100).setConstant(3e19f);  // |k~|^2 overflows float: the careful path measures it scaled
  MatX<float> K;
  RowX<float> norm;
  ddl::normalizeDirections(Kt, ddl::DirectionNorm::SqrtEps, 1e-5f, K, norm);
  CHECK(std::abs(K.col(4100).norm() - 1.0f) < 1e-5f);
  CHECK(std::isfinite(norm(0, 4100)));
  CHECK((K.col(17) - Kt.col(17) / std::sqrt(Kt.col(17).squaredNorm() + 1e-10f)).norm() < 1e-6f);
  // Bad tokens in both threads' halves: the message names the first one (200, then 3500), as on 1 thread.
  using ddl_test::contains;
  using ddl_test::thrownMessage;
  const auto normalize = [&](ddl::DirectionNorm kind, float eps) {
    return thrownMessage<ddl::MathError>([&] { ddl::normalizeDirections(Kt, kind, eps, K, norm); });
  };
  Kt(2, 3500) = std::numeric_limits<float>::quiet_NaN();
  Kt(0, 200) = std::numeric_limits<float>::infinity();
  Kt(0, 5990) = std::numeric_limits<float>::infinity();
  CHECK(contains(normalize(ddl::DirectionNorm::SqrtEps, 1e-5f), "direction of token 200 is not finite"));
  Kt(0, 200) = 0.5f;
  CHECK(contains(normalize(ddl::DirectionNorm::AddEps, 1e-5f), "direction of token 3500 is not finite: entry 2 of 8"));
  // A zero column with eps = 0 divides by zero: refused with its token.
  Kt(2, 3500) = 0.25f;
  Kt(0, 5990) = 0.25f;
  Kt.col(5000).setZero();
  CHECK(contains(normalize(ddl::DirectionNorm::SqrtEps, 0.0f), "direction of token 5000 has norm 0"));
}

TEST_CASE("Linear above the parallel threshold matches sampled central differences on 2 threads",
          "[threads][linear][grad]") {
  ThreadsGuard guard;
  ddl::setNumThreads(2);
  std::mt19937 rng(5);
  Index in = 96, out = 160, B = 100;  // forward 1.5 M and backward 3.1 M multiply-adds > 2^20
  REQUIRE(in * out * B >= ddl::detail::kLinearParallelMin);
  ddl::Linear<double> lin(in, out);
  ddl::Rng init(3);
  lin.init(init);
  MatX<double> X = MatX<double>::Random(in, B);
  const MatX<double> W = MatX<double>::Random(out, B);
  auto loss = [&] {
    MatX<double> Yl;
    lin.forward(X, Yl);
    return (W.array() * Yl.array()).sum();
  };
  MatX<double> Y, dX;
  lin.forward(X, Y);
  ddl::zeroGrad(lin);
  lin.backward(W, dX);
  CHECK(sampledErr(X, dX, loss, rng) < 1e-4);
  const MatX<double> dW = lin.weight().grad, db = lin.bias().grad;
  CHECK(sampledErr(lin.weight().value, dW, loss, rng) < 1e-4);
  CHECK(sampledErr(lin.bias().value, db, loss, rng) < 1e-4);
}

}  // namespace test_threaded_paths
