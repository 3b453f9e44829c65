// bench_delta: the Delta Operator and the rank-1 write against a dense product and a plain residual add,
// for one token and for a batch (tokens are columns), plus a STREAM-like triad in the same binary so
// that "achieved bandwidth / triad bandwidth" comes out of one run.
//
//   OMP_NUM_THREADS=2 ./ddl_bench_delta --benchmark_repetitions=3
//
// bytes_per_second counts every byte a kernel must read and write once (no write-allocate traffic),
// the convention STREAM uses for its triad. When BM_Triad ran earlier in the same process, batched
// benchmarks also report of_triad = their bandwidth / the best triad bandwidth seen so far.
// Eigen's own threading is switched off (main): batch kernels thread over tokens with OpenMP, and
// single-token kernels are single-threaded by design.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "ddl/core/config.hpp"
#include "ddl/core/types.hpp"
#include "ddl/ops/delta_operator.hpp"
#include "ddl/ops/delta_write.hpp"

#include "bench_util.hpp"

namespace {

// Wall-clock stopwatch around the timed loop (UseRealTime measures the same; this makes the number
// available inside the function for the of_triad counter).
using ddl_bench::Stopwatch;

using S = float;  // training precision
using Mat = ddl::MatX<S>;
using Vec = ddl::VecX<S>;
using Row = ddl::RowX<S>;
using ddl::Index;

constexpr double kBytes = sizeof(S);
double g_triadBytesPerSecond = 0.0;  // best triad bandwidth of this process

// Cheap deterministic fill in [-0.5, 0.5), threaded, so that gigabyte setups take milliseconds
// and pages are first touched by the threads that will use them.
void fill(Mat& M, std::uint32_t salt) {
  const Index r = M.rows(), c = M.cols();
  DDL_OMP(parallel for schedule(static))
  for (Index j = 0; j < c; ++j)
    for (Index i = 0; i < r; ++i) {
      const std::uint32_t h = static_cast<std::uint32_t>(i * 2654435761u) ^ static_cast<std::uint32_t>(j * 40503u) ^ salt;
      M(i, j) = static_cast<S>(h % 1024u) / S(1024) - S(0.5);
    }
}
// Unit columns.
Mat directions(Index d, Index N) {
  Mat K(d, N);
  fill(K, 17u);
  DDL_OMP(parallel for schedule(static))
  for (Index j = 0; j < N; ++j) K.col(j) /= std::max(K.col(j).norm(), S(1e-3));
  return K;
}
Row gates(Index N) {
  Row b(N);
  for (Index j = 0; j < N; ++j) b(j) = S(2) * static_cast<S>((j * 37) % 101) / S(100);  // spread over [0, 2]
  return b;
}

void reportBytes(benchmark::State& state, double bytesPerIteration, double seconds) {
  state.SetBytesProcessed(static_cast<std::int64_t>(bytesPerIteration * static_cast<double>(state.iterations())));
  state.counters["MB_per_iter"] = bytesPerIteration / 1e6;
  if (g_triadBytesPerSecond > 0.0 && seconds > 0.0)
    state.counters["of_triad"] = bytesPerIteration * static_cast<double>(state.iterations()) / seconds / g_triadBytesPerSecond;
}

// ---- (c) STREAM-like triad: a = b + s c, three float arrays of n entries, OpenMP static split ----------
void BM_Triad(benchmark::State& state) {
  const Index n = state.range(0);
  std::vector<S> a(static_cast<std::size_t>(n)), b(a.size()), c(a.size());
  S* pa = a.data();
  const S* pb = b.data();
  const S* pc = c.data();
  DDL_OMP(parallel for schedule(static))
  for (Index i = 0; i < n; ++i) {  // first touch by the owning thread
    a[static_cast<std::size_t>(i)] = 0;
    b[static_cast<std::size_t>(i)] = S(1);
    c[static_cast<std::size_t>(i)] = S(2);
  }
  const S s = S(0.5);
  Stopwatch sw;
  for (auto _ : state) {
    DDL_OMP(parallel for schedule(static))
    for (Index i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    benchmark::DoNotOptimize(pa);
    benchmark::ClobberMemory();
  }
  const double secs = sw.seconds();
  const double bytes = 3.0 * kBytes * static_cast<double>(n);
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes * static_cast<double>(state.iterations())));
  state.counters["MB_per_iter"] = bytes / 1e6;
  g_triadBytesPerSecond = std::max(g_triadBytesPerSecond, bytes * static_cast<double>(state.iterations()) / secs);
}

