// bench_net: one DeltaNet training step (zeroGrad + forward + softmax-CE + backward + AdamW step) for
// the benchmark network, 784 -> d = 256, 4 blocks (hidden 1024), B = 128, 10 classes, preset "code",
// against the same net with additive residuals, and the float GEMM rate at the step's own shapes in
// the same binary, so that "step time / GEMM floor" comes out of one run.
//
//   OMP_NUM_THREADS=2 ./ddl_bench_net --benchmark_repetitions=5
//
// FLOPs of a step (dense products only; everything else is counted as overhead). A Linear layer
// in -> out on B columns costs 2·in·out·B forward (W X), 2·in·out·B for dW = dY Xᵀ and 2·in·out·B for
// dX = Wᵀ dY; the input layer computes no dX. With h = hidden and dv value channels:
//   flops = 2·B·[ 2·in·d                                     input: forward + dW
//               + 3·depth·(d·h + h·d + d·1 + d·dv)           fc1, fc2, gate (1 x d), value (dv x d)
//               + 3·d·C ]                                    head
// = 1.717 GFLOP for the benchmark net (dv = 1). BM_StepGemms runs exactly those products (same shapes,
// same transposes, Eigen, noalias) back to back, each threaded by Eigen (split:0) or cut into one
// single-threaded product per thread as ddl::Linear does (split:1); the faster of the two is the GEMM
// floor of the step and flops / floor the GEMM rate at the step's shapes. BM_NetStep reports
// of_floor = step time / floor when BM_StepGemms ran earlier in the process. BM_NetStep_Paired
// alternates both floors, the plain step and the delta step inside one loop and reports ratios of
// medians and of minima (robust to other load on a shared machine); its precision:1 runs both steps under
// the bf16 policy on oneDNN (skipped, saying why, where the CPU has no bf16), the floors staying float.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "ddl/core/param.hpp"
#include "ddl/core/param_list.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/nn/models/delta_net.hpp"
#include "ddl/nn/models/delta_net_config.hpp"
#include "ddl/nn/layers/linear.hpp"
#include "ddl/train/adamw.hpp"

#include "bench_util.hpp"

