#pragma once
// ddl/train/text_windows.hpp: the batch source of a language model (the contract of
// train/batch_source.hpp): every batch is B random windows of T + 1 consecutive bytes of a training
// split (data/text_corpus.hpp, drawWindows), input the first T bytes of each window, target the T
// bytes one position later. An "epoch" is a fixed number of batches (the corpus is sampled, not walked).
// Batch b of epoch e draws its window starts from Rng(mix(mix(seed, e), b)), so any position of a
// run is reproducible and a resume mid-epoch is bit-identical.
// Data-parallel training (shard(rank, ranks)): every rank draws the same global batch of B windows
// and keeps the windows [r B / P, (r + 1) B / P), as train/sharded_batches.hpp does for images; B
// must divide over the P ranks, so every part holds the same number of positions. samplesIn()
// counts the global batch's positions, so a checkpoint does not depend on P.
//
// Tokens is what the windows are cut from: a byte split (std::vector<std::uint8_t>, ids 0..255, the
// default) or a set of token files (data/token_files.hpp, TokenFiles: ids below its vocabulary; any
// type with its size(), read(first, n, ids) and vocabulary() and a drawWindows overload fits). Both
// draw window starts the same way, so a byte run keeps its bits whichever type the program names.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/token_batch.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/dataset.hpp"
#include "ddl/data/text_corpus.hpp"
#include "ddl/data/token_files.hpp"

namespace ddl {

template <class S, class Tokens = std::vector<std::uint8_t>>
class TextWindows {
 public:
  using Scalar = S;
  using Input = TokenBatch;
  using Target = std::vector<int>;
  static constexpr bool kBytes = std::is_same_v<Tokens, std::vector<std::uint8_t>>;

  // split must outlive the source. B, T >= 1, batchesPerEpoch >= 1; the split must hold T + 1 tokens.
  TextWindows(const Tokens& split, Index B, Index T, Index batchesPerEpoch, std::uint64_t seed)
      : m_split(&split), m_B(B), m_T(T), m_batches(batchesPerEpoch), m_seed(seed) {
    const char* fn = "ddl::TextWindows";
    require(B >= 1 && T >= 1, fn, "need B >= 1 windows of T >= 1 tokens, got B = ", B, ", T = ", T);
    require(batchesPerEpoch >= 1, fn, "batchesPerEpoch must be >= 1, got ", batchesPerEpoch);
    require(split.size() > static_cast<std::uint64_t>(T), fn, "a window of T + 1 = ", T + 1, kBytes ? " bytes" : " tokens",
            " does not fit in a training split of ", split.size(), kBytes ? " bytes" : " tokens");
  }
  TextWindows(Tokens&&, Index, Index, Index, std::uint64_t) = delete;  // would dangle

  Index batchesPerEpoch() const { return m_batches; }
  void startEpoch(std::uint64_t epoch) {
    m_epoch = epoch;
    m_batch = 0;
  }
  void seek(Index batch) {
    require(batch >= 0 && batch <= m_batches, "ddl::TextWindows::seek", "batch ", batch, " is outside [0, ", m_batches,
            "]");
    m_batch = batch;
  }
  // This rank's windows of every global batch (see the header comment); shard(0, 1) is one process.
  void shard(int rank, int ranks) {
    const char* fn = "ddl::TextWindows::shard";
    require(ranks >= 1 && rank >= 0 && rank < ranks, fn, "rank ", rank, " of ", ranks, " ranks is not a rank");
    require(m_B % ranks == 0, fn, "the global batch of ", m_B, " windows does not divide over ", ranks,
            " ranks (choose a batch size that is a multiple of ", ranks, ")");
    m_rank = rank;
    m_ranks = ranks;
  }
  int rank() const { return m_rank; }
  int ranks() const { return m_ranks; }

  bool next(Input& input, Target& target) {
    if (m_batch >= m_batches) return false;
    const std::uint64_t seed = detail::mixSeed(detail::mixSeed(m_seed, m_epoch), static_cast<std::uint64_t>(m_batch));
    ++m_batch;
    if (m_ranks == 1) {
      drawWindows(*m_split, m_B, m_T, seed, input.ids, target);
      input.layout = TokenLayout::sequence(m_B, m_T);
      return true;
    }
    drawWindows(*m_split, m_B, m_T, seed, m_globalIds, m_globalTarget);
    const Index part = m_B / m_ranks;
    const auto lo = static_cast<std::ptrdiff_t>(m_rank * part * m_T), hi = lo + static_cast<std::ptrdiff_t>(part * m_T);
    input.ids.assign(m_globalIds.begin() + lo, m_globalIds.begin() + hi);  // no allocation once sized
    target.assign(m_globalTarget.begin() + lo, m_globalTarget.begin() + hi);
    input.layout = TokenLayout::sequence(part, m_T);
    return true;
  }
  Index samplesIn(Index batches) const { return batches * m_B * m_T; }  // positions predicted, all ranks

  // The model must take the ids (bytes: 256; token files: their vocabulary) and windows of T tokens.
  template <class Model>
  void checkModel(const Model& model, const char* fn) const {
    if constexpr (kBytes)
      require(model.config().vocab >= 256, fn, "byte windows need a vocabulary of 256, the model has ",
              model.config().vocab);
    else
      require(model.config().vocab >= m_split->vocabulary(), fn, "token windows need a vocabulary of ",
              m_split->vocabulary(), ", the model has ", model.config().vocab);
    require(m_T <= model.config().context, fn, "windows of T = ", m_T, " tokens exceed the model's context ",
            model.config().context);
  }

  Index windows() const { return m_B; }
  Index length() const { return m_T; }

 private:
  const Tokens* m_split;
  Index m_B, m_T, m_batches;
  std::uint64_t m_seed;
  std::uint64_t m_epoch = 0;
  Index m_batch = 0;
  int m_rank = 0, m_ranks = 1;
  std::vector<int> m_globalIds, m_globalTarget;  // the whole batch, when sharded
};

}  // namespace ddl
