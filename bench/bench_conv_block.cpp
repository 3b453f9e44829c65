// bench_conv_block: one DeltaConvBlock (preset "code") against the plain pre-norm residual conv block,
// which is the same class with residual = Additive, one train step (forward + backward) on 32x32
// images, batch 64, C in {16, 32, 64} channels, dv = 1 (goal: delta <= 1.10 x plain).
// BM_ConvBlockTrain_Paired alternates the two steps inside one loop and reports the ratio of their
// medians and of their minima (the load-robust numbers on a shared machine); BM_ConvStep times one
// ConvDeltaNet training step (forward + backward, no optimizer) of ddl-cifar's default net, B = 128,
// for the side-by-side PyTorch reference (bench/pytorch/bench_conv_deltanet.py).
// BM_ConvNetParts: that step's parts (stem, blocks, their branches and single convs, transitions) timed
// one by one, wall and process CPU time: where the step's time goes (docs/decisions.md, "The conv step's profile").
//
//   OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 ./ddl_bench_conv_block
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
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
// zero grad, forward, softmax cross-entropy, backward, AdamW; precision:1 under the bf16 policy on oneDNN
// (skipped, saying why, where the CPU has no bf16).
void BM_ConvNetStep(benchmark::State& state) {
  const bool delta = state.range(0) != 0;
  const Index B = state.range(1);
  const ddl_bench::PrecisionArg precision(state.range(2));
  if (!precision.refusal().empty()) {
    state.SkipWithError(precision.refusal().c_str());
    return;
  }
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
  ddl_bench::Bf16Step precisionStep;
  auto step = [&] {
    ddl::zeroGrad(net);
    precisionStep.run(
        net,
        [&] {
          net.forward(X, logits);
          loss.forward(logits, y);
          loss.backward(dLogits);
          net.backward(dLogits);
          return 0;
        },
        [&] { opt.step(net); });
  };
  step();
  for (auto _ : state) {
    step();
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * B);
}

