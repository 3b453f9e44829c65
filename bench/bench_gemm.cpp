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
// BM_FmaPeak/threads:N is the ceiling those figures are read against: 8-float fused multiply-adds with
// no memory operands, 12 independent chains (enough to hide the FMA latency on both FMA pipes), on N
// threads at once (started anew each iteration, about 18 ms of work each); gflops is their sum. On a
// CPU without AVX2 + FMA it reports an error instead.
// BM_GemmDnnl/<m>/<n>/<k>/<transA>/<transB>/<mode> (a build with ddl::dnnl) runs the same shapes on one thread
// through oneDNN: mode 0 its float matmul, mode 1 its bf16 matmul on operands converted beforehand (the
// kernel alone), mode 2 ddl's bf16 policy as a layer runs it (GemmWorkspace converting A and B to bf16 every
// product, then oneDNN; a training step converts each weight once instead). Modes 1 and 2 report an error
// where the CPU has no native bf16; the label is oneDNN's implementation.
#include <benchmark/benchmark.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "ddl/core/bf16.hpp"
#include "ddl/core/gemm.hpp"
#include "ddl/core/packed_sgemm.hpp"
#include "ddl/core/precision.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/types.hpp"
#if DDL_WITH_DNNL
#include "ddl/dnnl/matmul.hpp"
#endif

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

#if defined(__x86_64__) || defined(__i386__)
constexpr int kFmaChains = 12;
constexpr long kFmaRounds = 1 << 23;  // per iteration and thread: 12 * 2^23 fused multiply-adds of 8 floats

__attribute__((target("avx2,fma"))) float fmaChains(float seed) {
  __m256 acc[kFmaChains];
  for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm256_set1_ps(seed + 1e-3f * static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long r = 0; r < kFmaRounds; ++r)
    for (int i = 0; i < kFmaChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 sum = acc[0];
  for (int i = 1; i < kFmaChains; ++i) sum = _mm256_add_ps(sum, acc[i]);
  return _mm256_cvtss_f32(sum);
}

void BM_FmaPeak(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    state.SkipWithError("this CPU has no AVX2 + FMA");
    return;
  }
  const int threads = static_cast<int>(state.range(0));
  std::vector<float> out(static_cast<std::size_t>(threads), 1.0f);
  for (auto _ : state) {  // every iteration: each of the threads runs the chains once, at the same time
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back([&out, t] { out[std::size_t(t)] = fmaChains(out[std::size_t(t)]); });
    out[0] = fmaChains(out[0]);
    for (auto& th : pool) th.join();
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["gflops"] = benchmark::Counter(2e-9 * 8 * kFmaChains * double(kFmaRounds) * threads,
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_FmaPeak)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
#endif

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

#if DDL_WITH_DNNL
void BM_GemmDnnl(benchmark::State& state) {
  const Index m = state.range(0), n = state.range(1), k = state.range(2);
  const bool transA = state.range(3) != 0, transB = state.range(4) != 0;
  const long mode = state.range(5);
  if (mode != 0 && !ddl::dnnlBf16Refusal().empty()) {
    state.SkipWithError(ddl::dnnlBf16Refusal().c_str());
    return;
  }
  ddl::setNumThreads(1);  // one thread, as BM_Gemm: oneDNN takes OpenMP's count outside a parallel region
  Mat A = transA ? Mat(k, m) : Mat(m, k), B = transB ? Mat(n, k) : Mat(k, n), C(m, n);
  ddl_bench::fillNormal(A, 1, 1.0f);
  ddl_bench::fillNormal(B, 2, 1.0f);
  std::vector<std::uint16_t> a16(static_cast<std::size_t>(A.size())), b16(static_cast<std::size_t>(B.size()));
  ddl::toBf16(A.data(), A.rows(), A.rows(), A.cols(), a16.data());
  ddl::toBf16(B.data(), B.rows(), B.rows(), B.cols(), b16.data());
  ddl::DnnlProduct p;
  p.m = m, p.n = n, p.k = k, p.lda = A.rows(), p.transA = transA, p.ldb = B.rows(), p.transB = transB;
  p.C = C.data(), p.ldc = m;
  p.A = mode == 0 ? static_cast<const void*>(A.data()) : a16.data();
  p.B = mode == 0 ? static_cast<const void*>(B.data()) : b16.data();
  p.type = mode == 0 ? ddl::DnnlType::Float : ddl::DnnlType::BF16;
  ddl::GemmWorkspace<float> ws;
  const ddl::Precision previous = ddl::setProductPrecision(mode == 2 ? ddl::Precision::BF16 : ddl::Precision::Float);
  const ddl::Bf16Kernel kernel = ddl::setBf16Kernel(&ddl::dnnlBf16Kernel);
  const auto run = [&] {
    if (mode == 2) ws.product(A, transA, B, transB, C, 1.0f, false);
    else ddl::dnnlProduct(p);
  };
  run();  // makes the primitive, sizes the buffers
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(C.data());
    benchmark::ClobberMemory();
  }
  ddl::setBf16Kernel(kernel);
  ddl::setProductPrecision(previous);
  state.SetLabel(ddl::dnnlImplementation(p));
  state.counters["gflops"] =
      benchmark::Counter(2e-9 * double(m) * double(n) * double(k), benchmark::Counter::kIsIterationInvariantRate);
}
void dnnlShapes(benchmark::internal::Benchmark* b) {
  b->Apply(shapes);  // the packed argument of BM_Gemm becomes the mode: 0, 1; then mode 2
  const long table[][5] = {{384, 256, 128, 0, 0}, {2304, 512, 768, 0, 0}, {768, 512, 3072, 1, 0}, {1536, 768, 1024, 0, 1},
                           {50304, 512, 768, 0, 0}};
  for (const auto& s : table) b->Args({s[0], s[1], s[2], s[3], s[4], 2});
}
BENCHMARK(BM_GemmDnnl)->Apply(dnnlShapes)->Unit(benchmark::kMicrosecond)->UseRealTime();
#endif

}  // namespace

BENCHMARK_MAIN();
