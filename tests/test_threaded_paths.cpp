// Threaded code paths, at sizes above the parallel thresholds (the FD tests elsewhere use d <= 9,
// N <= 5 and so run single-threaded): finite differences on sampled entries of the batched Delta
// kernels and of Linear on 2 threads. (test_threads_identical.cpp: a whole DeltaNet trains
// bit-identically on 1 and 2 threads.)
#include <random>
#include <vector>

#include "catch_compat.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/nn/linear.hpp"
#include "ddl/ops/delta_write.hpp"
#include "ddl/testing/grad_check.hpp"

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