// ---- (a) one token, X: (d, dv), single thread -----------------------------------------------------------
void BM_Token_Rank1Apply(benchmark::State& state) {  // X <- A X, ~4 d dv flops
  const Index d = state.range(0), dv = state.range(1);
  Vec k = directions(d, 1).col(0);
  Mat X(d, dv);
  fill(X, 1u);
  const auto A = ddl::deltaOperator(k, S(2));  // beta = 2: norm-preserving, no drift over iterations
  for (auto _ : state) {
    X.applyOnTheLeft(A);
    benchmark::DoNotOptimize(X.data());
    benchmark::ClobberMemory();
  }
  reportBytes(state, kBytes * static_cast<double>(d + 2 * d * dv), 0.0);  // k, X read, X written
}
void BM_Token_Rank1Write(benchmark::State& state) {  // X <- X + beta k (v^T - k^T X)
  const Index d = state.range(0), dv = state.range(1);
  Vec k = directions(d, 1).col(0);
  Mat X(d, dv), v(dv, 1);
  fill(X, 1u);
  fill(v, 2u);
  for (auto _ : state) {
    ddl::deltaWriteToken(k, S(1), v.col(0), X);  // beta = 1: idempotent, no drift
    benchmark::DoNotOptimize(X.data());
    benchmark::ClobberMemory();
  }
  reportBytes(state, kBytes * static_cast<double>(d + dv + 2 * d * dv), 0.0);
}
void BM_Token_DenseProduct(benchmark::State& state) {  // Y = M X with M = A materialized once, 2 d^2 dv flops
  const Index d = state.range(0), dv = state.range(1);
  Vec k = directions(d, 1).col(0);
  Mat X(d, dv), Y(d, dv);
  fill(X, 1u);
  const Mat M = ddl::deltaOperator(k, S(2));
  for (auto _ : state) {
    Y.noalias() = M * X;
    benchmark::DoNotOptimize(Y.data());
    benchmark::ClobberMemory();
  }
  reportBytes(state, kBytes * static_cast<double>(d * d + 2 * d * dv), 0.0);
}
void BM_Token_ResidualAdd(benchmark::State& state) {  // Y = X + H
  const Index d = state.range(0), dv = state.range(1);
  Mat X(d, dv), H(d, dv), Y(d, dv);
  fill(X, 1u);
  fill(H, 2u);
  for (auto _ : state) {
    Y.noalias() = X + H;
    benchmark::DoNotOptimize(Y.data());
    benchmark::ClobberMemory();
  }
  reportBytes(state, kBytes * static_cast<double>(3 * d * dv), 0.0);
}

