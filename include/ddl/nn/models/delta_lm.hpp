#pragma once
// ddl/nn/models/delta_lm.hpp: DeltaLM, the causal language model of the paper (docs/spec.md §8):
//   ids (B*T) -> embedding x (d, N) -> X0 = x (dv = 1) | repeat | EC (dv > 1)
//   -> depth x DeltaTransformerBlock -> readout compressor (dv > 1) -> RMSNorm -> head -> logits (V, N)
// N = B*T, column b*T + t (core/token_batch.hpp). The head is tied to the embedding (logits = E y) or a
// separate head.weight [V, d]. Configuration and variants: nn/models/delta_lm_config.hpp.
//
// Initialisation (the authors' code, docs/spec.md §8), from one seed: every parameter with two or more
// dimensions ~ N(0, (f/sqrt(d))²) (the structured CC kernel [d, K] too), the two output projections of
// each block (attn.o, mlp.fc2) ~ N(0, (f/sqrt(d)/sqrt(L))²), the embedding ~ N(0, s²), with f =
// hiddenInitStdFactor (0.5) and s = embeddingInitStd (0.02); one-dimensional parameters keep their
// module's start (gate bias logit(beta0/2), value bias 0, read vectors 1/dv or compressorReadInit, gains
// 1) and EC starts as the copy of the current token. init = authors then redraws the value biases as
// nn.Linear's U(+-1/sqrt(d)) from a stream of their own, so every other parameter keeps its bits. Draws
// in visitParams order; the rule reads each parameter's declared role (core/param.hpp ParamRole), not its name.
//
// Tied head: the head's matrix is refreshed from E before every forward and its gradient is folded into
// E's after backward (a V x d copy per step), so the head is one Linear for both choices. Decoding
// (nn/models/lm_decoder.hpp) reads E itself through the head's product code instead: the same bits.
// One forward: forward and forwardInference are one run() in two modes; the input expansion and the
// readout are chosen in one place each (input(), readout()), which the decoding step (stepInput,
// stepOutput: the interface LmDecoder reads) uses too.
// Parameter names: embed.weight, expand.weight (EC), blocks.<l>.* (nn/blocks/delta_transformer_block.hpp),
// readout.* (dv > 1), norm.weight, head.weight (untied only).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/gradients_ready.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_batch.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/forward_mode.hpp"
#include "ddl/nn/blocks/compressor.hpp"
#include "ddl/nn/models/delta_lm_config.hpp"
#include "ddl/nn/blocks/delta_transformer_block.hpp"
#include "ddl/nn/layers/embedding.hpp"
#include "ddl/nn/blocks/expansion.hpp"
#include "ddl/nn/layers/init.hpp"
#include "ddl/nn/layers/linear.hpp"
#include "ddl/nn/layers/rms_norm.hpp"
#include "ddl/nn/layers/state_conv.hpp"
#include "ddl/nn/blocks/token_compressor.hpp"
#include "ddl/nn/models/lm_decoder.hpp"

namespace ddl {

template <class S>
class DeltaLM {
 public:
  explicit DeltaLM(const DeltaLMConfig& config, std::uint64_t seed = 0);

  // Re-initialises every parameter as a new model of this configuration and seed has it and clears the
  // gradients (core/param.hpp).
  void init(std::uint64_t seed) { reinitialize(*this, seed); }

  // What backward reads of the last forward, N = B*T.
  struct Activations {
    std::vector<MatX<S>> states;  // (d, dv*N): states[l] the input of block l, back() the last output
                                  // (forwardInference: two, used in turn)
    MatX<S> x;    // (d, N) the embedding (dv > 1; for dv = 1 it is states[0])
    MatX<S> xin;  // (d, N) the readout of the last state (dv > 1)
    MatX<S> z;    // (d, N) the final norm's output; the head keeps a view of it
  };

  // batch: B sequences of T <= context ids -> logits: (vocab, B*T). Every id is checked first (an id
  // outside [0, vocab) throws ValueError naming its position). Keeps a copy of the ids and the
  // Activations backward reads.
  void forward(const TokenBatch& batch, MatX<S>& logits);

  // Same logits as forward, bit for bit; writes none of the caches backward reads.
  void forwardInference(const TokenBatch& batch, MatX<S>& logits);

  // dLogits: (vocab, B*T) of the last forward -> every parameter's gradient accumulates.
  void backward(const MatX<S>& dLogits);

