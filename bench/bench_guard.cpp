// bench_guard: what the Trainer's NaN/Inf guard (FiniteGuard::check, one pass over every gradient)
// costs next to the training step it protects, for the benchmark network (784 -> d = 256, 4 blocks,
// hidden 1024, B = 128, preset "code", 2.31 M parameters). BM_Step is a plain trainStep, BM_Step_Guarded
// the same step with the guard in its hook (as Trainer runs it), BM_GuardCheck the check alone.
//
//   OMP_NUM_THREADS=2 ./ddl_bench_guard --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <vector>

#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/nn/models/delta_net.hpp"
#include "ddl/nn/models/delta_net_config.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/finite_guard.hpp"
#include "ddl/train/train_step.hpp"

namespace {

using ddl::Index;

struct Setup {
  ddl::DeltaNet<float> net;
  ddl::SoftmaxCrossEntropy<float> loss;
  ddl::AdamW<float> opt;
  ddl::StepBuffers<float> buf;
  ddl::MatX<float> X;
  std::vector<int> y;

  static ddl::DeltaNetConfig config() {
    ddl::DeltaNetConfig c;
    ddl::applyPreset(c, "code");
    c.inputDim = 784;
    c.d = 256;
    c.depth = 4;
    c.block.hidden = 1024;
    return c;
  }
  Setup() : net(config(), 1), X(784, 128), y(128) {
    ddl::Rng rng(3);
    for (Index j = 0; j < 128; ++j) {
      y[static_cast<std::size_t>(j)] = static_cast<int>(rng.below(10));
      for (Index i = 0; i < 784; ++i) X(i, j) = static_cast<float>(rng.uniform());
    }
    ddl::trainStep(net, loss, opt, X, y, buf);  // sizes every buffer
  }
};

void BM_Step(benchmark::State& state) {
  Setup s;
  for (auto _ : state) benchmark::DoNotOptimize(ddl::trainStep(s.net, s.loss, s.opt, s.X, s.y, s.buf).loss);
}

void BM_Step_Guarded(benchmark::State& state) {
  Setup s;
  const ddl::FiniteGuard<float> guard(s.net);
  std::int64_t step = 0;
  for (auto _ : state) {
    ++step;
    const ddl::StepStats st = ddl::trainStep(s.net, s.loss, s.opt, s.X, s.y, s.buf, {},
                                             [&](const ddl::StepStats& r) { guard.check(r.loss, step); });
    benchmark::DoNotOptimize(st.loss);
  }
}

void BM_GuardCheck(benchmark::State& state) {
  Setup s;
  const ddl::FiniteGuard<float> guard(s.net);
  for (auto _ : state) {
    guard.check(0.5, 1);
    benchmark::ClobberMemory();
  }
}

}  // namespace

BENCHMARK(BM_Step)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Step_Guarded)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GuardCheck)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
