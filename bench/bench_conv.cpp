// bench_conv: Conv2d (3x3, padding 1, stride 1, C -> C channels, batch 64) forward and forward+backward
// against plain GEMMs of the conv's main product, Y (M, N) = W (M, K) P (K, N) with M = C, K = 9 C,
// N = 64 H W, measured in the same run (goal: conv rate >= 60 % of the GEMM rate).
//
//   OMP_NUM_THREADS=1 ./ddl_bench_conv --benchmark_repetitions=5
//   OMP_NUM_THREADS=2 ./ddl_bench_conv --benchmark_repetitions=5
//
// Counters: flops = multiply-adds x 2 per second (forward 2 M K N, forward+backward 6 M K N).
//   BM_Gemm       the main product alone on GemmWorkspaces, N split over the threads (as Linear does)
//   BM_GemmTrain  the three products of a dense forward+backward at the conv's shapes (Y = W P,
//                 dW += dY Pᵀ, dP = Wᵀ dY) on already-built patches: a conv step without im2col/col2im
//   BM_EigenGemm  the main product through Eigen's own (self-threaded) Y.noalias() = W * P
//   BM_GemmCached the same flops as BM_Gemm in products of N = kCachedCols columns whose operands stay
//                 in L2 (each thread reuses its own P block): the kernel's in-cache rate, the ceiling
//                 for a conv that builds its patches in cache-sized chunks
//   BM_Conv2dForward / BM_Conv2dTrain   the layer
//   BM_Paired     alternates one conv train step and one BM_Gemm product inside one loop and reports
//                 of_gemm = conv rate / GEMM rate from the medians (and minima) of their times: on a
//                 machine shared with other jobs, the most load-robust ratio; of_cached likewise
//                 against one BM_GemmCached pass.
//   BM_Algorithms_Paired  alternates a train step by patches and one by shifted products (the two
//                 ConvAlgorithms of nn/layers/conv2d.hpp) and reports shifted_over_patches, on more shapes
//                 (ddl-cifar's 16x16, 8x8 and 4x4 stages included).
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <vector>

#include "ddl/core/config.hpp"
#include "ddl/core/gemm.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/conv2d.hpp"