namespace {

using ddl_bench::Stopwatch;
using ddl_bench::median;
using ddl_bench::minimum;
using ddl_bench::fillNormal;

using S = float;
using Mat = ddl::MatX<S>;
using ddl::Index;

constexpr Index kIn = 784, kD = 256, kDepth = 4, kHidden = 1024, kClasses = 10, kB = 128;

double g_floorSeconds = 0.0;  // BM_StepGemms seconds per iteration (dv = 1), 0 until it ran

ddl::DeltaNetConfig netConfig(bool delta, Index dv) {
  ddl::DeltaNetConfig c;
  c.inputDim = kIn;
  c.classes = kClasses;
  c.d = kD;
  c.depth = kDepth;
  c.dv = dv;
  c.block.hidden = kHidden;
  c.block.residual.residual = delta ? ddl::ResidualKind::Delta : ddl::ResidualKind::Additive;
  ddl::applyPreset(c, "code");  // keeps shapes and the residual kind
  return c;
}

// The layers of the step as (in, out, needs dX); the additive net has no gate or value layers.
struct LayerShape {
  Index in, out;
  bool dX;
};
std::vector<LayerShape> stepLayers(bool delta, Index dv) {
  std::vector<LayerShape> L{{kIn, kD, false}};
  for (Index i = 0; i < kDepth; ++i) {
    L.push_back({kD, kHidden, true});
    L.push_back({kHidden, kD, true});
    if (delta) {
      L.push_back({kD, 1, true});   // gate logits w c
      L.push_back({kD, dv, true});  // value W_v x_in
    }
  }
  L.push_back({kD, kClasses, true});
  return L;
}
double stepFlops(bool delta, Index dv) {
  double f = 0;
  for (const LayerShape& l : stepLayers(delta, dv))
    f += 2.0 * static_cast<double>(l.in * l.out * kB) * (l.dX ? 3.0 : 2.0);
  return f;
}

// The dense products of one step, on preallocated operands, exactly as Linear issues them.
class StepGemms {
 public:
  explicit StepGemms(bool delta, Index dv) {
    for (const LayerShape& l : stepLayers(delta, dv)) {
      Op op{l.dX, Mat(l.out, l.in), Mat(l.in, kB), Mat(l.out, kB), Mat(l.out, kB), Mat::Zero(l.out, l.in), Mat(l.in, kB)};
      fillNormal(op.W, 1, S(0.05));
      fillNormal(op.X, 2, S(1));
      fillNormal(op.dY, 3, S(0.01));
      m_ops.push_back(std::move(op));
    }
  }
  // Each product threaded by Eigen itself.
  void runEigenThreaded() {
    for (Op& o : m_ops) {
      o.Y.noalias() = o.W * o.X;
      o.dW.noalias() += o.dY * o.X.transpose();
      if (o.needDx) o.dX.noalias() = o.W.transpose() * o.dY;
    }
  }
  // The split ddl::Linear uses: one single-threaded product per thread (column ranges of Y and dX,
  // row ranges of dW), through the same helper, without Linear's copies and bias passes.
  void runSplit() {
    using ddl::detail::partBegin;
    for (Op& o : m_ops) {
      const Index in = o.W.cols(), out = o.W.rows();
      ddl::detail::runProductTasks(in * out * kB, [](int t) { return t; }, [&](int t, int n) {
        const Index j0 = partBegin(kB, t, n), m = partBegin(kB, t + 1, n) - j0;
        o.Y.middleCols(j0, m).noalias() = o.W * o.X.middleCols(j0, m);
      });
      const int products = o.needDx ? 2 : 1;
      ddl::detail::runProductTasks(in * out * kB * products, [products](int t) { return products * ((t + products - 1) / products); },
                                   [&](int t, int n) {
                                     const int per = n / products;
                                     if (t < per) {
                                       const Index r0 = partBegin(out, t, per), m = partBegin(out, t + 1, per) - r0;
                                       o.dW.middleRows(r0, m).noalias() += o.dY.middleRows(r0, m) * o.X.transpose();
                                     } else {
                                       const Index j0 = partBegin(kB, t - per, per), m = partBegin(kB, t - per + 1, per) - j0;
                                       o.dX.middleCols(j0, m).noalias() = o.W.transpose() * o.dY.middleCols(j0, m);
                                     }
                                   });
    }
  }

