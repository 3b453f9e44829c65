#pragma once
// ddl/nn/models/lm_decoder.hpp: LmDecoder, incremental decoding and sampling of one sequence from a
// DeltaLM (docs/spec.md §8, "Generation"), outside the model.
//
// The decoder holds a const DeltaLM& and owns everything decoding writes: per block the attention's
// keys and values of the positions so far (and, for TC, the last K states each compressor read), the
// model's StepState (EC's and the TC readout's last K inputs, one position's scratch, the head's product
// workspace) and the sampling scratch. It reads the model through its public interface only: config(),
// blocks() and the step of the input and of the output (DeltaLM::stepInput, stepOutput). The model is
// only read, so several decoders (one per thread) may decode from one model at once; the model must
// outlive its decoders and keep its weights while they decode.
//
// A position costs O(t d) attention plus the per-token layers: step(id) runs the modules' step
// arithmetic and gives that position's column of DeltaLM::forwardInference over the sequence so far, to
// rounding. generate restarts from the newest half of the context when the context is full (refilling
// that half costs one pass over context/2 positions every context/2 tokens), so every token is
// predicted from between context/2 and context tokens before it.
//
// This header is included by delta_lm.hpp (a decoder needs DeltaLM's definition: include that one).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/compressor.hpp"
#include "ddl/nn/blocks/delta_transformer_block.hpp"
#include "ddl/nn/blocks/token_compressor.hpp"
#include "ddl/nn/layers/linear.hpp"
#include "ddl/nn/layers/state_conv.hpp"

namespace ddl {

template <class S>
class DeltaLM;

// How generate draws each token, as named fields (C++17: set them one by one).
struct SampleOptions {
  double temperature = 1.0;  // softmax(logits / temperature); finite and > 0
  Index topK = 0;            // draw among the topK largest logits; 0 means all (the vocabulary)
  std::uint64_t seed = 0;    // Rng(seed): the same options give the same tokens
};

// What one position of decoding writes besides the blocks (DeltaLM::StepState: DeltaLM::stepInput and
// stepOutput write it, reading the model only).
template <class S>
struct LmStepState {
  typename ConvExpansion<S>::StepCache expand;     // EC's last K embeddings
  typename TokenCompressor<S>::StepCache readout;  // TC's last K states
  typename Compressor<S>::Workspace cc;            // the CC readout's
  typename Linear<S>::Workspace head;
  std::vector<int> id;
  MatX<S> x, xin, z;  // one position: embedding, readout, final norm
};

template <class S>
class LmDecoder {
 public:
  // Reads model until destroyed; allocates nothing until start.
  explicit LmDecoder(const DeltaLM<S>& model) : m_model(model) {}

  // Empties the decoder for up to `capacity` positions (1 .. context) and takes the model's current
  // weights (allocates the first time; restarts with the same capacity allocate nothing).
  void start(Index capacity);

  // Appends token id at position length() -> logits (vocab, 1) of the next token, equal (to rounding)
  // to that position's column of forwardInference over the sequence so far.
  void step(int id, MatX<S>& logits);

  // Samples n tokens after prompt and returns them (prompt not included). Each token is drawn from
  // softmax(logits / temperature) restricted to the topK largest logits, with Rng(seed): the same
  // arguments give the same text. Throws ValueError for an empty prompt or one longer than the
  // context, an id outside [0, vocab), n < 0, a temperature that is not finite and > 0, or topK
  // outside [1, vocab], before anything is computed.
  std::vector<int> generate(const std::vector<int>& prompt, Index n, double temperature, Index topK,
                            std::uint64_t seed);
  // The same with named options: generate(prompt, n, temperature, topK or vocab, seed).
  std::vector<int> generate(const std::vector<int>& prompt, Index n, const SampleOptions& options = SampleOptions());

  Index length() const { return m_length; }      // positions decoded since start
  Index capacity() const { return m_capacity; }  // 0 before start

 private:
  // One draw from softmax(z / temperature) over the topK largest z (ties: the lower id first), in double.
  int sample(const Eigen::Ref<const VecX<S>>& z, double temperature, Index topK, Rng& rng);

