// bench_lm: one DeltaLM training step (zeroGrad + forward + next-token cross-entropy + backward + AdamW
// step) for the language model of docs/spec.md §8 at d = 256, L = 4 blocks, 4 heads, T = 256, B = 16,
// vocab 256, float, preset "code": additive dv 1 (a pre-norm GPT with RoPE, QK-norm and SwiGLU), delta
// dv 1 and delta cc (dv 4), and the attention layer's forward + backward against the GEMM rate of its
// own products, all in one binary so that the ratios come out of one run.
//
//   OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive ./ddl_bench_lm --benchmark_repetitions=3
//
// BM_LmStep_Precision/variant/emulated alternates a variant's step in float and in bf16 (emulated: 1 for the
// portable emulation, 0 for oneDNN's bf16 matmul, an error where the CPU has none); float_over_bf16 is the gain.
// BM_LmStep_Paired alternates the three steps inside one loop, each timed on its own, and reports per
// variant the median and minimum (ms) and the ratios delta/additive and cc/additive by medians and by
// minima (robust to other load on a shared machine). bench/run_compare.sh --net lm reads it.
//
// Attention (BM_Attention_Paired): one CausalSelfAttention forward + backward at (d, B*T), alternated
// with the same four projections alone (Linear q, k, v, o forward and backward and the two dc
// additions, what the layer issues around its core) and with the core's products alone. The core's
// time is layer − projections (it includes RoPE and the QK norms, a few % of it). FLOPs of the core
// per (sequence, head) pair, counted over the full T x T score matrix (the layer's causal blocks of 64
// compute 10 of its 16 tiles at T = 256, i.e. 62.5 % of this count; the exact causal half is ~50 %):
//   forward   S = Kᵀ Q, O = V P                          2 · 2 T² d_h
//   backward  S again (recompute), dV = dO Pᵀ, dP = Vᵀ dO, dQ = K dS, dK = Q dSᵀ   5 · 2 T² d_h
// = 14 T² d_h per pair, B·H pairs: 14 T² d B = 3.76 GFLOP per step (12 T² d B = 3.22 GFLOP without the
// recompute, the usual "useful" count). BM_AttnCoreGemms runs exactly those seven products per pair on
// preallocated operands, pairs over the OpenMP threads with single-threaded Eigen products as the layer
// does: the GEMM rate at the core's own shapes ((T x d_h)ᵀ (d_h x T) and (d_h x T)(T x T)).
// BM_Gemm gives Eigen's own threaded rate at two model shapes for reference.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "ddl/core/bf16_weights.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/param_list.hpp"
#include "ddl/core/precision.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/token_batch.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/causal_self_attention.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/nn/models/delta_lm_config.hpp"
#include "ddl/nn/layers/linear.hpp"
#include "ddl/train/adamw.hpp"

#if DDL_WITH_DNNL
#include "ddl/dnnl/bf16.hpp"
#endif

#include "bench_util.hpp"
#include "lm_configs.hpp"