  // From now on backward reports final gradients (core/gradients_ready.hpp), in visitParams indices:
  // readout, norm and head first, then block l after its backward (the last block first), embed and
  // expand at the end (the tied head adds to embed's). An empty f stops the reports.
  void setGradientsReady(GradientsReady f);

  // Samples n tokens after prompt with a decoder of its own (LmDecoder::generate, nn/models/lm_decoder.hpp)
  // and returns them (prompt not included). Reads the model only: threads may generate from one model
  // at once.
  std::vector<int> generate(const std::vector<int>& prompt, Index n, double temperature, Index topK,
                            std::uint64_t seed) const;
  // The same with named options (SampleOptions, nn/models/lm_decoder.hpp).
  std::vector<int> generate(const std::vector<int>& prompt, Index n, const SampleOptions& options = SampleOptions()) const;

  // One position of decoding, reading the model only (LmDecoder, with the blocks' forwardStep between
  // the two steps). StepState holds what the input and the output write (nn/models/lm_decoder.hpp).
  using StepState = LmStepState<S>;
  // Empties st's windows (EC, TC) for a new sequence.
  void startStep(StepState& st) const {
    if (m_ec) m_convExpand->startStep(st.expand);
    if (m_overTokens) m_tcReadout->startStep(st.readout);
  }
  // id in [0, vocab) at the next position -> X0: (d, dv) its state before block 0.
  void stepInput(int id, StepState& st, MatX<S>& X0) const;
  // X: (d, dv) the last block's output at that position -> logits: (vocab, 1), the bits of the head.
  void stepOutput(const MatX<S>& X, StepState& st, MatX<S>& logits) const;

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    m_embed.visitParams(joinName(prefix, "embed"), f);
    if (m_ec) m_convExpand->visitParams(joinName(prefix, "expand"), f);
    for (std::size_t i = 0; i < m_blocks.size(); ++i)
      m_blocks[i].visitParams(joinName(prefix, "blocks." + std::to_string(i)), f);
    if (m_overTokens)
      m_tcReadout->visitParams(joinName(prefix, "readout"), f);
    else if (m_cfg.dv > 1)
      m_readout->visitParams(joinName(prefix, "readout"), f);
    m_norm.visitParams(joinName(prefix, "norm"), f);
    if (!m_cfg.tiedHead) m_head.visitParams(joinName(prefix, "head"), f);
  }

  const DeltaLMConfig& config() const { return m_cfg; }
  Index vocabulary() const { return m_cfg.vocab; }
  const std::vector<DeltaTransformerBlock<S>>& blocks() const { return m_blocks; }
  // States of the last forward: states()[l] is the input of block l, back() the last block's output.
  const std::vector<MatX<S>>& states() const { return m_acts.states; }

  // The Delta sublayers, two per block (the gate audit, diag/gated_sublayers.hpp): sublayer 2l is the
  // attention of block l, 2l + 1 its SwiGLU. Input and output are the states of the last forward
  // around that sublayer, (d, dv*N): states()[l] -> middle() -> states()[l + 1].
  std::size_t sublayerCount() const { return 2 * m_blocks.size(); }
  const DeltaResidual<S>& sublayerResidual(std::size_t i) const {
    const DeltaTransformerBlock<S>& b = m_blocks[checkedSublayer(i) / 2];
    return i % 2 == 0 ? b.attentionResidual() : b.mlpResidual();
  }
  const MatX<S>& sublayerInput(std::size_t i) const {
    const std::size_t l = checkedSublayer(i) / 2;
    return i % 2 == 0 ? m_acts.states[l] : m_blocks[l].middle();
  }
  const MatX<S>& sublayerOutput(std::size_t i) const {
    const std::size_t l = checkedSublayer(i) / 2;
    return i % 2 == 0 ? m_blocks[l].middle() : m_acts.states[l + 1];
  }
  Index sublayerBlock(std::size_t i) const { return static_cast<Index>(checkedSublayer(i) / 2); }
  Index sublayerStage(std::size_t i) const { return static_cast<Index>(checkedSublayer(i) % 2); }  // 0 attn, 1 mlp
  // "block <l> attn" or "block <l> mlp".
  std::string sublayerLabel(std::size_t i) const {
    return "block " + std::to_string(sublayerBlock(i)) + (i % 2 == 0 ? " attn" : " mlp");
  }

