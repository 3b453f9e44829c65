#pragma once
// ddl/train/sharded_batches.hpp: one rank's part of every global batch, for data-parallel training.
//
//   ddl::DatasetBatches<float> all(train, batchOptions, seed);      // the global batches
//   ddl::ShardedBatches<ddl::DatasetBatches<float>> mine(all, comm.rank(), comm.size());
// Every rank draws the same global batch from the wrapped source (same seed, epoch and batch: the
// order and augmentation a single process would use) and keeps the columns [r b / P, (r + 1) b / P)
// of it, b the batch's size and P the ranks. The gradients of the P parts, each weighted by its
// fraction of b and summed over the ranks, are the gradient of the global batch's mean loss
// (train/data_parallel.hpp). samplesIn() counts global samples, as the training loop's position does
// once the step's statistics are summed over the ranks, so a checkpoint does not depend on P.
// The configured batch must divide over the ranks (an error otherwise); an epoch's last, smaller
// batch is cut as evenly as possible and weighted by its parts' sizes, so it stays exact; it must
// hold at least one sample per rank. With one rank, next() is the wrapped source's, without a copy.
// The wrapped source's Input is a matrix of samples as columns and its Target one label per column.
#include <cstdint>
#include <utility>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/train/run_settings.hpp"

namespace ddl {

template <class Source>
class ShardedBatches {
 public:
  using Scalar = typename Source::Scalar;
  using Input = typename Source::Input;
  using Target = typename Source::Target;

  // globalBatch: the configured batch size of source (every batch but an epoch's last holds it).
  ShardedBatches(Source& source, int rank, int ranks, Index globalBatch)
      : m_source(&source), m_rank(rank), m_ranks(ranks) {
    const char* fn = "ddl::ShardedBatches";
    require(ranks >= 1 && rank >= 0 && rank < ranks, fn, "rank ", rank, " of ", ranks, " ranks is not a rank");
    require(globalBatch >= 1 && globalBatch % ranks == 0, fn, "the global batch of ", globalBatch,
            " samples does not divide over ", ranks, " ranks (choose a batch size that is a multiple of ", ranks,
            ")");
    const Index batches = source.batchesPerEpoch();
    if (batches > 0) {
      const Index last = source.samplesIn(batches) - source.samplesIn(batches - 1);
      require(last >= ranks, fn, "the last batch of an epoch holds ", last, " samples, fewer than the ", ranks,
              " ranks (", source.samplesIn(batches), " samples in batches of ", globalBatch,
              "): choose another batch size or drop the last batch");
    }
  }
  ShardedBatches(Source&&, int, int, Index) = delete;  // keeps a reference: a temporary would dangle

  Index batchesPerEpoch() const { return m_source->batchesPerEpoch(); }
  void startEpoch(std::uint64_t epoch) { m_source->startEpoch(epoch); }
  void seek(Index batch) { m_source->seek(batch); }
  Index samplesIn(Index batches) const { return m_source->samplesIn(batches); }  // global samples

  bool next(Input& X, Target& target) {
    if (m_ranks == 1) return m_source->next(X, target);
    if (!m_source->next(m_global, m_globalTarget)) return false;
    const Index b = m_global.cols();
    const Index lo = b * m_rank / m_ranks, hi = b * (m_rank + 1) / m_ranks;
    X = m_global.middleCols(lo, hi - lo);  // no allocation once X has this shape
    target.assign(m_globalTarget.begin() + lo, m_globalTarget.begin() + hi);
    return true;
  }

  int rank() const { return m_rank; }
  int ranks() const { return m_ranks; }

  template <class Model>
  void checkModel(const Model& model, const char* fn) const {
    m_source->checkModel(model, fn);
  }

  // The wrapped source's settings (train/run_settings.hpp); sharding adds none: a checkpoint does not
  // depend on the number of ranks.
  template <class Put>
  void reportSettings(Put&& put) const {
    reportSettingsOf(*m_source, std::forward<Put>(put));
  }

  Source& source() { return *m_source; }
  const Source& source() const { return *m_source; }

 private:
  Source* m_source;
  int m_rank, m_ranks;
  Input m_global;
  Target m_globalTarget;
};

}  // namespace ddl
