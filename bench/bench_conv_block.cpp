// bench_conv_block: one DeltaConvBlock (preset "code") against the plain pre-norm residual conv block,
// which is the same class with residual = Additive, one train step (forward + backward) on 32x32
// images, batch 64, C in {16, 32, 64} channels, dv = 1 (goal: delta <= 1.10 x plain).
// BM_ConvBlockTrain_Paired alternates the two steps inside one loop and reports the ratio of their
// medians and of their minima (the load-robust numbers on a shared machine); BM_ConvStep times one
// ConvDeltaNet training step (forward + backward, no optimizer) of ddl-cifar's default net, B = 128,
// for the side-by-side PyTorch reference (bench/pytorch/bench_conv_deltanet.py).
//
//   OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 ./ddl_bench_conv_block
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "ddl/core/rng.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/models/conv_delta_net.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/train/adamw.hpp"

#include "bench_util.hpp"

namespace {

using ddl_bench::Stopwatch;
using ddl_bench::median;
using ddl_bench::fillNormal;

using S = float;
using Mat = ddl::MatX<S>;
using ddl::Index;

struct BlockFixture {
  ddl::TokenLayout layout;
  ddl::DeltaConvBlock<S> block;
  Mat X, Y, dY, dX;
  static ddl::DeltaBlockOptions options(bool delta) {
    ddl::DeltaBlockOptions o;  // preset "code" defaults: GELU, structured CC, k-Map, SqrtEps, linear gate
    o.residual.residual = delta ? ddl::ResidualKind::Delta : ddl::ResidualKind::Additive;
    return o;
  }
  BlockFixture(Index C, Index B, bool delta)
      : layout(ddl::TokenLayout::image(B, 32, 32)), block(C, 1, options(delta)), X(C, layout.tokens()),
        dY(C, layout.tokens()) {
    ddl::Rng rng(7);
    block.init(rng);
    fillNormal(X, 1, S(1));
    fillNormal(dY, 2, S(1) / static_cast<S>(layout.tokens()));
    train();
  }
  void train() {
    block.forward(X, layout, Y);
    block.backward(dY, dX);
  }
};

void BM_ConvBlockTrain_Paired(benchmark::State& state) {
  const Index C = state.range(0), B = state.range(1);
  BlockFixture plain(C, B, false), delta(C, B, true);
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
  state.counters["plain_ms"] = mp * 1e3;
  state.counters["delta_ms"] = md * 1e3;
  state.counters["delta_over_plain"] = md / mp;
  state.counters["min_delta_over_plain"] = *std::min_element(td.begin(), td.end()) / *std::min_element(tp.begin(), tp.end());
}

// ddl-cifar's default net (stem stride 2, widths 24,48,96, one block per stage, dv = 1, 10 classes); one step =
// zero grad, forward, softmax cross-entropy, backward, AdamW.
void BM_ConvNetStep(benchmark::State& state) {
  const bool delta = state.range(0) != 0;
  const Index B = state.range(1);
  ddl::ConvDeltaNetConfig cfg;
  cfg.block.residual.residual = delta ? ddl::ResidualKind::Delta : ddl::ResidualKind::Additive;
  ddl::applyPreset(cfg, "code");
  cfg.stemStride = 2;
  cfg.widths = {24, 48, 96};
  cfg.depths = {1, 1, 1};
  ddl::ConvDeltaNet<S> net(cfg, 1);
  ddl::SoftmaxCrossEntropy<S> loss;
  ddl::AdamW<S> opt;
  Mat X(cfg.inputDim(), B), logits, dLogits;
  fillNormal(X, 3, S(1));
  std::vector<int> y(static_cast<std::size_t>(B));
  for (Index i = 0; i < B; ++i) y[static_cast<std::size_t>(i)] = static_cast<int>(i % 10);
  auto step = [&] {
    ddl::zeroGrad(net);
    net.forward(X, logits);
    loss.forward(logits, y);
    loss.backward(dLogits);
    net.backward(dLogits);
    opt.step(net);
  };
  step();
  for (auto _ : state) {
    step();
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * B);
}

}  // namespace

BENCHMARK(BM_ConvBlockTrain_Paired)->ArgNames({"C", "B"})->ArgsProduct({{16, 32, 64}, {64}})->UseRealTime()->MinTime(2.0);
BENCHMARK(BM_ConvNetStep)->ArgNames({"delta", "B"})->ArgsProduct({{0, 1}, {128}})->UseRealTime()->MinTime(2.0);

BENCHMARK_MAIN();