 private:
  std::size_t checkedSublayer(std::size_t i) const {
    require(i < sublayerCount(), "ddl::DeltaLM::sublayer", "sublayer ", i, " of ", sublayerCount(),
            " (2 per block; accepted: 0 .. ", sublayerCount(), " - 1)");
    return i;
  }

  TokenLayout checkBatch(const char* fn, const TokenBatch& batch) const {
    batch.check(fn);
    require(batch.length() <= m_cfg.context, fn, "sequence length T = ", batch.length(), " exceeds the context ",
            m_cfg.context, " (accepted: 1 .. ", m_cfg.context, ")");
    require(batch.sequences() >= 1, fn, "a token batch needs B >= 1 sequences, got ", batch.sequences());
    return batch.layout;
  }

  // Train keeps what backward reads (the modules' forward); Inference keeps nothing.
  using Mode = ForwardMode;  // nn/layers/forward_mode.hpp

  // The one forward of forward and forwardInference.
  void run(const char* fn, const TokenBatch& batch, MatX<S>& logits, Activations& acts, Mode mode);

  // The input, the one place that picks dv = 1 (X0 = x) / repeat / EC: embed(x) writes the embedding,
  // repeat(x, X0) and ec(x, X0) expand it (a path's calls of m_expand, m_convExpand). x, X0 as Activations.
  template <class Embed, class Repeat, class Ec>
  void input(MatX<S>& x, MatX<S>& X0, Embed&& embed, Repeat&& repeat, Ec&& ec) const {
    if (m_cfg.dv == 1) {
      embed(X0);
      return;
    }
    embed(x);
    if (m_ec)
      ec(x, X0);
    else
      repeat(x, X0);
  }

  // The readout, the one place that picks dv = 1 (none) / CC / TC: cc(X, xin) or tc(X, xin) reads the
  // last state X, norm(in, z) is the final norm (a path's calls of m_readout, m_tcReadout, m_norm).
  template <class Cc, class Tc, class Norm>
  void readout(const MatX<S>& X, MatX<S>& xin, MatX<S>& z, Cc&& cc, Tc&& tc, Norm&& norm) const {
    if (m_cfg.dv == 1) {
      norm(X, z);
      return;
    }
    if (m_overTokens)
      tc(X, xin);
    else
      cc(X, xin);
    norm(xin, z);
  }

  // The blocks run one after another and share one set of scratch (docs/decisions.md, "Scratch shared
  // between blocks"): it moves to block i before that block runs, in any order and mode.
  void moveScratchTo(std::size_t i) {
    if (i == m_scratchHolder) return;
    m_blocks[m_scratchHolder].swapScratch(m_blocks[i]);
    m_scratchHolder = i;
  }

  void refreshTiedHead() {
    if (m_cfg.tiedHead) m_head.weight().value = m_embed.weight().value;  // same shape: no allocation
  }

  // docs/spec.md §8's initialisation (see the header comment).
  void initialize(std::uint64_t seed) {
    Rng moduleRng(seed ^ 0x9e3779b97f4a7c15ULL);  // the modules' own starts; the matrices are redrawn below
    for (auto& b : m_blocks) b.init(moduleRng);
    Rng rng(seed);
    const double std2d = m_cfg.hiddenInitStdFactor / std::sqrt(static_cast<double>(m_cfg.d));
    const double stdOut = m_cfg.depth > 0 ? std2d / std::sqrt(static_cast<double>(m_cfg.depth)) : std2d;
    visitParams("", [&](const std::string&, Param<S>& p) {
      switch (p.role) {
        case ParamRole::Embedding: fillNormal(p.value, rng, 0.0, m_cfg.embeddingInitStd); break;
        case ParamRole::KeepsStart: break;  // EC keeps its copy of the current token
        case ParamRole::ResidualOutput: fillNormal(p.value, rng, 0.0, stdOut); break;
        case ParamRole::Default:
          if (p.shape.size() >= 2) fillNormal(p.value, rng, 0.0, std2d);  // gains and biases keep their start
          break;
      }
    });
    if (m_cfg.init == LmInit::Authors) {  // a stream of its own: every other parameter keeps ddl's bits
      Rng biasRng(seed ^ 0x5851f42d4c957f2dULL);
      for (auto& b : m_blocks) b.initValueBiasesAsLinear(biasRng);
    }
    refreshTiedHead();
  }

