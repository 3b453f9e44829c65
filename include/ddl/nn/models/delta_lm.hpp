#pragma once
// ddl/nn/models/delta_lm.hpp: DeltaLM, the causal language model of the paper (docs/spec.md §8):
//   ids (B*T) -> embedding x (d, N) -> X0 = x (dv = 1) | repeat | EC (dv > 1)
//   -> depth x DeltaTransformerBlock -> readout compressor (dv > 1) -> RMSNorm -> head -> logits (V, N)
// N = B*T, column b*T + t (core/token_batch.hpp). The head is tied to the embedding (logits = E y) or a
// separate head.weight [V, d]. Configuration and variants: nn/models/delta_lm_config.hpp.
//
// Initialisation (the authors' code, docs/spec.md §8), from one seed: every parameter with two or more
// dimensions ~ N(0, (0.5/sqrt(d))²), the two output projections of each block (attn.o, mlp.fc2)
// ~ N(0, (0.5/sqrt(d)/sqrt(L))²), the embedding ~ N(0, 0.02²); one-dimensional parameters keep their
// module's start (gate bias logit(beta0/2), value bias 0, read vectors 1/dv, gains 1, the CC kernel a
// centred delta) and EC starts as the copy of the current token. Draws in visitParams order; the
// rule reads each parameter's declared role (core/param.hpp ParamRole), not its name.
//
// Tied head: the head's matrix is refreshed from E before every forward and its gradient is folded into
// E's after backward (a V x d copy per step), so the head is one Linear for both choices.
// Parameter names: embed.weight, expand.weight (EC), blocks.<l>.* (nn/blocks/delta_transformer_block.hpp),
// readout.* (dv > 1), norm.weight, head.weight (untied only).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_batch.hpp"
#include "ddl/core/types.hpp"
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

namespace ddl {

// How DeltaLM::generate draws each token, as named fields (C++17: set them one by one).
struct SampleOptions {
  double temperature = 1.0;  // softmax(logits / temperature); finite and > 0
  Index topK = 0;            // draw among the topK largest logits; 0 means all (the vocabulary)
  std::uint64_t seed = 0;    // Rng(seed): the same options give the same tokens
};

template <class S>
class DeltaLM {
 public:
  explicit DeltaLM(const DeltaLMConfig& config, std::uint64_t seed = 0);

  // Re-initialises every parameter as a new model of this configuration and seed and clears the gradients.
  void init(std::uint64_t seed);

  // batch: B sequences of T <= context ids -> logits: (vocab, B*T). Every id is checked first (an id
  // outside [0, vocab) throws ValueError naming its position). Keeps a copy of the ids and the
  // activations backward reads.
  void forward(const TokenBatch& batch, MatX<S>& logits);

  // Same logits as forward, bit for bit; writes none of the caches backward reads (two states used in turn).
  void forwardInference(const TokenBatch& batch, MatX<S>& logits);

  // dLogits: (vocab, B*T) of the last forward -> every parameter's gradient accumulates.
  void backward(const MatX<S>& dLogits);

  // Samples n tokens after prompt and returns them (prompt not included). Each token is drawn from
  // softmax(logits / temperature) restricted to the topK largest logits, with Rng(seed): the same
  // arguments give the same text. Decoding is incremental (startDecode / decodeStep); when the context
  // is full it restarts from the newest half of it, so every token is predicted from between
  // context/2 and context tokens before it. Throws ValueError
  // for an empty prompt or one longer than the context, an id outside [0, vocab), n < 0, a temperature
  // that is not finite and > 0, or topK outside [1, vocab], before anything is computed.
  std::vector<int> generate(const std::vector<int>& prompt, Index n, double temperature, Index topK, std::uint64_t seed);
  // The same with named options: generate(prompt, n, options.temperature, options.topK or vocab, options.seed).
  std::vector<int> generate(const std::vector<int>& prompt, Index n, const SampleOptions& options = SampleOptions()) {
    return generate(prompt, n, options.temperature, options.topK == 0 ? m_cfg.vocab : options.topK, options.seed);
  }

