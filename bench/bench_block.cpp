// bench_block: one DeltaBlock (preset "code") against the plain pre-norm residual block, which is the
// same class with residual = Additive, forward and forward+backward, for d in {128, 256, 512},
// B = 128 tokens, dv in {1, 4}. Baseline and contender have identical argument lists, so
// compare.py-style pairing by name works; items_per_second counts tokens.
//
//   OMP_NUM_THREADS=2 ./ddl_bench_block --benchmark_repetitions=5
//
// When the plain benchmark of the same (mode, d, dv, B) ran earlier in this process (registration
// order guarantees it), the delta benchmark reports of_plain = its time / the plain time.
// BM_BlockTrain_Paired alternates the two train steps inside one loop and reports the ratio of their
// median times (and of their minima): on a machine shared with others these are the most load-robust ratios.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/delta_block.hpp"

#include "bench_util.hpp"

namespace {

using ddl_bench::Stopwatch;
using ddl_bench::median;
using ddl_bench::fillNormal;

using S = float;
using Mat = ddl::MatX<S>;
using ddl::Index;

using Key = std::tuple<std::string, Index, Index, Index>;  // mode, d, dv, B
std::map<Key, double> g_plainSeconds;                        // plain seconds per iteration, by key

ddl::DeltaBlockOptions options(bool delta) {
  ddl::DeltaBlockOptions o;  // defaults are preset "code": GELU, hidden 4d, structured CC, k-Map ...
  o.residual.residual = delta ? ddl::ResidualKind::Delta : ddl::ResidualKind::Additive;
  return o;
}

// A block with its input, output and gradient buffers, warmed up (first call sizes every workspace).
struct Fixture {
  ddl::DeltaBlock<S> block;
  Mat X, Y, dY, dX;
  Fixture(Index d, Index dv, Index B, bool delta) : block(d, dv, options(delta)), X(d, dv * B), dY(d, dv * B) {
    ddl::Rng rng(7);
    block.init(rng);
    fillNormal(X, 1, S(1));
    fillNormal(dY, 2, S(1) / static_cast<S>(B));
    train();
  }
  void forward() { block.forward(X, Y); }
  void train() {
    block.forward(X, Y);
    block.backward(dY, dX);
  }
};

template <bool kDelta, bool kTrain>
void BM_Block(benchmark::State& state) {
  const Index d = state.range(0), dv = state.range(1), B = state.range(2);
  Fixture f(d, dv, B, kDelta);
  Stopwatch sw;
  for (auto _ : state) {
    if (kTrain)
      f.train();
    else
      f.forward();
    benchmark::DoNotOptimize(f.Y.data());
    benchmark::ClobberMemory();
  }
  const double perIter = sw.seconds() / static_cast<double>(state.iterations());
  state.SetItemsProcessed(state.iterations() * B);
  const Key key{kTrain ? "train" : "forward", d, dv, B};
  if (!kDelta) {
    g_plainSeconds[key] = perIter;
  } else if (auto it = g_plainSeconds.find(key); it != g_plainSeconds.end()) {
    state.counters["of_plain"] = perIter / it->second;
  }
}

// Plain and delta train steps alternately; each step timed on its own.
void BM_BlockTrain_Paired(benchmark::State& state) {
  const Index d = state.range(0), dv = state.range(1), B = state.range(2);
  Fixture plain(d, dv, B, false), delta(d, dv, B, true);
  std::vector<double> tp, td;
  for (auto _ : state) {
    Stopwatch a;
    plain.train();
    tp.push_back(a.seconds());
    Stopwatch b;
    delta.train();
    td.push_back(b.seconds());
    benchmark::ClobberMemory();
  }
  const double mp = median(tp), md = median(td);
  state.counters["plain_us"] = mp * 1e6;
  state.counters["delta_us"] = md * 1e6;
  state.counters["delta_over_plain"] = md / mp;
  state.counters["min_delta_over_plain"] = *std::min_element(td.begin(), td.end()) / *std::min_element(tp.begin(), tp.end());
}

const std::vector<std::int64_t> kD{128, 256, 512}, kDv{1, 4}, kB{128};

}  // namespace

BENCHMARK_TEMPLATE(BM_Block, false, false)->Name("BM_PlainBlock_Forward")->ArgNames({"d", "dv", "B"})->ArgsProduct({kD, kDv, kB})->UseRealTime();
BENCHMARK_TEMPLATE(BM_Block, true, false)->Name("BM_DeltaBlock_Forward")->ArgNames({"d", "dv", "B"})->ArgsProduct({kD, kDv, kB})->UseRealTime();
BENCHMARK_TEMPLATE(BM_Block, false, true)->Name("BM_PlainBlock_Train")->ArgNames({"d", "dv", "B"})->ArgsProduct({kD, kDv, kB})->UseRealTime();
BENCHMARK_TEMPLATE(BM_Block, true, true)->Name("BM_DeltaBlock_Train")->ArgNames({"d", "dv", "B"})->ArgsProduct({kD, kDv, kB})->UseRealTime();
BENCHMARK(BM_BlockTrain_Paired)->ArgNames({"d", "dv", "B"})->ArgsProduct({kD, kDv, kB})->UseRealTime()->MinTime(1.0);

BENCHMARK_MAIN();