  DeltaLMConfig m_cfg;
  bool m_ec, m_overTokens;  // EC expansion; TC compressors (both dv > 1)
  Rng m_initRng;  // consumed by the embedding's constructor; initialize() redraws everything
  Embedding<S> m_embed;
  Expansion<S> m_expand;          // repetition (no parameters)
  std::optional<ConvExpansion<S>> m_convExpand;  // EC; each variant's module exists only in that variant
  std::vector<DeltaTransformerBlock<S>> m_blocks;
  std::size_t m_scratchHolder = 0;  // the block holding the blocks' shared scratch
  std::optional<Compressor<S>> m_readout;         // CC
  std::optional<TokenCompressor<S>> m_tcReadout;  // TC
  RmsNorm<S> m_norm;
  Linear<S> m_head;
  TokenLayout m_layout;
  bool m_hasForward = false;
  Activations m_acts;   // of the last forward
  Activations m_infer;  // of forwardInference
  MatX<S> m_dz, m_dA, m_dB, m_dx;
  GradientsReady m_gradientsReady;         // empty: no reports
  std::vector<std::size_t> m_blockParams;  // walk index of block l's first parameter; back(): the tail's
  std::size_t m_walkParams = 0;            // parameters in the walk
};

template <class S>
DeltaLM<S>::DeltaLM(const DeltaLMConfig& config, std::uint64_t seed)
    : m_cfg(validated(config)), m_ec(config.dv > 1 && config.learnedExpansion),
      m_overTokens(config.dv > 1 && config.stateCompressor == StateCompressorKind::OverTokens),
      m_embed(config.vocab, config.d, m_initRng), m_expand(config.d, config.dv, false),
      m_norm(config.d, config.finalNormEps), m_head(config.d, config.vocab, /*bias=*/false) {
  if (m_ec) m_convExpand.emplace(config.d, config.dv, config.ecKernel());
  if (m_overTokens)
    m_tcReadout.emplace(config.d, config.dv, config.convKernel, config.block.compressorReadInit);
  else if (config.dv > 1)
    m_readout.emplace(config.d, config.dv, config.block.compressor, config.block.compressorKernel,
                      config.block.compressorReadInit);
  m_blocks.reserve(static_cast<std::size_t>(config.depth));
  for (Index i = 0; i < config.depth; ++i) m_blocks.emplace_back(config.blockConfig());
  m_acts.states.resize(static_cast<std::size_t>(config.depth) + 1);
  m_infer.states.resize(2);
  initialize(seed);
}

template <class S>
void DeltaLM<S>::forward(const TokenBatch& batch, MatX<S>& logits) {
  run("ddl::DeltaLM::forward", batch, logits, m_acts, Mode::Train);
}

template <class S>
void DeltaLM<S>::forwardInference(const TokenBatch& batch, MatX<S>& logits) {
  run("ddl::DeltaLM::forwardInference", batch, logits, m_infer, Mode::Inference);
}

template <class S>
std::vector<int> DeltaLM<S>::generate(const std::vector<int>& prompt, Index n, double temperature, Index topK,
                                      std::uint64_t seed) const {
  return LmDecoder<S>(*this).generate(prompt, n, temperature, topK, seed);
}

template <class S>
std::vector<int> DeltaLM<S>::generate(const std::vector<int>& prompt, Index n, const SampleOptions& options) const {
  return LmDecoder<S>(*this).generate(prompt, n, options);
}

template <class S>
void DeltaLM<S>::run(const char* fn, const TokenBatch& batch, MatX<S>& logits, Activations& a, Mode mode) {
  const TokenLayout layout = checkBatch(fn, batch);
  const bool train = mode == Mode::Train;
  const auto state = [&](std::size_t i) -> MatX<S>& { return a.states[train ? i : i % 2]; };
  input(
      a.x, state(0), [&](MatX<S>& x) { forwardAs(mode, m_embed, batch.ids, x); },
      [&](const MatX<S>& x, MatX<S>& X0) { forwardAs(mode, m_expand, x, X0); },
      [&](const MatX<S>& x, MatX<S>& X0) { forwardAs(mode, *m_convExpand, x, layout, X0); });
  for (std::size_t i = 0; i < m_blocks.size(); ++i) {
    moveScratchTo(i);
    forwardAs(mode, m_blocks[i], state(i), layout, state(i + 1));
  }
  readout(
      state(m_blocks.size()), a.xin, a.z, [&](const MatX<S>& X, MatX<S>& xin) { forwardAs(mode, *m_readout, X, xin); },
      [&](const MatX<S>& X, MatX<S>& xin) { forwardAs(mode, *m_tcReadout, X, layout, xin); },
      [&](const MatX<S>& in, MatX<S>& z) { forwardAs(mode, m_norm, in, z); });
  refreshTiedHead();
  forwardAs(mode, m_head, a.z, logits);
  if (!train) return;
  m_layout = layout;
  m_hasForward = true;
}