  // Incremental decoding of one sequence (docs/spec.md §8, "Generation"): per block the attention's
  // keys and values of the positions so far, so a new position costs O(t d) attention and the
  // per-token layers instead of a forward over the whole prefix.
  struct DecodeState {
    std::vector<typename DeltaTransformerBlock<S>::DecodeState> blocks;
    typename ConvExpansion<S>::StepCache expand;      // EC's last K embeddings
    typename TokenCompressor<S>::StepCache readout;   // TC's last K states
    Index length = 0, capacity = 0;
  };
  // Empties state for up to `capacity` positions (1 .. context). The weights must not change until
  // the last decodeStep of this state.
  void startDecode(DecodeState& state, Index capacity);
  // Appends token id at position state.length -> logits (vocab, 1) of the next token, equal (to
  // rounding) to that position's column of forwardInference over the sequence so far.
  void decodeStep(int id, DecodeState& state, MatX<S>& logits);

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    m_embed.visitParams(joinName(prefix, "embed"), f);
    if (m_ec) m_convExpand.visitParams(joinName(prefix, "expand"), f);
    for (std::size_t i = 0; i < m_blocks.size(); ++i)
      m_blocks[i].visitParams(joinName(prefix, "blocks." + std::to_string(i)), f);
    if (m_overTokens)
      m_tcReadout.visitParams(joinName(prefix, "readout"), f);
    else if (m_cfg.dv > 1)
      m_readout.visitParams(joinName(prefix, "readout"), f);
    m_norm.visitParams(joinName(prefix, "norm"), f);
    if (!m_cfg.tiedHead) m_head.visitParams(joinName(prefix, "head"), f);
  }

