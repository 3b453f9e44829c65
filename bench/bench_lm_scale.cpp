// bench_lm_scale: DeltaLM at the paper's size, the authors' default configuration (lm_configs.hpp):
// variants cc-ec (the paper's DDL, dv 4) and additive dv 1 (the pre-norm GPT baseline).
//
//   OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive ./ddl_bench_lm_scale
//
// BM_ScaleStep/variant/precision: one training step on one sequence of 1024 tokens (zeroGrad + forward + mean
//   next-token cross-entropy + backward + AdamW), after one warm-up step that sizes every workspace.
//   Counters: step_ms, tokens_per_s, params, and what the first step allocates, phase by phase, read
//   from glibc's heap (mallinfo2, bytes in use; later steps reuse it all): weights_MiB, grads_MiB (after
//   zeroGrad), forward_MiB (what the forward keeps for backward, with its workspaces; forward_dN the
//   same in units of one (d, T) float matrix), loss_MiB (what the loss adds: nothing, as the softmax and
//   the logits' gradient take the logits' place, as in the training step), backward_MiB
//   (backward's own scratch), adamw_MiB (its two moments) and total_MiB. The additive variant also counts
//   model_gflop, its step's floating-point operations as the pre-norm GPT count has them (additiveStepFlops),
//   and model_gflops, that count per second of the median step: read against BM_FmaPeak/threads:2 of
//   ddl_bench_gemm, the share of the machine's float peak the step reaches. precision:1 runs the step under the
//   bf16 policy on oneDNN (bf16 copies of the weights made once per step), skipped where the CPU has no bf16.
// BM_ScaleGenerate/variant: LmDecoder (the cache of keys, values and EC's last embeddings) fed a
//   960-token prompt one token at a time (prefill_tokens_per_s), then 64 more tokens up to the context
//   of 1024 (decode_tokens_per_s: a step at the longest contexts, its logits included; sampling is
//   left out, the next id is drawn from the benchmark's own Rng).
// bench/pytorch/bench_lm.py --d 768 --depth 12 --heads 6 --length 1024 --batch 1 --vocab 50304
//   --variants cc-ec,dv1-additive times PyTorch's step at the same size (docs/results.md).
#include <benchmark/benchmark.h>

#include <malloc.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ddl/core/param.hpp"
#include "ddl/core/param_list.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_batch.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/nn/models/delta_lm_config.hpp"
#include "ddl/nn/models/lm_decoder.hpp"
#include "ddl/train/adamw.hpp"

#include "bench_util.hpp"
#include "lm_configs.hpp"

namespace {

using ddl_bench::Stopwatch;
using S = float;
using ddl::Index;

constexpr Index kVocab = ddl_bench::kScaleVocab, kD = ddl_bench::kScaleD, kT = ddl_bench::kScaleT;
constexpr Index kPrompt = 960;

constexpr int kCcEc = ddl_bench::kScaleCcEc, kAdditive = ddl_bench::kScaleAdditive;
using ddl_bench::scaleConfig;
const char* variantName(int v) { return ddl_bench::scaleVariantName(v); }

// Bytes glibc's heap holds in use (small blocks and mmapped large ones).
double heapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks) + static_cast<double>(m.hblkhd);
}

constexpr double kMiB = 1024.0 * 1024.0;

// Floating-point operations of one additive step on one sequence: the products only (norms, softmax,
// the MLP's activation and AdamW are a few operations per element, not per weight). Every weight of a
// product (q, k, v and the output: 4 d², the MLP: 8 d² per block; the tied head: V d) costs 2 per token
// forward and 4 backward (the input's and the weight's gradients); attention's two products (QᵀK, then
// P V) cost 2 d per causal pair (T (T + 1) / 2 of them) forward and twice that backward. 817.2 GFLOP.
double additiveStepFlops() {
  const double d = static_cast<double>(kD), T = static_cast<double>(kT), V = static_cast<double>(kVocab);
  const double L = static_cast<double>(ddl_bench::kScaleDepth);
  const double productWeights = 12 * d * d * L + V * d;
  return 6 * productWeights * T + 3 * 2 * (2 * d) * (T * (T + 1) / 2) * L;
}

// The weights additiveStepFlops counts, plus the RMS norms' gains (two of d per block, the final one, and
// attention's query and key norms of d / H per block): the whole of the additive model, so a change of
// its layers shows up as a mismatch, not as a wrong count.
ddl::Index additiveParams() {
  constexpr ddl::Index L = ddl_bench::kScaleDepth;
  return 12 * kD * kD * L + kVocab * kD + (2 * L + 1) * kD + 2 * L * (kD / ddl_bench::kScaleHeads);
}

