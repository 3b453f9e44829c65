// bench_gemm: the float product of every layer (core/gemm.hpp) with ddl's packed AVX2 kernel against
// Eigen's, on one thread, at the shapes ddl's language models run: the byte-level default (d 128, 512
// tokens a step, each of 2 threads taking 256) and the 124M model (d 768, 1024 tokens, each of 2 threads
// taking 512; the 50 304-row head).
//
//   build-bench/bench/ddl_bench_gemm --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
//
// Each shape runs as BM_Gemm/<m>/<n>/<k>/<transA>/<transB>/<packed>; gflops counts 2 m n k per product.
// packed = 0 is Eigen's kernel in the same workspace class (the packed kernel switched off), so the
// ratio of the two lines of a shape is the kernel's gain. On a CPU or build without the packed kernel
// (no AVX2 + FMA, or a build for AVX-512) both lines are Eigen's.
#include <benchmark/benchmark.h>

#include "ddl/core/gemm.hpp"
#include "ddl/core/packed_sgemm.hpp"
#include "ddl/core/types.hpp"

#include "bench_util.hpp"

namespace {

using Mat = ddl::MatX<float>;
using ddl::Index;

void BM_Gemm(benchmark::State& state) {
  const Index m = state.range(0), n = state.range(1), k = state.range(2);
  const bool transA = state.range(3) != 0, transB = state.range(4) != 0, packed = state.range(5) != 0;
  Mat A = transA ? Mat(k, m) : Mat(m, k), B = transB ? Mat(n, k) : Mat(k, n), C(m, n);
  ddl_bench::fillNormal(A, 1, 1.0f);
  ddl_bench::fillNormal(B, 2, 1.0f);
  const bool previous = ddl::setPackedSgemmEnabled(packed);
  ddl::GemmWorkspace<float> ws;
  ws.product(A, transA, B, transB, C, 1.0f, false);  // sizes the buffers
  for (auto _ : state) {
    ws.product(A, transA, B, transB, C, 1.0f, false);
    benchmark::DoNotOptimize(C.data());
    benchmark::ClobberMemory();
  }
  ddl::setPackedSgemmEnabled(previous);
  state.counters["gflops"] =
      benchmark::Counter(2e-9 * double(m) * double(n) * double(k), benchmark::Counter::kIsIterationInvariantRate);
}

// {m, n, k, transA, transB}: forward Y = W X, the weight gradient dW = dY Xᵀ (rows split over threads),
// the input gradient dX = Wᵀ dY, attention's scores per head.
void shapes(benchmark::internal::Benchmark* b) {
  const long table[][5] = {
      {384, 256, 128, 0, 0},   {128, 256, 128, 0, 0},  {64, 128, 512, 0, 1},    {128, 256, 384, 1, 0},
      {128, 128, 32, 1, 0},    {32, 128, 128, 0, 0},   {2304, 512, 768, 0, 0},  {768, 512, 3072, 1, 0},
      {1536, 768, 1024, 0, 1}, {768, 512, 768, 0, 0},  {50304, 512, 768, 0, 0},
  };
  for (const auto& s : table)
    for (long packed : {0L, 1L}) b->Args({s[0], s[1], s[2], s[3], s[4], packed});
}
BENCHMARK(BM_Gemm)->Apply(shapes)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