  const DeltaLMConfig& config() const { return m_cfg; }
  Index vocabulary() const { return m_cfg.vocab; }
  const std::vector<DeltaTransformerBlock<S>>& blocks() const { return m_blocks; }
  // States of the last forward: states()[l] is the input of block l, back() the last block's output.
  const std::vector<MatX<S>>& states() const { return m_states; }

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
    return i % 2 == 0 ? m_states[l] : m_blocks[l].middle();
  }
  const MatX<S>& sublayerOutput(std::size_t i) const {
    const std::size_t l = checkedSublayer(i) / 2;
    return i % 2 == 0 ? m_blocks[l].middle() : m_states[l + 1];
  }
  Index sublayerBlock(std::size_t i) const { return static_cast<Index>(checkedSublayer(i) / 2); }
  Index sublayerStage(std::size_t i) const { return static_cast<Index>(checkedSublayer(i) % 2); }  // 0 attn, 1 mlp
  // "block <l> attn" or "block <l> mlp".
  std::string sublayerLabel(std::size_t i) const {
    return "block " + std::to_string(sublayerBlock(i)) + (i % 2 == 0 ? " attn" : " mlp");
  }

 private:
  static const DeltaLMConfig& validated(const DeltaLMConfig& c) {
    c.validate();
    return c;
  }

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

  // One draw from softmax(z / temperature) over the topK largest z (ties: the lower id first), in double.
  int sampleToken(const Eigen::Ref<const VecX<S>>& z, double temperature, Index topK, Rng& rng) {
    const Index V = z.size();
    m_order.resize(static_cast<std::size_t>(V));
    for (Index i = 0; i < V; ++i) m_order[static_cast<std::size_t>(i)] = static_cast<int>(i);
    const auto larger = [&z](int a, int b) { return z(a) > z(b) || (z(a) == z(b) && a < b); };
    std::partial_sort(m_order.begin(), m_order.begin() + topK, m_order.end(), larger);
    const double top = static_cast<double>(z(m_order[0]));
    double total = 0.0;
    m_weights.resize(static_cast<std::size_t>(topK));
    for (Index i = 0; i < topK; ++i) {
      m_weights[static_cast<std::size_t>(i)] = std::exp((static_cast<double>(z(m_order[static_cast<std::size_t>(i)])) - top) / temperature);
      total += m_weights[static_cast<std::size_t>(i)];
    }
    double u = rng.uniform() * total;
    for (Index i = 0; i + 1 < topK; ++i) {
      u -= m_weights[static_cast<std::size_t>(i)];
      if (u < 0) return m_order[static_cast<std::size_t>(i)];
    }
    return m_order[static_cast<std::size_t>(topK - 1)];
  }

  void refreshTiedHead() {
    if (m_cfg.tiedHead) m_head.weight().value = m_embed.weight().value;  // same shape: no allocation
  }

  // docs/spec.md §8's initialisation (see the header comment).
  void initialize(std::uint64_t seed) {
    Rng moduleRng(seed ^ 0x9e3779b97f4a7c15ULL);  // the modules' own starts; the matrices are redrawn below
    for (auto& b : m_blocks) b.init(moduleRng);
    Rng rng(seed);
    const double std2d = 0.5 / std::sqrt(static_cast<double>(m_cfg.d));
    const double stdOut = m_cfg.depth > 0 ? std2d / std::sqrt(static_cast<double>(m_cfg.depth)) : std2d;
    visitParams("", [&](const std::string&, Param<S>& p) {
      switch (p.role) {
        case ParamRole::Embedding: fillNormal(p.value, rng, 0.0, 0.02); break;
        case ParamRole::KeepsStart: break;  // EC keeps its copy of the current token
        case ParamRole::ResidualOutput: fillNormal(p.value, rng, 0.0, stdOut); break;
        case ParamRole::Default:
          if (p.shape.size() >= 2) fillNormal(p.value, rng, 0.0, std2d);  // gains and biases keep their start
          break;
      }
    });
    refreshTiedHead();
  }

  DeltaLMConfig m_cfg;
  bool m_ec, m_overTokens;  // EC expansion; TC compressors (both dv > 1)
  Rng m_initRng;  // consumed by the embedding's constructor; initialize() redraws everything
  Embedding<S> m_embed;
  Expansion<S> m_expand;          // repetition (no parameters)
  ConvExpansion<S> m_convExpand;  // EC
  std::vector<DeltaTransformerBlock<S>> m_blocks;
  Compressor<S> m_readout;        // CC
  TokenCompressor<S> m_tcReadout; // TC
  RmsNorm<S> m_norm;
  Linear<S> m_head;
  TokenLayout m_layout;
  bool m_hasForward = false;
  std::vector<MatX<S>> m_states;  // m_states[l] is the input of block l; back() the last output
  MatX<S> m_x, m_xin, m_z;
  MatX<S> m_dz, m_dA, m_dB, m_dx;
  MatX<S> m_inferX, m_inferA, m_inferB, m_inferZ;
  std::vector<int> m_order;       // sampling scratch
  DecodeState m_decode;           // generate's
  std::vector<int> m_stepIds;
  MatX<S> m_stepX, m_stepA, m_stepB, m_stepZ, m_stepLogits;
  std::vector<double> m_weights;
};

template <class S>
DeltaLM<S>::DeltaLM(const DeltaLMConfig& config, std::uint64_t seed)
    : m_cfg(validated(config)), m_ec(config.dv > 1 && config.learnedExpansion),
      m_overTokens(config.dv > 1 && config.stateCompressor == StateCompressorKind::OverTokens),
      m_embed(config.vocab, config.d, m_initRng), m_expand(config.d, config.dv, false),
      m_convExpand(config.d, config.dv, config.convKernel),
      m_readout(config.d, config.dv, config.block.compressor, config.block.compressorKernel),
      m_tcReadout(config.d, config.dv, config.convKernel), m_norm(config.d, config.finalNormEps),
      m_head(config.d, config.vocab, /*bias=*/false) {
  m_blocks.reserve(static_cast<std::size_t>(config.depth));
  for (Index i = 0; i < config.depth; ++i) m_blocks.emplace_back(config.blockConfig());
  m_states.resize(static_cast<std::size_t>(config.depth) + 1);
  initialize(seed);
}