void BM_ScaleStep(benchmark::State& state) {
  const int variant = static_cast<int>(state.range(0));
  const ddl_bench::PrecisionArg precision(state.range(1));
  if (!precision.refusal().empty()) {
    state.SkipWithError(precision.refusal().c_str());
    return;
  }
  const double before = heapInUse();
  ddl::DeltaLM<S> model(scaleConfig(variant), 1);
  const double weights = heapInUse() - before;
  ddl::ParamList<S> params(model);
  ddl::AdamW<S> opt;
  ddl::SoftmaxCrossEntropy<S> ce;
  ddl::TokenBatch batch;
  batch.layout = ddl::TokenLayout::sequence(1, kT);
  std::vector<int> next(static_cast<std::size_t>(kT));
  ddl::Rng rng(11);
  batch.ids.resize(static_cast<std::size_t>(kT));
  const auto draw = [&rng] { return static_cast<int>(rng.below(static_cast<std::uint64_t>(kVocab))); };
  for (Index t = 0; t < kT; ++t) batch.ids[static_cast<std::size_t>(t)] = draw();
  for (Index t = 0; t < kT; ++t) next[static_cast<std::size_t>(t)] = draw();
  ddl::MatX<S> logits;
  // The first step, phase by phase: what each allocates and keeps (every later step reuses it all; under
  // bf16 the weights' bf16 copies count in forward_MiB).
  ddl_bench::Bf16Step precisionStep;
  ddl::zeroGrad(params);
  const double h0 = heapInUse();
  double h1 = 0, h2 = 0, h3 = 0;
  precisionStep.run(
      params,
      [&] {
        model.forward(batch, logits);
        h1 = heapInUse();
        ce.forwardInPlace(logits, next);  // softmax, then gradient, in the logits' place, as the training step does
        ce.backward(logits);
        h2 = heapInUse();
        model.backward(logits);
        h3 = heapInUse();
        return 0;
      },
      [&] { opt.step(params); });
  const double h4 = heapInUse();
  const auto step = [&] {
    ddl::zeroGrad(params);
    return precisionStep.run(
        params,
        [&] {
          model.forward(batch, logits);
          const S loss = ce.forwardInPlace(logits, next);
          ce.backward(logits);
          model.backward(logits);
          return loss;
        },
        [&] { opt.step(params); });
  };
  std::vector<double> times;
  for (auto _ : state) {
    Stopwatch w;
    benchmark::DoNotOptimize(step());
    times.push_back(w.seconds());
    benchmark::ClobberMemory();
  }
  const double ms = ddl_bench::median(times) * 1e3;
  if (variant == kAdditive) {
    if (ddl::numParams(model) != additiveParams()) {
      const std::string why = "the additive model has " + std::to_string(ddl::numParams(model)) +
                              " parameters, additiveStepFlops counts " + std::to_string(additiveParams());
      state.SkipWithError(why.c_str());
      return;
    }
    state.counters["model_gflop"] = additiveStepFlops() * 1e-9;
    state.counters["model_gflops"] = additiveStepFlops() * 1e-9 / (ms * 1e-3);
  }
  const double dN = static_cast<double>(kD) * static_cast<double>(kT) * sizeof(S);
  state.counters["step_ms"] = ms;
  state.counters["min_step_ms"] = ddl_bench::minimum(times) * 1e3;
  state.counters["tokens_per_s"] = static_cast<double>(kT) / (ms * 1e-3);
  state.counters["params"] = static_cast<double>(ddl::numParams(model));
  state.counters["weights_MiB"] = weights / kMiB;
  state.counters["grads_MiB"] = (h0 - before - weights) / kMiB;
  state.counters["forward_MiB"] = (h1 - h0) / kMiB;
  state.counters["forward_dN"] = (h1 - h0) / dN;
  state.counters["loss_MiB"] = (h2 - h1) / kMiB;
  state.counters["backward_MiB"] = (h3 - h2) / kMiB;
  state.counters["adamw_MiB"] = (h4 - h3) / kMiB;
  state.counters["total_MiB"] = (h4 - before) / kMiB;
  state.SetLabel(std::string(variantName(variant)) + ", " + ddl_bench::PrecisionArg::name(state.range(1)));
}

void BM_ScaleGenerate(benchmark::State& state) {
  const int variant = static_cast<int>(state.range(0));
  ddl::DeltaLM<S> model(scaleConfig(variant), 1);
  ddl::LmDecoder<S> decoder(model);
  ddl::MatX<S> logits;
  ddl::Rng rng(13);
  std::vector<double> prefill, decode;
  for (auto _ : state) {
    decoder.start(kT);
    Stopwatch p;
    const auto draw = [&rng] { return static_cast<int>(rng.below(static_cast<std::uint64_t>(kVocab))); };
    for (Index t = 0; t < kPrompt; ++t) decoder.step(draw(), logits);
    prefill.push_back(static_cast<double>(kPrompt) / p.seconds());
    Stopwatch g;
    for (Index t = kPrompt; t < kT; ++t) decoder.step(draw(), logits);
    decode.push_back(static_cast<double>(kT - kPrompt) / g.seconds());
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["prefill_tokens_per_s"] = ddl_bench::median(prefill);
  state.counters["decode_tokens_per_s"] = ddl_bench::median(decode);
  state.SetLabel(variantName(variant));
}

}  // namespace

BENCHMARK(BM_ScaleStep)->ArgNames({"variant", "precision"})->ArgsProduct({{kCcEc, kAdditive}, {0, 1}})->Iterations(3)->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ScaleGenerate)->ArgNames({"variant"})->Arg(kCcEc)->Arg(kAdditive)->Iterations(1)->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
