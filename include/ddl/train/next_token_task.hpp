#pragma once
// ddl/train/next_token_task.hpp: next-token prediction, the task of a language model in the training
// loop (the contract of train/task.hpp). The model's output is logits (vocab, B*T), the target the B*T
// ids one position later; the loss is the mean cross-entropy over all B*T positions (nats), accuracy
// the fraction of positions whose largest logit is the next id.
//
// Evaluation reads a held-out byte split in order: consecutive windows of T = the model's context
// tokens, window w predicting bytes w*T + 1 .. w*T + T from bytes w*T .. w*T + T - 1 (each from at most
// T - 1 bytes of its own window before it), batches of up to batchSize windows, the shorter last
// window on its own. So every byte after the first is predicted exactly once and the figure does not
// depend on the batch size; the sums run in double. Bits per byte = loss / ln 2 (bitsPerByte()).
//
// Tokens is the held-out data's type: a byte split (std::vector<std::uint8_t>, the default; the
// model's vocabulary must hold 256) or a set of token files (data/token_files.hpp, TokenFiles; the
// model's vocabulary must hold the set's). The loss of token data is in nats per token: bits per
// byte needs the bytes per token, which the files do not record.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/token_batch.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/token_files.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/train/train_step.hpp"

namespace ddl {

// Mean cross-entropy in nats -> bits per byte (per token of a byte-level model).
inline double bitsPerByte(double nats) { return nats / std::log(2.0); }

template <class S, class Tokens = std::vector<std::uint8_t>>
class NextTokenTask {
 public:
  using Scalar = S;
  using Target = std::vector<int>;
  using EvalData = Tokens;  // a held-out split of a byte corpus (data/text_corpus.hpp) or token files
  static constexpr bool kBytes = std::is_same_v<Tokens, std::vector<std::uint8_t>>;

  // Mean cross-entropy over the B*T positions; dLogits is its gradient.
  StepStats lossAndGradient(const MatX<S>& logits, const Target& next, MatX<S>& dLogits) {
    return detail::classificationLoss(m_loss, logits, next, dLogits);
  }

  template <class Model>
  EvalResult evaluate(Model& model, const EvalData& text, Index batchSize, MatX<S>& logits,
                      const EvalStop& stop = {}) {
    return evaluateWindows<false>(model, text, batchSize, logits, [] {}, stop);
  }
  template <class Model, class OnBatch, class = detail::NotEvalStop<OnBatch>>
  EvalResult evaluate(Model& model, const EvalData& text, Index batchSize, MatX<S>& logits, OnBatch&& onBatch,
                      const EvalStop& stop = {}) {
    return evaluateWindows<true>(model, text, batchSize, logits, onBatch, stop);
  }

  template <class Model>
  void checkEvalData(const Model& model, const EvalData& text, const char* fn) const {
    if constexpr (kBytes) {
      require(text.size() >= 2, fn, "held-out text needs at least 2 bytes (one to predict), got ", text.size());
      require(model.config().vocab >= 256, fn, "a byte corpus needs a vocabulary of 256, the model has ",
              model.config().vocab);
    } else {
      require(text.size() >= 2, fn, "held-out tokens need at least 2 (one to predict), got ", text.size());
      require(model.config().vocab >= text.vocabulary(), fn, "token files of vocabulary ", text.vocabulary(),
              " need a model of that vocabulary, the model has ", model.config().vocab);
    }
  }

 private:
  template <bool Observed, class Model, class OnBatch>
  EvalResult evaluateWindows(Model& model, const EvalData& text, Index batchSize, MatX<S>& logits, OnBatch&& onBatch,
                             const EvalStop& stop) {
    const char* fn = "ddl::NextTokenTask::evaluate";
    require(batchSize > 0, fn, "batchSize must be > 0, got ", batchSize);
    require(text.size() >= 2, fn, "held-out text needs at least 2 ", kBytes ? "bytes" : "tokens", ", got ", text.size());
    const auto T = static_cast<std::size_t>(model.config().context);
    const std::size_t predicted = text.size() - 1;
    const std::size_t fullWindows = predicted / T;
    double lossSum = 0.0;
    Index correct = 0;
    std::size_t evaluated = 0;  // positions
    auto runBatch = [&](std::size_t firstWindow, std::size_t windows, std::size_t len) {
      m_batch.layout = TokenLayout::sequence(static_cast<Index>(windows), static_cast<Index>(len));
      m_batch.ids.resize(windows * len);
      m_next.resize(windows * len);
      for (std::size_t w = 0; w < windows; ++w) {
        if constexpr (kBytes) {
          const std::uint8_t* src = text.data() + (firstWindow + w) * T;
          for (std::size_t t = 0; t < len; ++t) {
            m_batch.ids[w * len + t] = src[t];
            m_next[w * len + t] = src[t + 1];
          }
        } else {  // the window's len + 1 tokens: ids, and the same shifted by one
          int* ids = m_batch.ids.data() + w * len;
          int* next = m_next.data() + w * len;
          const std::uint64_t first = (firstWindow + w) * T;
          text.read(first, len, ids);
          std::copy(ids + 1, ids + len, next);
          text.read(first + len, 1, next + len - 1);
        }
      }
      if constexpr (Observed) {
        model.forward(m_batch, logits);
      } else {
        model.forwardInference(m_batch, logits);
      }
      lossSum += static_cast<double>(m_loss.forward(logits, m_next)) * static_cast<double>(m_next.size());
      correct += countCorrect(logits, m_next);
      evaluated += m_next.size();
      if constexpr (Observed) onBatch();
      return evaluated == predicted || !stop.now();  // false: stop here
    };
    const auto B = static_cast<std::size_t>(batchSize);
    bool going = true;
    for (std::size_t w = 0; w < fullWindows && going; w += B) going = runBatch(w, std::min(B, fullWindows - w), T);
    if (going && predicted % T != 0) going = runBatch(fullWindows, 1, predicted % T);
    EvalResult r;
    r.stopped = !going;
    r.count = static_cast<Index>(evaluated);
    r.loss = lossSum / static_cast<double>(evaluated);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(evaluated);
    return r;
  }

  SoftmaxCrossEntropy<S> m_loss;
  TokenBatch m_batch;         // evaluation scratch
  std::vector<int> m_next;
};

}  // namespace ddl