template <class S>
void DeltaLM<S>::init(std::uint64_t seed) {
  DeltaLM fresh(m_cfg, seed);
  assignParams(*this, fresh);
}

template <class S>
void DeltaLM<S>::forward(const TokenBatch& batch, MatX<S>& logits) {
  const TokenLayout layout = checkBatch("ddl::DeltaLM::forward", batch);
  m_layout = layout;
  if (m_cfg.dv == 1) {
    m_embed.forward(batch.ids, m_states[0]);
  } else {
    m_embed.forward(batch.ids, m_x);
    if (m_ec)
      m_convExpand.forward(m_x, layout, m_states[0]);
    else
      m_expand.forward(m_x, m_states[0]);
  }
  for (std::size_t i = 0; i < m_blocks.size(); ++i) m_blocks[i].forward(m_states[i], layout, m_states[i + 1]);
  const MatX<S>& last = m_states.back();
  if (m_cfg.dv == 1) {
    m_norm.forward(last, m_z);
  } else {
    if (m_overTokens)
      m_tcReadout.forward(last, layout, m_xin);
    else
      m_readout.forward(last, m_xin);
    m_norm.forward(m_xin, m_z);
  }
  refreshTiedHead();
  m_head.forward(m_z, logits);
  m_hasForward = true;
}

template <class S>
void DeltaLM<S>::forwardInference(const TokenBatch& batch, MatX<S>& logits) {
  const TokenLayout layout = checkBatch("ddl::DeltaLM::forwardInference", batch);
  MatX<S>* cur = &m_inferA;
  MatX<S>* next = &m_inferB;
  if (m_cfg.dv == 1) {
    m_embed.forwardInference(batch.ids, m_inferA);
  } else {
    m_embed.forwardInference(batch.ids, m_inferX);
    if (m_ec)
      m_convExpand.forwardInference(m_inferX, layout, m_inferA);
    else
      m_expand.forwardInference(m_inferX, m_inferA);
  }
  for (auto& block : m_blocks) {
    block.forwardInference(*cur, layout, *next);
    std::swap(cur, next);
  }
  if (m_cfg.dv == 1) {
    m_norm.forwardInference(*cur, m_inferZ);
  } else {
    if (m_overTokens)
      m_tcReadout.forwardInference(*cur, layout, m_inferZ);
    else
      m_readout.forwardInference(*cur, m_inferZ);
    m_norm.forwardInference(m_inferZ, m_inferZ);
  }
  refreshTiedHead();
  m_head.forwardInference(m_inferZ, logits);
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
      m_tcReadout.backward(m_dz, m_dA);
    else
      m_readout.backward(m_dz, m_dA);
  }
  for (std::size_t i = m_blocks.size(); i-- > 0;) {
    m_blocks[i].backward(m_dA, m_dB);
    m_dA.swap(m_dB);
  }
  if (m_cfg.dv == 1) {
    m_embed.backward(m_dA);
  } else {
    if (m_ec)
      m_convExpand.backward(m_dA, m_dx);
    else
      m_expand.backward(m_dA, m_dx);
    m_embed.backward(m_dx);
  }
}