// Where ddl-cifar's ConvDeltaNet step spends its time (B = 128, delta residual, the shapes of
// BM_ConvNetStep): each part's forward + backward timed alone in the same loop, reported as its
// median in ms (wall) and, load-robust, as process CPU ms (both threads' work, waits excluded under
// OMP_WAIT_POLICY=passive). Parts: the stem conv, each stage's block, that block's conv branch alone,
// one of its two 3x3 convs alone, and each transition; "rest" = the step minus the parts
// (head, pool, final norm, loss, AdamW). precision:1 runs every part under the bf16 policy on oneDNN (the
// weights converted at every product here, not once per step as BM_ConvNetStep converts them).
double cpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void BM_ConvNetParts(benchmark::State& state) {
  const ddl_bench::PrecisionArg precision(state.range(0));
  if (!precision.refusal().empty()) {
    state.SkipWithError(precision.refusal().c_str());
    return;
  }
  const Index B = 128;
  const std::vector<Index> widths{24, 48, 96};
  const std::vector<Index> sides{16, 8, 4};
  ddl::DeltaBlockOptions opt = BlockFixture::options(true);
  struct Part {
    std::string name;
    std::function<void()> run;
    std::vector<double> wall, cpu;
  };
  std::vector<Part> parts;
  // Operands kept alive for the lambdas.
  std::vector<std::unique_ptr<Mat>> mats;
  auto mat = [&](Index r, Index c, std::uint64_t seed, S scale) -> Mat& {
    mats.push_back(std::make_unique<Mat>(r, c));
    fillNormal(*mats.back(), seed, scale);
    return *mats.back();
  };
  auto scratch = [&]() -> Mat& {
    mats.push_back(std::make_unique<Mat>());
    return *mats.back();
  };
  ddl::Rng rng(5);
  const ddl::TokenLayout img = ddl::TokenLayout::image(B, 32, 32);
  ddl::Conv2d<S> stem(3, 24, 3, 2, 1);
  stem.init(rng);
  {
    Mat& X = mat(3, img.tokens(), 1, 1);
    Mat& Y = scratch();
    Mat& dY = mat(24, stem.outputLayout(img).tokens(), 2, 1e-3f);
    parts.push_back({"stem", [&, &X = X, &Y = Y, &dY = dY] {
                       stem.forward(X, img, Y);
                       stem.backwardParamsOnly(dY);
                     }, {}, {}});
  }
  std::vector<std::unique_ptr<ddl::DeltaConvBlock<S>>> blocks;
  std::vector<std::unique_ptr<ddl::ConvBranch<S>>> branches;
  std::vector<std::unique_ptr<ddl::Conv2d<S>>> convs;
  std::vector<std::unique_ptr<ddl::StageTransition<S>>> transitions;
  for (std::size_t s = 0; s < widths.size(); ++s) {
    const Index w = widths[s];
    const ddl::TokenLayout L = ddl::TokenLayout::image(B, sides[s], sides[s]);
    if (s > 0) {
      const Index w0 = widths[s - 1];
      const ddl::TokenLayout L0 = ddl::TokenLayout::image(B, sides[s - 1], sides[s - 1]);
      transitions.push_back(std::make_unique<ddl::StageTransition<S>>(w0, w, 1, opt.compressor, opt.compressorKernel,
                                                                      opt.compressorReadInit, false, opt.normEps));
      transitions.back()->init(rng);
      Mat& X = mat(w0, L0.tokens(), 3, 1);
      Mat& dY = mat(w, L.tokens(), 4, 1e-3f);
      Mat &Y = scratch(), &dX = scratch();
      auto* t = transitions.back().get();
      parts.push_back({"transition" + std::to_string(s), [&, t, L0, &X = X, &Y = Y, &dY = dY, &dX = dX] {
                         t->forward(X, L0, Y);
                         t->backward(dY, dX);
                       }, {}, {}});
    }
    ddl::DeltaBlockOptions o = opt;
    o.hidden = w;
    blocks.push_back(std::make_unique<ddl::DeltaConvBlock<S>>(w, 1, o));
    blocks.back()->init(rng);
    branches.push_back(std::make_unique<ddl::ConvBranch<S>>(w, o.branch()));
    branches.back()->init(rng);
    convs.push_back(std::make_unique<ddl::Conv2d<S>>(w, w, 3, 1, 1));
    convs.back()->init(rng);
    Mat& X = mat(w, L.tokens(), 5, 1);
    Mat& dY = mat(w, L.tokens(), 6, 1e-3f);
    Mat &Y1 = scratch(), &dX1 = scratch(), &Y2 = scratch(), &dX2 = scratch(), &Y3 = scratch(), &dX3 = scratch();
    auto* blk = blocks.back().get();
    auto* br = branches.back().get();
    auto* cv = convs.back().get();
    const std::string tag = std::to_string(s);
    parts.push_back({"block" + tag, [&, blk, L, &X = X, &dY = dY, &Y = Y1, &dX = dX1] {
                       blk->forward(X, L, Y);
                       blk->backward(dY, dX);
                     }, {}, {}});
    parts.push_back({"branch" + tag, [&, br, L, &X = X, &dY = dY, &Y = Y2, &dX = dX2] {
                       br->forward(X, L, Y);
                       br->backward(dY, dX);
                     }, {}, {}});
    parts.push_back({"conv" + tag, [&, cv, L, &X = X, &dY = dY, &Y = Y3, &dX = dX3] {
                       cv->forward(X, L, Y);
                       cv->backward(dY, dX);
                     }, {}, {}});
  }
  // The whole step, as BM_ConvNetStep.
  ddl::ConvDeltaNetConfig cfg;
  cfg.block.residual.residual = ddl::ResidualKind::Delta;
  ddl::applyPreset(cfg, "code");
  cfg.stemStride = 2;
  cfg.widths = widths;
  cfg.depths = {1, 1, 1};
  ddl::ConvDeltaNet<S> net(cfg, 1);
  ddl::SoftmaxCrossEntropy<S> loss;
  ddl::AdamW<S> adam;
  Mat& images = mat(cfg.inputDim(), B, 3, 1);
  Mat &logits = scratch(), &dLogits = scratch();
  std::vector<int> y(static_cast<std::size_t>(B));
  for (Index i = 0; i < B; ++i) y[static_cast<std::size_t>(i)] = static_cast<int>(i % 10);
  parts.push_back({"step", [&] {
                     ddl::zeroGrad(net);
                     net.forward(images, logits);
                     loss.forward(logits, y);
                     loss.backward(dLogits);
                     net.backward(dLogits);
                     adam.step(net);
                   }, {}, {}});
  for (Part& p : parts) p.run();  // warm-up: sizes every buffer
  for (auto _ : state) {
    for (Part& p : parts) {
      const double c0 = cpuSeconds();
      Stopwatch w;
      p.run();
      p.wall.push_back(w.seconds());
      p.cpu.push_back(cpuSeconds() - c0);
    }
    benchmark::ClobberMemory();
  }
  double sumWall = 0, sumCpu = 0;
  for (const Part& p : parts) {
    const double mw = median(p.wall) * 1e3, mc = median(p.cpu) * 1e3;
    state.counters[p.name + "_ms"] = mw;
    state.counters[p.name + "_cpu_ms"] = mc;
    const bool inStep = p.name == "stem" || p.name.rfind("block", 0) == 0 || p.name.rfind("transition", 0) == 0;
    if (inStep) sumWall += mw, sumCpu += mc;
  }
  state.counters["rest_ms"] = state.counters["step_ms"] - sumWall;
  state.counters["rest_cpu_ms"] = state.counters["step_cpu_ms"] - sumCpu;
}

}  // namespace

BENCHMARK(BM_ConvBlockTrain_Paired)->ArgNames({"C", "B"})->ArgsProduct({{16, 32, 64}, {64}})->UseRealTime()->MinTime(2.0);
BENCHMARK(BM_ConvNetParts)->ArgName("precision")->Arg(0)->Arg(1)->UseRealTime()->MinTime(4.0);
BENCHMARK(BM_ConvNetStep)->ArgNames({"delta", "B", "precision"})->ArgsProduct({{0, 1}, {128}, {0, 1}})->UseRealTime()->MinTime(2.0);

BENCHMARK_MAIN();