 private:
  struct Op {
    bool needDx;
    Mat W, X, Y, dY, dW, dX;
  };
  std::vector<Op> m_ops;
};

// A net, its optimizer and loss, one fixed batch; warmed up by one step (sizes every workspace).
// zeroGrad and the optimizer walk the net's ParamList (taken once), as trainStep does.
struct NetFixture {
  ddl::DeltaNet<S> net;
  ddl::ParamList<S> params;
  ddl::AdamW<S> opt;
  ddl::SoftmaxCrossEntropy<S> ce;
  Mat X, logits, dLogits;
  std::vector<int> labels;
  NetFixture(bool delta, Index dv) : net(netConfig(delta, dv), 1), params(net), X(kIn, kB), labels(kB) {
    fillNormal(X, 5, S(1));
    for (Index b = 0; b < kB; ++b) labels[static_cast<std::size_t>(b)] = static_cast<int>((b * 7) % kClasses);
    step();
  }
  S step() {
    ddl::zeroGrad(params);
    return precisionStep.run(
        params,
        [&] {
          net.forward(X, logits);
          const S loss = ce.forward(logits, labels);
          ce.backward(dLogits);
          net.backward(dLogits);
          return loss;
        },
        [&] { opt.step(params); });
  }
  ddl_bench::Bf16Step precisionStep;
};

void BM_Gemm(benchmark::State& state) {  // Y (m, n) = A (m, k) B (k, n)
  const Index m = state.range(0), n = state.range(1), k = state.range(2);
  Mat A(m, k), B(k, n), Y(m, n);
  fillNormal(A, 1, S(1));
  fillNormal(B, 2, S(1));
  for (auto _ : state) {
    Y.noalias() = A * B;
    benchmark::DoNotOptimize(Y.data());
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * static_cast<double>(m * n * k);
  state.counters["GFLOPs"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_StepGemms(benchmark::State& state) {  // split = 0: Eigen-threaded products, 1: Linear's split
  const bool delta = state.range(0) != 0, split = state.range(2) != 0;
  const Index dv = state.range(1);
  StepGemms g(delta, dv);
  auto run = [&] { split ? g.runSplit() : g.runEigenThreaded(); };
  run();
  Stopwatch sw;
  for (auto _ : state) {
    run();
    benchmark::ClobberMemory();
  }
  const double perIter = sw.seconds() / static_cast<double>(state.iterations());
  state.counters["GFLOP_per_step"] = stepFlops(delta, dv) * 1e-9;
  state.counters["GFLOPs"] = benchmark::Counter(stepFlops(delta, dv) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  // The floor is the faster way of running the step's products.
  if (delta && dv == 1) g_floorSeconds = g_floorSeconds > 0 ? std::min(g_floorSeconds, perIter) : perIter;
}

void BM_NetStep(benchmark::State& state) {
  const bool delta = state.range(0) != 0;
  const Index dv = state.range(1);
  NetFixture f(delta, dv);
  Stopwatch sw;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f.step());
    benchmark::ClobberMemory();
  }
  const double perIter = sw.seconds() / static_cast<double>(state.iterations());
  state.SetItemsProcessed(state.iterations() * kB);
  state.counters["GFLOP_per_step"] = stepFlops(delta, dv) * 1e-9;
  state.counters["GFLOPs"] = benchmark::Counter(stepFlops(delta, dv) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  if (delta && dv == 1 && g_floorSeconds > 0) state.counters["of_floor"] = perIter / g_floorSeconds;
}

// Floor, plain step and delta step (dv = 1) alternately, each timed on its own; ratios of medians.
void BM_NetStep_Paired(benchmark::State& state) {
  const ddl_bench::PrecisionArg precision(state.range(0));
  if (!precision.refusal().empty()) {
    state.SkipWithError(precision.refusal().c_str());
    return;
  }
  StepGemms gemms(true, 1);
  NetFixture plain(false, 1), delta(true, 1);
  std::vector<double> te, ts, tp, td;
  for (auto _ : state) {
    Stopwatch a;
    gemms.runEigenThreaded();
    te.push_back(a.seconds());
    Stopwatch s;
    gemms.runSplit();
    ts.push_back(s.seconds());
    Stopwatch b;
    benchmark::DoNotOptimize(plain.step());
    tp.push_back(b.seconds());
    Stopwatch c;
    benchmark::DoNotOptimize(delta.step());
    td.push_back(c.seconds());
  }
  const double me = median(te), ms = median(ts), mf = std::min(me, ms), mp = median(tp), md = median(td);
  state.counters["gemm_eigen_ms"] = me * 1e3;
  state.counters["gemm_split_ms"] = ms * 1e3;
  state.counters["floor_ms"] = mf * 1e3;
  state.counters["plain_ms"] = mp * 1e3;
  state.counters["delta_ms"] = md * 1e3;
  state.counters["delta_of_floor"] = md / mf;
  state.counters["delta_over_plain"] = md / mp;
  state.counters["gemm_GFLOPs"] = stepFlops(true, 1) * 1e-9 / mf;
  // Minima: each path's best undisturbed run; the steadier estimate when other jobs share the cores.
  const double nf = std::min(minimum(te), minimum(ts)), np = minimum(tp), nd = minimum(td);
  state.counters["min_floor_ms"] = nf * 1e3;
  state.counters["min_plain_ms"] = np * 1e3;
  state.counters["min_delta_ms"] = nd * 1e3;
  state.counters["min_delta_of_floor"] = nd / nf;
  state.counters["min_delta_over_plain"] = nd / np;
}

}  // namespace

BENCHMARK(BM_Gemm)->ArgNames({"m", "n", "k"})->Args({kHidden, kB, kD})->Args({kD, kB, kHidden})->Args({kD, kB, kIn})->UseRealTime();
BENCHMARK(BM_StepGemms)->ArgNames({"delta", "dv", "split"})->ArgsProduct({{1, 0}, {1}, {0, 1}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_NetStep)->ArgNames({"delta", "dv"})->Args({0, 1})->Args({1, 1})->Args({0, 4})->Args({1, 4})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_NetStep_Paired)->ArgName("precision")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3.0);

BENCHMARK_MAIN();