template <class S>
std::vector<int> DeltaLM<S>::generate(const std::vector<int>& prompt, Index n, double temperature, Index topK,
                                      std::uint64_t seed) {
  const char* fn = "ddl::DeltaLM::generate";
  const Index P = static_cast<Index>(prompt.size());
  require(P >= 1, fn, "the prompt is empty (accepted: 1 .. ", m_cfg.context, " ids)");
  require(P <= m_cfg.context, fn, "the prompt has ", P, " ids, more than the context ", m_cfg.context,
          " (accepted: 1 .. ", m_cfg.context, " ids)");
  for (Index i = 0; i < P; ++i)
    require(prompt[static_cast<std::size_t>(i)] >= 0 && prompt[static_cast<std::size_t>(i)] < m_cfg.vocab, fn, "prompt id ",
            prompt[static_cast<std::size_t>(i)], " at position ", i, " is outside [0, ", m_cfg.vocab, ")");
  require(n >= 0, fn, "n must be >= 0, got ", n);
  require(std::isfinite(temperature) && temperature > 0, fn, "temperature must be finite and > 0, got ", temperature);
  require(topK >= 1 && topK <= m_cfg.vocab, fn, "topK must be in [1, ", m_cfg.vocab, "], got ", topK);
  Rng rng(seed);
  std::vector<int> window(prompt), out;  // window: the tokens the cache holds
  out.reserve(static_cast<std::size_t>(n));
  window.reserve(static_cast<std::size_t>(m_cfg.context));
  startDecode(m_decode, m_cfg.context);
  for (int id : window) decodeStep(id, m_decode, m_stepLogits);
  for (Index i = 0; i < n; ++i) {
    const int next = sampleToken(m_stepLogits.col(0), temperature, topK, rng);
    out.push_back(next);
    if (i + 1 == n) break;
    if (m_decode.length == m_cfg.context) {  // full: restart from the newest half of the context
      window.erase(window.begin(), window.end() - m_cfg.context / 2);
      startDecode(m_decode, m_cfg.context);
      for (int id : window) decodeStep(id, m_decode, m_stepLogits);
    }
    window.push_back(next);
    decodeStep(next, m_decode, m_stepLogits);
  }
  return out;
}

template <class S>
void DeltaLM<S>::startDecode(DecodeState& state, Index capacity) {
  require(capacity >= 1 && capacity <= m_cfg.context, "ddl::DeltaLM::startDecode", "capacity must be in [1, ",
          m_cfg.context, "] (the context), got ", capacity);
  state.blocks.resize(m_blocks.size());
  for (std::size_t i = 0; i < m_blocks.size(); ++i) m_blocks[i].startDecode(state.blocks[i], capacity);
  if (m_ec) m_convExpand.startStep(state.expand);
  if (m_overTokens) m_tcReadout.startStep(state.readout);
  state.length = 0;
  state.capacity = capacity;
  refreshTiedHead();
}

template <class S>
void DeltaLM<S>::decodeStep(int id, DecodeState& state, MatX<S>& logits) {
  const char* fn = "ddl::DeltaLM::decodeStep";
  require(state.capacity > 0 && state.blocks.size() == m_blocks.size(), fn, "call startDecode first");
  require(state.length < state.capacity, fn, "the decoding state holds ", state.length, " of its capacity of ",
          state.capacity, " positions (startDecode again)");
  require(id >= 0 && id < m_cfg.vocab, fn, "id ", id, " is outside [0, ", m_cfg.vocab, ")");
  m_stepIds.assign(1, id);
  MatX<S>* cur = &m_stepA;
  MatX<S>* next = &m_stepB;
  if (m_cfg.dv == 1) {
    m_embed.forwardInference(m_stepIds, m_stepA);
  } else {
    m_embed.forwardInference(m_stepIds, m_stepX);
    if (m_ec)
      m_convExpand.forwardStep(m_stepX, state.expand, m_stepA);
    else
      m_expand.forwardInference(m_stepX, m_stepA);
  }
  for (std::size_t i = 0; i < m_blocks.size(); ++i) {
    m_blocks[i].forwardStep(*cur, state.blocks[i], *next);
    std::swap(cur, next);
  }
  if (m_cfg.dv == 1) {
    m_norm.forwardInference(*cur, m_stepZ);
  } else {
    if (m_overTokens)
      m_tcReadout.forwardStep(*cur, state.readout, m_stepZ);
    else
      m_readout.forwardInference(*cur, m_stepZ);
    m_norm.forwardInference(m_stepZ, m_stepZ);
  }
  m_head.forwardInference(m_stepZ, logits);
  ++state.length;
}

#if DDL_EXTERN_TEMPLATES  // compiled once in the library ddl::compiled (docs/building.md)
extern template class DeltaLM<float>;
extern template class DeltaLM<double>;
#endif

}  // namespace ddl