  const DeltaLM<S>& m_model;
  std::vector<typename DeltaTransformerBlock<S>::DecodeState> m_blocks;
  LmStepState<S> m_step;                  // the input's and the output's
  Index m_length = 0, m_capacity = 0;
  MatX<S> m_a, m_b;                       // one position's states, in turn
  MatX<S> m_logits;                       // generate's
  std::vector<int> m_order;                          // sampling scratch
  std::vector<double> m_weights;
};

template <class S>
void LmDecoder<S>::start(Index capacity) {
  const Index context = m_model.config().context;
  require(capacity >= 1 && capacity <= context, "ddl::LmDecoder::start", "capacity must be in [1, ", context,
          "] (the context), got ", capacity);
  const auto& blocks = m_model.blocks();
  m_blocks.resize(blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i].startDecode(m_blocks[i], capacity);
  m_model.startStep(m_step);
  m_length = 0;
  m_capacity = capacity;
}

template <class S>
void LmDecoder<S>::step(int id, MatX<S>& logits) {
  const char* fn = "ddl::LmDecoder::step";
  require(m_capacity > 0, fn, "call start first");
  require(m_length < m_capacity, fn, "the decoder holds ", m_length, " of its capacity of ", m_capacity,
          " positions (start again)");
  const Index V = m_model.config().vocab;
  require(id >= 0 && id < V, fn, "id ", id, " is outside [0, ", V, ")");
  MatX<S>* cur = &m_a;
  MatX<S>* next = &m_b;
  m_model.stepInput(id, m_step, m_a);
  const auto& blocks = m_model.blocks();
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    blocks[i].forwardStep(*cur, m_blocks[i], *next);
    std::swap(cur, next);
  }
  m_model.stepOutput(*cur, m_step, logits);
  ++m_length;
}

template <class S>
std::vector<int> LmDecoder<S>::generate(const std::vector<int>& prompt, Index n, const SampleOptions& options) {
  const Index V = m_model.config().vocab;
  return generate(prompt, n, options.temperature, options.topK == 0 ? V : options.topK, options.seed);
}

template <class S>
std::vector<int> LmDecoder<S>::generate(const std::vector<int>& prompt, Index n, double temperature, Index topK,
                                        std::uint64_t seed) {
  const char* fn = "ddl::LmDecoder::generate";
  const Index P = static_cast<Index>(prompt.size()), context = m_model.config().context,
              V = m_model.config().vocab;
  require(P >= 1, fn, "the prompt is empty (accepted: 1 .. ", context, " ids)");
  require(P <= context, fn, "the prompt has ", P, " ids, more than the context ", context, " (accepted: 1 .. ",
          context, " ids)");
  for (Index i = 0; i < P; ++i) {
    const int id = prompt[static_cast<std::size_t>(i)];
    require(id >= 0 && id < V, fn, "prompt id ", id, " at position ", i, " is outside [0, ", V, ")");
  }
  require(n >= 0, fn, "n must be >= 0, got ", n);
  require(std::isfinite(temperature) && temperature > 0, fn, "temperature must be finite and > 0, got ", temperature);
  require(topK >= 1 && topK <= V, fn, "topK must be in [1, ", V, "], got ", topK);
  Rng rng(seed);
  std::vector<int> window(prompt), out;  // window: the tokens the decoder holds
  out.reserve(static_cast<std::size_t>(n));
  window.reserve(static_cast<std::size_t>(context));
  start(context);
  for (int id : window) step(id, m_logits);
  for (Index i = 0; i < n; ++i) {
    const int next = sample(m_logits.col(0), temperature, topK, rng);
    out.push_back(next);
    if (i + 1 == n) break;
    if (m_length == context) {  // full: restart from the newest half of the context
      window.erase(window.begin(), window.end() - context / 2);
      start(context);
      for (int id : window) step(id, m_logits);
    }
    window.push_back(next);
    step(next, m_logits);
  }
  return out;
}

template <class S>
int LmDecoder<S>::sample(const Eigen::Ref<const VecX<S>>& z, double temperature, Index topK, Rng& rng) {
  const Index V = z.size();
  const auto at = [](Index i) { return static_cast<std::size_t>(i); };
  m_order.resize(at(V));
  for (Index i = 0; i < V; ++i) m_order[at(i)] = static_cast<int>(i);
  const auto larger = [&z](int a, int b) { return z(a) > z(b) || (z(a) == z(b) && a < b); };
  std::partial_sort(m_order.begin(), m_order.begin() + topK, m_order.end(), larger);
  const double top = static_cast<double>(z(m_order[0]));
  double total = 0.0;
  m_weights.resize(at(topK));
  for (Index i = 0; i < topK; ++i) {
    m_weights[at(i)] = std::exp((static_cast<double>(z(m_order[at(i)])) - top) / temperature);
    total += m_weights[at(i)];
  }
  double u = rng.uniform() * total;
  for (Index i = 0; i + 1 < topK; ++i) {
    u -= m_weights[at(i)];
    if (u < 0) return m_order[at(i)];
  }
  return m_order[at(topK - 1)];
}

#if DDL_EXTERN_TEMPLATES  // compiled once in the library ddl::compiled (docs/building.md)
extern template class LmDecoder<float>;
extern template class LmDecoder<double>;
#endif

}  // namespace ddl