namespace {

using ddl_bench::Stopwatch;
using ddl_bench::median;
using ddl_bench::minimum;
using ddl_bench::fillNormal;

using S = float;
using Mat = ddl::MatX<S>;
using ddl::Index;

constexpr Index kD = 256, kDepth = 4, kHeads = 4, kT = 256, kB = 16, kVocab = 256, kN = kB * kT;
constexpr Index kDh = kD / kHeads;

// variant: 0 additive dv1, 1 delta dv1, 2 delta cc (dv 4).
enum Variant { kAdditive = 0, kDeltaDv1 = 1, kDeltaCc = 2 };
const char* variantName(int v) { return v == kAdditive ? "additive" : v == kDeltaDv1 ? "delta" : "cc"; }

ddl::DeltaLMConfig lmConfig(int variant) {
  return ddl_bench::benchLmConfig(kVocab, kD, kDepth, kHeads, kT, variant == kDeltaCc ? "cc" : "dv1",
                                  variant == kAdditive ? ddl::ResidualKind::Additive : ddl::ResidualKind::Delta);
}

// A model, its optimizer and loss, one fixed batch of random bytes and their next bytes; warmed up by
// one step (sizes every workspace). zeroGrad and AdamW walk the model's ParamList, as trainStep does.
struct LmFixture {
  ddl::DeltaLM<S> model;
  ddl::ParamList<S> params;
  ddl::AdamW<S> opt;
  ddl::SoftmaxCrossEntropy<S> ce;
  ddl::TokenBatch batch;
  std::vector<int> next;
  Mat logits, dLogits;
  explicit LmFixture(int variant) : model(lmConfig(variant), 1), params(model) {
    ddl::Rng rng(7);
    std::vector<int> text(static_cast<std::size_t>(kB * (kT + 1)));
    for (int& id : text) id = static_cast<int>(rng.below(static_cast<std::uint64_t>(kVocab)));
    batch.layout = ddl::TokenLayout::sequence(kB, kT);
    batch.ids.resize(static_cast<std::size_t>(kN));
    next.resize(static_cast<std::size_t>(kN));
    for (Index b = 0; b < kB; ++b)
      for (Index t = 0; t < kT; ++t) {
        const auto i = static_cast<std::size_t>(b * kT + t), src = static_cast<std::size_t>(b * (kT + 1) + t);
        batch.ids[i] = text[src];
        next[i] = text[src + 1];
      }
    step();
  }
  // Under the bf16 policy the weights' bf16 copies are made once per step, as ddl::taskStep makes them.
  S step() {
    ddl::zeroGrad(params);
    return precisionStep.run(
        params,
        [&] {
          model.forward(batch, logits);
          const S loss = ce.forward(logits, next);
          ce.backward(dLogits);
          model.backward(dLogits);
          return loss;
        },
        [&] { opt.step(params); });
  }
  ddl_bench::Bf16Step precisionStep;
};

void BM_LmStep(benchmark::State& state) {
  const int variant = static_cast<int>(state.range(0));
  LmFixture f(variant);
  for (auto _ : state) {
    benchmark::DoNotOptimize(f.step());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kN);
  state.SetLabel(variantName(variant));
}

// Additive dv1, delta dv1 and delta cc alternately, each timed on its own; medians and minima. precision:1
// runs the three under the bf16 policy on oneDNN (skipped, saying why, where the CPU has no bf16).
void BM_LmStep_Paired(benchmark::State& state) {
  const ddl_bench::PrecisionArg precision(state.range(0));
  if (!precision.refusal().empty()) {
    state.SkipWithError(precision.refusal().c_str());
    return;
  }
  LmFixture plain(kAdditive), delta(kDeltaDv1), cc(kDeltaCc);
  std::vector<double> ta, td, tc;
  for (auto _ : state) {
    Stopwatch a;
    benchmark::DoNotOptimize(plain.step());
    ta.push_back(a.seconds());
    Stopwatch b;
    benchmark::DoNotOptimize(delta.step());
    td.push_back(b.seconds());
    Stopwatch c;
    benchmark::DoNotOptimize(cc.step());
    tc.push_back(c.seconds());
  }
  const double ma = median(ta), md = median(td), mc = median(tc);
  state.counters["additive_ms"] = ma * 1e3;
  state.counters["delta_ms"] = md * 1e3;
  state.counters["cc_ms"] = mc * 1e3;
  state.counters["delta_over_additive"] = md / ma;
  state.counters["cc_over_additive"] = mc / ma;
  const double na = minimum(ta), nd = minimum(td), nc = minimum(tc);
  state.counters["min_additive_ms"] = na * 1e3;
  state.counters["min_delta_ms"] = nd * 1e3;
  state.counters["min_cc_ms"] = nc * 1e3;
  state.counters["min_delta_over_additive"] = nd / na;
  state.counters["min_cc_over_additive"] = nc / na;
  state.counters["steps"] = static_cast<double>(ta.size());
}

// One variant's step in float and in bf16 (native: oneDNN's bf16 matmul; emulated with --emulated, i.e.
// mode 1) alternately, each timed on its own: medians, minima and bf16/float.
void BM_LmStep_Precision(benchmark::State& state) {
  const int variant = static_cast<int>(state.range(0));
  const bool emulated = state.range(1) != 0;
#if DDL_WITH_DNNL
  if (!emulated && !ddl::installDnnlBf16()) {
    state.SkipWithError(ddl::dnnlBf16Refusal().c_str());
    return;
  }
#else
  if (!emulated) {
    state.SkipWithError("this build has no oneDNN (ddl::dnnl)");
    return;
  }
#endif
  if (emulated) ddl::setBf16Kernel(nullptr);
  LmFixture f(variant);
  ddl::setProductPrecision(ddl::Precision::BF16);
  LmFixture g(variant);
  ddl::setProductPrecision(ddl::Precision::Float);
  std::vector<double> tf, tb;
  for (auto _ : state) {
    Stopwatch a;
    benchmark::DoNotOptimize(f.step());
    tf.push_back(a.seconds());
    ddl::setProductPrecision(ddl::Precision::BF16);
    Stopwatch b;
    benchmark::DoNotOptimize(g.step());
    tb.push_back(b.seconds());
    ddl::setProductPrecision(ddl::Precision::Float);
  }
  state.counters["float_ms"] = median(tf) * 1e3;
  state.counters["bf16_ms"] = median(tb) * 1e3;
  state.counters["float_over_bf16"] = median(tf) / median(tb);
  state.counters["min_float_ms"] = minimum(tf) * 1e3;
  state.counters["min_bf16_ms"] = minimum(tb) * 1e3;
  state.counters["min_float_over_bf16"] = minimum(tf) / minimum(tb);
  state.SetLabel(std::string(variantName(variant)) + (emulated ? ", bf16 emulated" : ", bf16 on oneDNN"));
}

// ---- attention --------------------------------------------------------------------------------------

double coreFlops(bool recompute) {
  const double perPair = (recompute ? 14.0 : 12.0) * static_cast<double>(kT * kT * kDh);
  return perPair * static_cast<double>(kB * kHeads);
}

// The attention layer at the model's shape on a fixed input and output gradient.
struct AttentionFixture {
  ddl::CausalSelfAttention<S> attn;
  ddl::TokenLayout layout = ddl::TokenLayout::sequence(kB, kT);
  Mat c, out, dOut, dc;
  AttentionFixture() : attn(config()), c(kD, kN), dOut(kD, kN) {
    ddl::Rng rng(3);
    attn.init(rng);
    fillNormal(c, 4, S(1));
    fillNormal(dOut, 5, S(0.01));
    run();
  }
  static ddl::CausalSelfAttentionConfig config() {
    ddl::CausalSelfAttentionConfig a;
    a.d = kD;
    a.heads = kHeads;
    return a;
  }
  void run() {
    attn.forward(c, layout, out);
    attn.backward(dOut, dc);
  }
};

// The layer's four projections alone, as the layer issues them (forward q, k, v; o on the heads;
// backward o, then q, k, v with the two additions into dc).
struct ProjectionFixture {
  ddl::Linear<S> q{kD, kD, false}, k{kD, kD, false}, v{kD, kD, false}, o{kD, kD, false};
  Mat c, Q, K, V, A, out, dOut, dA, dc, tmp;
  ProjectionFixture() : c(kD, kN), A(kD, kN), dOut(kD, kN) {
    ddl::Rng rng(3);
    for (auto* l : {&q, &k, &v, &o}) l->init(rng);
    fillNormal(c, 4, S(1));
    fillNormal(A, 6, S(1));
    fillNormal(dOut, 5, S(0.01));
    run();
  }
  void run() {
    q.forward(c, Q);
    k.forward(c, K);
    v.forward(c, V);
    o.forward(A, out);
    o.backward(dOut, dA);
    q.backward(dA, dc);  // dA stands in for dQ, dK, dV (same shape, same products)
    k.backward(dA, tmp);
    dc += tmp;
    v.backward(dA, tmp);
    dc += tmp;
  }
};

// The core's seven products per (b, h) pair on preallocated operands, pairs over the threads with
// single-threaded products (Eigen runs one thread inside an OpenMP region), no softmax.
struct CoreGemms {
  Mat Q, K, V, dO, A, dQ, dK, dV;
  struct Scratch {
    Mat P, dP;
  };
  std::vector<Scratch> scratch;
  CoreGemms() : Q(kD, kN), K(kD, kN), V(kD, kN), dO(kD, kN), A(kD, kN), dQ(kD, kN), dK(kD, kN), dV(kD, kN) {
    fillNormal(Q, 1, S(0.1));
    fillNormal(K, 2, S(0.1));
    fillNormal(V, 3, S(1));
    fillNormal(dO, 4, S(0.01));
    int threads = 1;
#if DDL_WITH_OPENMP
    threads = omp_get_max_threads();
#endif
    scratch.resize(static_cast<std::size_t>(threads));
    for (Scratch& s : scratch) {
      s.P = Mat::Zero(kT, kT);
      s.dP = Mat::Zero(kT, kT);
    }
  }
  void run() {
    const Index pairs = kB * kHeads;
    DDL_OMP(parallel for schedule(static))
    for (Index pair = 0; pair < pairs; ++pair) {
      int ti = 0;
#if DDL_WITH_OPENMP
      ti = omp_get_thread_num();
#endif
      Scratch& s = scratch[static_cast<std::size_t>(ti)];
      const Index b = pair / kHeads, h = pair % kHeads, r = h * kDh, c0 = b * kT;
      const auto Qb = Q.block(r, c0, kDh, kT);
      const auto Kb = K.block(r, c0, kDh, kT);
      const auto Vb = V.block(r, c0, kDh, kT);
      const auto dOb = dO.block(r, c0, kDh, kT);
      s.P.noalias() = Kb.transpose() * Qb;                       // forward scores
      A.block(r, c0, kDh, kT).noalias() = Vb * s.P;              // forward values
      s.P.noalias() = Kb.transpose() * Qb;                       // backward: recompute
      dV.block(r, c0, kDh, kT).noalias() = dOb * s.P.transpose();
      s.dP.noalias() = Vb.transpose() * dOb;
      dQ.block(r, c0, kDh, kT).noalias() = Kb * s.dP;
      dK.block(r, c0, kDh, kT).noalias() = Qb * s.dP.transpose();
    }
  }
};

void BM_AttentionLayer(benchmark::State& state) {  // forward + backward of the whole layer
  AttentionFixture f;
  for (auto _ : state) {
    f.run();
    benchmark::ClobberMemory();
  }
}

void BM_AttnCoreGemms(benchmark::State& state) {
  CoreGemms g;
  g.run();
  for (auto _ : state) {
    g.run();
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPs"] = benchmark::Counter(coreFlops(true) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Layer, projections and core products alternately: core = layer − projections; its rate against the
// products' rate.
void BM_Attention_Paired(benchmark::State& state) {
  AttentionFixture layer;
  ProjectionFixture proj;
  CoreGemms gemms;
  gemms.run();
  std::vector<double> tl, tp, tg;
  for (auto _ : state) {
    Stopwatch a;
    layer.run();
    tl.push_back(a.seconds());
    Stopwatch b;
    proj.run();
    tp.push_back(b.seconds());
    Stopwatch c;
    gemms.run();
    tg.push_back(c.seconds());
  }
  const double ml = median(tl), mp = median(tp), mg = median(tg), mcore = ml - mp;
  const double flops = coreFlops(true);
  state.counters["layer_ms"] = ml * 1e3;
  state.counters["proj_ms"] = mp * 1e3;
  state.counters["core_ms"] = mcore * 1e3;
  state.counters["gemm_ms"] = mg * 1e3;
  state.counters["core_GFLOPs"] = flops * 1e-9 / mcore;
  state.counters["gemm_GFLOPs"] = flops * 1e-9 / mg;
  state.counters["core_of_gemm_rate"] = mg / mcore;
  const double nl = minimum(tl), np = minimum(tp), ng = minimum(tg), ncore = nl - np;
  state.counters["min_layer_ms"] = nl * 1e3;
  state.counters["min_proj_ms"] = np * 1e3;
  state.counters["min_core_ms"] = ncore * 1e3;
  state.counters["min_gemm_ms"] = ng * 1e3;
  state.counters["min_core_of_gemm_rate"] = ng / ncore;
}

void BM_Gemm(benchmark::State& state) {  // Y (m, n) = A (m, k) B (k, n), Eigen's own threading
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

}  // namespace

BENCHMARK(BM_Gemm)->ArgNames({"m", "n", "k"})->Args({kD, kN, kD})->Args({682, kN, kD})->UseRealTime();
BENCHMARK(BM_AttnCoreGemms)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionLayer)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Attention_Paired)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(3.0);
BENCHMARK(BM_LmStep)->ArgNames({"variant"})->Arg(kAdditive)->Arg(kDeltaDv1)->Arg(kDeltaCc)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LmStep_Paired)->ArgName("precision")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(7);
BENCHMARK(BM_LmStep_Precision)->ArgNames({"variant", "emulated"})->Args({kAdditive, 0})->Args({kDeltaDv1, 0})
    ->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(7);

BENCHMARK_MAIN();