namespace {

using S = float;
using Mat = ddl::MatX<S>;
using ddl::Index;

constexpr Index kBatch = 64;
constexpr Index kCachedCols = 256;

void fillUniform(Mat& M, std::uint64_t seed) {
  ddl::Rng rng(seed);
  for (Index j = 0; j < M.cols(); ++j)
    for (Index i = 0; i < M.rows(); ++i) M(i, j) = static_cast<S>(rng.uniform(-1.0, 1.0));
}

// Upper median of the per-iteration times.
double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The conv layer with its input, output and gradient buffers, warmed up.
struct ConvFixture {
  ddl::TokenLayout layout;
  ddl::Conv2d<S> conv;
  Mat X, Y, dY, dX;
  ConvFixture(Index C, Index H, ddl::ConvAlgorithm algorithm = ddl::ConvAlgorithm::Automatic)
      : layout(ddl::TokenLayout::image(kBatch, H, H)), conv(C, C, 3, 1, 1), X(C, layout.tokens()), dY(C, layout.tokens()) {
    conv.setAlgorithm(algorithm);
    ddl::Rng rng(3);
    conv.init(rng);
    fillUniform(X, 1);
    fillUniform(dY, 2);
    step();
  }
  void forward() { conv.forward(X, layout, Y); }
  void step() {
    conv.forward(X, layout, Y);
    conv.backward(dY, dX);
  }
};

// Plain products at the conv's (M, N, K), each thread on its own column range with its own workspaces.
struct GemmFixture {
  Index M, N, K;
  int threads;
  Mat W, P, Y, dY, dP;
  std::vector<Mat> dW;  // per-thread partial dW, summed after the region (as the conv does)
  std::vector<ddl::GemmWorkspace<S>> fwd, wgt, inp;
  GemmFixture(Index C, Index H)
      : M(C), N(kBatch * H * H), K(9 * C), threads(ddl::numThreads()), W(M, K), P(K, N), Y(M, N), dY(M, N), dP(K, N),
        dW(static_cast<std::size_t>(threads), Mat::Zero(M, K)), fwd(static_cast<std::size_t>(threads)),
        wgt(static_cast<std::size_t>(threads)), inp(static_cast<std::size_t>(threads)) {
    fillUniform(W, 4);
    fillUniform(P, 5);
    fillUniform(dY, 6);
    train();
  }
  Index begin(int t) const { return N * t / threads; }
  template <class F>
  void parallel(F&& f) {
    DDL_OMP(parallel for schedule(static) num_threads(threads))
    for (int t = 0; t < threads; ++t) f(t);
  }
  void product() {
    parallel([&](int t) {
      const Index j0 = begin(t), n = begin(t + 1) - j0;
      fwd[static_cast<std::size_t>(t)].product(W, false, P.middleCols(j0, n), false, Y.middleCols(j0, n), S(1), false);
    });
  }
  void train() {
    product();
    parallel([&](int t) {
      const std::size_t ts = static_cast<std::size_t>(t);
      const Index j0 = begin(t), n = begin(t + 1) - j0;
      wgt[ts].product(dY.middleCols(j0, n), false, P.middleCols(j0, n), true, dW[ts], S(1), false);
      inp[ts].product(W, true, dY.middleCols(j0, n), false, dP.middleCols(j0, n), S(1), false);
    });
    for (std::size_t t = 1; t < dW.size(); ++t) dW[0] += dW[t];
  }
};

// The main product's flops in (N / kCachedCols) products of kCachedCols columns on L2-resident blocks.
struct CachedGemmFixture {
  Index M, K, products;
  int threads;
  Mat W;
  std::vector<Mat> P, Y;  // per thread (K, kCachedCols), (M, kCachedCols)
  std::vector<ddl::GemmWorkspace<S>> ws;
  CachedGemmFixture(Index C, Index H)
      : M(C), K(9 * C), products(kBatch * H * H / kCachedCols), threads(ddl::numThreads()), W(M, K),
        P(static_cast<std::size_t>(threads), Mat(K, kCachedCols)), Y(static_cast<std::size_t>(threads), Mat(M, kCachedCols)),
        ws(static_cast<std::size_t>(threads)) {
    fillUniform(W, 4);
    for (auto& p : P) fillUniform(p, 5);
    run();
  }
  void run() {
    DDL_OMP(parallel for schedule(static) num_threads(threads))
    for (int t = 0; t < threads; ++t) {
      const std::size_t ts = static_cast<std::size_t>(t);
      for (Index i = products * t / threads; i < products * (t + 1) / threads; ++i)
        ws[ts].product(W, false, P[ts], false, Y[ts], S(1), false);
    }
  }
};

double flops(Index C, Index H, int products) { return 2.0 * products * C * (9.0 * C) * double(kBatch * H * H); }

void setCounters(benchmark::State& state, double f) {
  state.counters["flops"] = benchmark::Counter(f, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = ddl::numThreads();
}

void BM_Gemm(benchmark::State& state) {
  const Index C = state.range(0), H = state.range(1);
  GemmFixture g(C, H);
  for (auto _ : state) {
    g.product();
    benchmark::ClobberMemory();
  }
  setCounters(state, flops(C, H, 1));
}

void BM_GemmTrain(benchmark::State& state) {
  const Index C = state.range(0), H = state.range(1);
  GemmFixture g(C, H);
  for (auto _ : state) {
    g.train();
    benchmark::ClobberMemory();
  }
  setCounters(state, flops(C, H, 3));
}

void BM_EigenGemm(benchmark::State& state) {
  const Index C = state.range(0), H = state.range(1);
  Mat W(C, 9 * C), P(9 * C, kBatch * H * H), Y(C, kBatch * H * H);
  fillUniform(W, 4);
  fillUniform(P, 5);
  Y.noalias() = W * P;
  for (auto _ : state) {
    Y.noalias() = W * P;
    benchmark::ClobberMemory();
  }
  setCounters(state, flops(C, H, 1));
}

void BM_GemmCached(benchmark::State& state) {
  const Index C = state.range(0), H = state.range(1);
  CachedGemmFixture g(C, H);
  for (auto _ : state) {
    g.run();
    benchmark::ClobberMemory();
  }
  setCounters(state, flops(C, H, 1));
}

void BM_Conv2dForward(benchmark::State& state) {
  ConvFixture f(state.range(0), state.range(1));
  for (auto _ : state) {
    f.forward();
    benchmark::ClobberMemory();
  }
  setCounters(state, flops(state.range(0), state.range(1), 1));
}

void BM_Conv2dTrain(benchmark::State& state) {
  ConvFixture f(state.range(0), state.range(1));
  for (auto _ : state) {
    f.step();
    benchmark::ClobberMemory();
  }
  setCounters(state, flops(state.range(0), state.range(1), 3));
}

// One conv train step and one GEMM main product per iteration, timed separately.
void BM_Paired(benchmark::State& state) {
  const Index C = state.range(0), H = state.range(1);
  ConvFixture f(C, H);
  GemmFixture g(C, H);
  CachedGemmFixture c(C, H);
  std::vector<double> conv, gemm, cached;
  for (auto _ : state) {
    const double t0 = now();
    f.step();
    benchmark::ClobberMemory();
    const double t1 = now();
    g.product();
    benchmark::ClobberMemory();
    const double t2 = now();
    c.run();
    benchmark::ClobberMemory();
    const double t3 = now();
    conv.push_back(t1 - t0);
    gemm.push_back(t2 - t1);
    cached.push_back(t3 - t2);
  }
  // conv rate / GEMM rate = (6 MKN / t_conv) / (2 MKN / t_gemm) = 3 t_gemm / t_conv
  state.counters["of_gemm"] = 3.0 * median(gemm) / median(conv);
  state.counters["of_gemm_min"] =
      3.0 * *std::min_element(gemm.begin(), gemm.end()) / *std::min_element(conv.begin(), conv.end());
  state.counters["of_cached"] = 3.0 * median(cached) / median(conv);
  state.counters["conv_ms"] = 1e3 * median(conv);
  state.counters["gemm_ms"] = 1e3 * median(gemm);
  state.counters["threads"] = ddl::numThreads();
}

// One train step by patches and one by shifted products per iteration, same shape and data:
// shifted_over_patches = ratio of the median (and minimum) times.
void BM_Algorithms_Paired(benchmark::State& state) {
  const Index C = state.range(0), H = state.range(1);
  ConvFixture patches(C, H, ddl::ConvAlgorithm::Patches), shifted(C, H, ddl::ConvAlgorithm::ShiftedProducts);
  std::vector<double> tp, ts;
  for (auto _ : state) {
    const double t0 = now();
    patches.step();
    benchmark::ClobberMemory();
    const double t1 = now();
    shifted.step();
    benchmark::ClobberMemory();
    const double t2 = now();
    tp.push_back(t1 - t0);
    ts.push_back(t2 - t1);
  }
  state.counters["patches_ms"] = 1e3 * median(tp);
  state.counters["shifted_ms"] = 1e3 * median(ts);
  state.counters["shifted_over_patches"] = median(ts) / median(tp);
  state.counters["min_shifted_over_patches"] =
      *std::min_element(ts.begin(), ts.end()) / *std::min_element(tp.begin(), tp.end());
}

// ddl-cifar's stages (24, 48, 96 channels at 16x16, 8x8, 4x4) and the shapes above, at batch 64.
void algorithmShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"C", "H"});
  for (auto ch : {std::pair<Index, Index>{16, 32}, {32, 32}, {64, 32}, {24, 16}, {32, 16}, {64, 16}, {48, 8}, {96, 8},
                  {96, 4}, {16, 8}, {16, 4}})
    b->Args({ch.first, ch.second});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

// (C, H): 32x32 at 16/32/64 channels, 16x16 at the larger ones.
void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"C", "H"});
  for (auto ch : {std::pair<Index, Index>{16, 32}, {32, 32}, {64, 32}, {32, 16}, {64, 16}}) b->Args({ch.first, ch.second});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_Gemm)->Apply(shapes);
BENCHMARK(BM_GemmTrain)->Apply(shapes);
BENCHMARK(BM_EigenGemm)->Apply(shapes);
BENCHMARK(BM_GemmCached)->Apply(shapes);
BENCHMARK(BM_Conv2dForward)->Apply(shapes);
BENCHMARK(BM_Conv2dTrain)->Apply(shapes);
BENCHMARK(BM_Paired)->Apply(shapes);
BENCHMARK(BM_Algorithms_Paired)->Apply(algorithmShapes);

}  // namespace

BENCHMARK_MAIN();