// ---- (b) a batch of N tokens: K (d, N), beta (1, N), V (dv, N), X, Y (d, dv*N), OpenMP over tokens ------
void BM_Batch_Apply(benchmark::State& state) {  // Y = A X per token (ddl::deltaApply)
  const Index d = state.range(0), dv = state.range(1), N = state.range(2);
  const Mat K = directions(d, N);
  const Row beta = gates(N);
  Mat X(d, dv * N), Y(d, dv * N);
  fill(X, 1u);
  fill(Y, 0u);
  ddl::deltaApply(K, beta, X, Y);
  Stopwatch sw;
  for (auto _ : state) {
    ddl::deltaApply(K, beta, X, Y);
    benchmark::DoNotOptimize(Y.data());
    benchmark::ClobberMemory();
  }
  const double secs = sw.seconds();
  reportBytes(state, kBytes * static_cast<double>(d * N + N + 2 * d * dv * N), secs);  // K, beta, X, Y
}
void BM_Batch_ApplyInPlace(benchmark::State& state) {  // X <- A X per token, Y aliases X
  const Index d = state.range(0), dv = state.range(1), N = state.range(2);
  const Mat K = directions(d, N);
  const Row beta = Row::Constant(N, S(2));  // reflections: repeated in-place application does not drift
  Mat X(d, dv * N);
  fill(X, 1u);
  ddl::deltaApply(K, beta, X, X);
  Stopwatch sw;
  for (auto _ : state) {
    ddl::deltaApply(K, beta, X, X);
    benchmark::DoNotOptimize(X.data());
    benchmark::ClobberMemory();
  }
  const double secs = sw.seconds();
  reportBytes(state, kBytes * static_cast<double>(d * N + N + 2 * d * dv * N), secs);
}
void BM_Batch_Write(benchmark::State& state) {  // Y = X + beta k (v^T - k^T X), Delta cached (ddl::deltaWrite)
  const Index d = state.range(0), dv = state.range(1), N = state.range(2);
  const Mat K = directions(d, N);
  const Row beta = gates(N);
  Mat V(dv, N), X(d, dv * N), Y(d, dv * N), Delta(dv, N);
  fill(V, 3u);
  fill(X, 1u);
  fill(Y, 0u);
  ddl::deltaWrite(K, beta, V, X, Y, Delta);
  Stopwatch sw;
  for (auto _ : state) {
    ddl::deltaWrite(K, beta, V, X, Y, Delta);
    benchmark::DoNotOptimize(Y.data());
    benchmark::ClobberMemory();
  }
  const double secs = sw.seconds();
  // K, beta, V, X read; Y, Delta written
  reportBytes(state, kBytes * static_cast<double>(d * N + N + dv * N + 2 * d * dv * N + dv * N), secs);
}
void BM_Batch_Residual(benchmark::State& state) {  // Y = X + H, H (d, N) broadcast (ddl::additiveResidual)
  const Index d = state.range(0), dv = state.range(1), N = state.range(2);
  Mat H(d, N), X(d, dv * N), Y(d, dv * N);
  fill(H, 2u);
  fill(X, 1u);
  fill(Y, 0u);
  ddl::additiveResidual(H, X, Y);
  Stopwatch sw;
  for (auto _ : state) {
    ddl::additiveResidual(H, X, Y);
    benchmark::DoNotOptimize(Y.data());
    benchmark::ClobberMemory();
  }
  const double secs = sw.seconds();
  reportBytes(state, kBytes * static_cast<double>(d * N + 2 * d * dv * N), secs);
}
void BM_Batch_ResidualOmp(benchmark::State& state) {  // the same add, split over tokens with OpenMP
  const Index d = state.range(0), dv = state.range(1), N = state.range(2);
  Mat H(d, N), X(d, dv * N), Y(d, dv * N);
  fill(H, 2u);
  fill(X, 1u);
  fill(Y, 0u);
  auto add = [&] {
    DDL_OMP(parallel for schedule(static))
    for (Index n = 0; n < N; ++n)
      for (Index j = 0; j < dv; ++j) Y.col(j * N + n) = X.col(j * N + n) + H.col(n);
  };
  add();
  Stopwatch sw;
  for (auto _ : state) {
    add();
    benchmark::DoNotOptimize(Y.data());
    benchmark::ClobberMemory();
  }
  const double secs = sw.seconds();
  reportBytes(state, kBytes * static_cast<double>(d * N + 2 * d * dv * N), secs);
}
void BM_Batch_Dense(benchmark::State& state) {  // per token: materialize A (d, d), then Y_n = A X_n (small sizes)
  const Index d = state.range(0), dv = state.range(1), N = state.range(2);
  const Mat K = directions(d, N);
  const Row beta = gates(N);
  Mat X(d, dv * N), Y(d, dv * N);
  fill(X, 1u);
  fill(Y, 0u);
  using Strided = Eigen::Map<Mat, 0, Eigen::OuterStride<>>;
  using CStrided = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;
  auto run = [&] {
    DDL_OMP(parallel)
    {
      Mat M(d, d);  // one dense operator per thread, rebuilt for every token
      DDL_OMP(for schedule(static))
      for (Index n = 0; n < N; ++n) {
        M = ddl::deltaOperator(K.col(n), beta(n));
        Strided Yn(Y.data() + n * d, d, dv, Eigen::OuterStride<>(N * d));  // channel j = column j*N + n
        Yn.noalias() = M * CStrided(X.data() + n * d, d, dv, Eigen::OuterStride<>(N * d));
      }
    }
  };
  run();
  Stopwatch sw;
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(Y.data());
    benchmark::ClobberMemory();
  }
  const double secs = sw.seconds();
  reportBytes(state, kBytes * static_cast<double>(d * N + N + 2 * d * dv * N), secs);  // logical bytes, as Apply
}

const std::vector<std::int64_t> kD = {64, 256, 1024};
const std::vector<std::int64_t> kDv = {1, 4};
const std::vector<std::int64_t> kN = {256, 4096, 65536};

}  // namespace

// Triad first, so that every batched benchmark after it can report of_triad. 2^25 floats = 128 MiB
// per array, 384 MiB in all: far beyond the caches.
BENCHMARK(BM_Triad)->ArgName("n")->Arg(Index(1) << 25)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK(BM_Token_Rank1Apply)->ArgNames({"d", "dv"})->ArgsProduct({kD, kDv});
BENCHMARK(BM_Token_Rank1Write)->ArgNames({"d", "dv"})->ArgsProduct({kD, kDv});
BENCHMARK(BM_Token_DenseProduct)->ArgNames({"d", "dv"})->ArgsProduct({kD, kDv});
BENCHMARK(BM_Token_ResidualAdd)->ArgNames({"d", "dv"})->ArgsProduct({kD, kDv});

BENCHMARK(BM_Batch_Apply)->ArgNames({"d", "dv", "N"})->ArgsProduct({kD, kDv, kN})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Batch_ApplyInPlace)->ArgNames({"d", "dv", "N"})->ArgsProduct({kD, kDv, kN})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Batch_Write)->ArgNames({"d", "dv", "N"})->ArgsProduct({kD, kDv, kN})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Batch_Residual)->ArgNames({"d", "dv", "N"})->ArgsProduct({kD, kDv, kN})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Batch_ResidualOmp)->ArgNames({"d", "dv", "N"})->ArgsProduct({kD, kDv, kN})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Batch_Dense)->ArgNames({"d", "dv", "N"})->ArgsProduct({{64, 256}, kDv, {256, 4096}})->UseRealTime()->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  Eigen::setNbThreads(1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