template <class S>
void DeltaLM<S>::stepInput(int id, StepState& st, MatX<S>& X0) const {
  require(id >= 0 && id < m_cfg.vocab, "ddl::DeltaLM::stepInput", "id ", id, " is outside [0, ", m_cfg.vocab, ")");
  st.id.assign(1, id);
  input(
      st.x, X0, [&](MatX<S>& x) { m_embed.forwardInference(st.id, x); },
      [&](const MatX<S>& x, MatX<S>& X) { m_expand.forwardInference(x, X); },
      [&](const MatX<S>& x, MatX<S>& X) { m_convExpand->forwardStep(x, st.expand, X); });
}

template <class S>
void DeltaLM<S>::stepOutput(const MatX<S>& X, StepState& st, MatX<S>& logits) const {
  readout(
      X, st.xin, st.z, [&](const MatX<S>& in, MatX<S>& xin) { m_readout->forwardInference(in, xin, st.cc); },
      [&](const MatX<S>& in, MatX<S>& xin) { m_tcReadout->forwardStep(in, st.readout, xin); },
      [&](const MatX<S>& in, MatX<S>& z) { m_norm.forwardInference(in, z); });
  if (m_cfg.tiedHead)  // the head's product code on E itself: the bits of the refreshed head
    Linear<S>::apply(m_embed.weight().value, nullptr, st.z, logits, st.head);
  else
    m_head.forwardInference(st.z, logits, st.head);
}

template <class S>
void DeltaLM<S>::setGradientsReady(GradientsReady f) {
  m_blockParams.clear();
  m_walkParams = 0;
  const auto count = [this](const std::string&, Param<S>&) { ++m_walkParams; };
  m_embed.visitParams("embed", count);
  if (m_ec) m_convExpand->visitParams("expand", count);
  for (std::size_t i = 0; i < m_blocks.size(); ++i) {
    m_blockParams.push_back(m_walkParams);
    m_blocks[i].visitParams("block", count);
  }
  m_blockParams.push_back(m_walkParams);
  std::size_t total = 0;
  visitParams("", [&total](const std::string&, Param<S>&) { ++total; });
  m_walkParams = total;
  m_gradientsReady = std::move(f);
}

template <class S>
void DeltaLM<S>::backward(const MatX<S>& dLogits) {
  const char* fn = "ddl::DeltaLM::backward";
  if (!m_hasForward) throw Error(message(fn, "called before forward"));
  checkShape(fn, "dLogits", dLogits, m_cfg.vocab, m_layout.tokens());
  m_head.backward(dLogits, m_dz);
  if (m_cfg.tiedHead) {  // fold the head's share into E (the head is E's copy)
    m_embed.weight().grad += m_head.weight().grad;
    m_head.weight().grad.setZero();
  }
  if (m_cfg.dv == 1) {
    m_norm.backward(m_dz, m_dA);
  } else {
    m_norm.backward(m_dz, m_dz);
    if (m_overTokens)
      m_tcReadout->backward(m_dz, m_dA);
    else
      m_readout->backward(m_dz, m_dA);
  }
  const bool report = static_cast<bool>(m_gradientsReady);
  if (report) m_gradientsReady(m_blockParams.back(), m_walkParams);  // readout, norm, head
  for (std::size_t i = m_blocks.size(); i-- > 0;) {
    moveScratchTo(i);
    m_blocks[i].backward(m_dA, m_dB);
    m_dA.swap(m_dB);
    if (report) m_gradientsReady(m_blockParams[i], m_blockParams[i + 1]);
  }
  if (m_cfg.dv == 1) {
    m_embed.backward(m_dA);
  } else {
    if (m_ec)
      m_convExpand->backward(m_dA, m_dx);
    else
      m_expand.backward(m_dA, m_dx);
    m_embed.backward(m_dx);
  }
  if (report) m_gradientsReady(0, m_blockParams.front());  // embed (with the tied head's share), expand
}

#if DDL_EXTERN_TEMPLATES  // compiled once in the library ddl::compiled (docs/building.md)
extern template class DeltaLM<float>;
extern template class DeltaLM<double>;
#endif

}  // namespace ddl
