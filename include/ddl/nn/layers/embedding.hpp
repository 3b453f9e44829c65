#pragma once
// ddl/nn/layers/embedding.hpp: a token embedding, the lookup of one learned d-vector per token id.
//
//   ids: N token ids in [0, vocab)   W: (vocab, d)   out: (d, N), out.col(n) = W.row(ids[n])ᵀ
//   backward:  dW.row(ids[n]) += dOut.col(n)ᵀ for n = 0 .. N-1, in that order
//
// The weight is held as (vocab, d), one row per token, not (d, vocab) with tokens as columns:
// a Param's matrix has its logical shape as rows and columns (core/param.hpp), and checkpoints
// write it row-major under that shape (io/safetensors.hpp), exactly as Linear's (out, in) weight is
// PyTorch's [out, in]. So "weight" is PyTorch's nn.Embedding.weight [vocab, d] with no transposition
// on save or load, and it has the shape of a Linear(d, vocab) head's weight, which a tied head can
// share as it is. The price is a strided gather (a row of a column-major matrix); the table of a
// byte vocabulary (256 rows) stays in cache, so that stride costs little.
//
// Init: N(0, 0.02²) (the GPT-2 convention; docs/spec.md fixes nothing for embeddings), drawn in
// column-major order of W. The weight decays like other weight matrices (decay = true).
//
// forward keeps a copy of the ids for backward: N ints, 1/d of the output it writes, and the
// caller may reuse its id buffer for the next batch before backward. Once the copy has had its
// size, forward, forwardInference and backward allocate nothing.
#include <string>
#include <vector>

#include "ddl/core/alias.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/init.hpp"

namespace ddl {

template <class S>
class Embedding {
 public:
  // vocab, d >= 1; W ~ N(0, stddev²), column-major draw order.
  Embedding(Index vocab, Index d, Rng& rng, double stddev = 0.02) : m_vocab(vocab), m_d(d) {
    require(vocab >= 1 && d >= 1, "ddl::Embedding", "vocab and d must be >= 1, got vocab = ", vocab, ", d = ", d);
    m_W = Param<S>(vocab, d, /*withDecay=*/true);
    m_W.role = ParamRole::Embedding;
    fillNormal(m_W.value, rng, 0.0, stddev);
  }

  // ids: N ids -> out: (d, N), resized. Every id is checked before anything is written: an id
  // outside [0, vocab) throws ValueError naming its position, the id and the vocabulary size, and
  // leaves out and the state for backward as they were. out must not be the weight.
  void forward(const std::vector<int>& ids, MatX<S>& out);

  // Same out as forward, bit for bit; keeps nothing, so backward still refers to the last forward, and
  // reads the layer only (callers on several threads may share it).
  void forwardInference(const std::vector<int>& ids, MatX<S>& out) const;

  // dOut: (d, N) of the last forward; the weight gradient accumulates (+=), position by position
  // in order, so a repeated id sums its columns in the same order on every run.
  void backward(const MatX<S>& dOut);

  // One parameter: "weight" (vocab, d), PyTorch's [vocab, d].
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    f(joinName(prefix, "weight"), m_W);
  }

  Param<S>& weight() { return m_W; }
  const Param<S>& weight() const { return m_W; }
  Index vocabulary() const { return m_vocab; }
  Index dim() const { return m_d; }

 private:
  void checkIds(const char* fn, const std::vector<int>& ids) const;

  void gather(const std::vector<int>& ids, MatX<S>& out) const;

  Index m_vocab, m_d;
  Param<S> m_W;
  std::vector<int> m_ids;  // the last forward's ids, for backward
  bool m_valid = false;
};

template <class S>
void Embedding<S>::forward(const std::vector<int>& ids, MatX<S>& out) {
  checkIds("ddl::Embedding::forward", ids);
  requireNoAlias("ddl::Embedding::forward", "the weight", m_W.value, "out", out);
  m_ids.assign(ids.begin(), ids.end());
  m_valid = true;
  gather(ids, out);
}

template <class S>
void Embedding<S>::forwardInference(const std::vector<int>& ids, MatX<S>& out) const {
  checkIds("ddl::Embedding::forwardInference", ids);
  requireNoAlias("ddl::Embedding::forwardInference", "the weight", m_W.value, "out", out);
  gather(ids, out);
}

template <class S>
void Embedding<S>::backward(const MatX<S>& dOut) {
  const char* fn = "ddl::Embedding::backward";
  if (!m_valid) throw Error(message(fn, "called before forward"));
  checkShape(fn, "dOut", dOut, m_d, static_cast<Index>(m_ids.size()));
  for (std::size_t n = 0; n < m_ids.size(); ++n)
    m_W.grad.row(m_ids[n]) += dOut.col(static_cast<Index>(n)).transpose();
}

template <class S>
void Embedding<S>::checkIds(const char* fn, const std::vector<int>& ids) const {
  for (std::size_t n = 0; n < ids.size(); ++n)
    if (ids[n] < 0 || ids[n] >= m_vocab)
      throw ValueError(message(fn, "id ", ids[n], " at position ", n, " is outside [0, ", m_vocab,
                               ") (vocabulary size ", m_vocab, ")"));
}

template <class S>
void Embedding<S>::gather(const std::vector<int>& ids, MatX<S>& out) const {
  out.resize(m_d, static_cast<Index>(ids.size()));
  for (std::size_t n = 0; n < ids.size(); ++n) out.col(static_cast<Index>(n)) = m_W.value.row(ids[n]).transpose();
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class Embedding<float>;
extern template class Embedding<double>;
#endif

}  // namespace ddl
