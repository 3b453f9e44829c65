#pragma once
// ddl/train/data_parallel.hpp: what a rank does in data-parallel training, over any Collective
// (core/collective.hpp; MPI in distributed/mpi_communicator.hpp).
//
//   ddl::DataParallel<float> dp(comm);
//   dp.broadcastParameters(params);            // rank 0's values everywhere (start, resume)
//   dp.reduceStep(stats, params);              // after backward: global stats, averaged gradients
// reduceStep first sums the step's statistics over the ranks (loss times count, correct, count and
// the number of failed ranks: one message of four doubles), so every rank sees the global batch's mean loss and counts; then every
// gradient is scaled by this rank's share of the global batch (its count over the global count) and
// summed over the ranks. The result is the gradient of the global batch's mean loss, also when the
// parts differ in size (an epoch's last batch). The gradients travel through flat buckets of
// bucketBytes (one message per bucket, not per parameter), filled in the parameter walk's order;
// the buckets are allocated once, so a steady-state step allocates nothing. A NaN in any rank's
// gradient is in every rank's sum: every rank's guard stops at the same step. A rank whose step
// threw before its reduceStep (a layer's MathError, say) calls failStep instead: that message tells
// every other rank, which throws RankFailedError, so no rank waits forever for the failed one.
// The time spent in the collective calls is kept (communicationSeconds) to report its share of a step.
//
// Overlap (options.overlap): the same step in three calls, so that buckets travel while backward runs:
//   dp.beginStep(stats, params);               // after the loss, before backward: the global stats
//   model.backward(dOut);                      // reports final gradients: dp.gradientsReady(first, end)
//   dp.reduceStep(stats, params);              // after backward: the remaining buckets, then wait
// beginStep sums the statistics (as reduceStep does), so the weight is known before backward; the
// model's reports (core/gradients_ready.hpp; TrainingLoop installs them and calls beginStep when the
// model has setGradientsReady, and keeps the sums after backward otherwise) start every bucket whose parameters are all final as a started sum
// (Collective::startSum) in a buffer of its own; reduceStep starts the buckets no report started, waits
// and writes the sums back. The buckets' boundaries, weights and sums are those of the path without
// overlap: the gradients are the same bits (with the rank-order sums of MpiCommunicator). A rank whose
// backward throws calls failStep, which completes the started sums and then sends the failure in one
// more message of one double that every rank's reduceStep exchanges. docs/decisions.md ("Overlap of
// communication with backward") has the measurements behind the default.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <type_traits>
#include <vector>

#include "ddl/core/collective.hpp"
#include "ddl/core/detects.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param_list.hpp"
#include "ddl/core/types.hpp"
#include "ddl/train/task_step.hpp"

namespace ddl {

// Another rank's step failed: this rank stops too (the failed rank reports its own error).
class RankFailedError : public Error {
 public:
  using Error::Error;
};

struct DataParallelOptions {
  std::size_t bucketBytes = std::size_t(4) << 20;  // gradient bytes per message
  bool overlap = true;  // buckets start during backward (beginStep); needs one gradient's size more memory
};

template <class S>
class DataParallel {
 public:
  explicit DataParallel(Collective& comm, DataParallelOptions options = {}) : m_comm(&comm) {
    require(options.bucketBytes >= sizeof(S), "ddl::DataParallel", "bucketBytes must hold one value, got ",
            options.bucketBytes);
    m_bucket.resize(std::max<std::size_t>(1, options.bucketBytes / sizeof(S)));
    m_overlap = options.overlap;
  }

  Collective& comm() const { return *m_comm; }
  int rank() const { return m_comm->rank(); }
  int size() const { return m_comm->size(); }
  bool overlaps() const { return m_overlap; }
  bool stepOpen() const { return m_open; }  // between beginStep and reduceStep / failStep

  // The global batch's statistics on every rank, then the gradients averaged over it. After beginStep:
  // the buckets not yet started, then every bucket's sum written back.
  void reduceStep(StepStats& stats, const ParamList<S>& params) {
    if (m_open) {
      finishStep(params);
      return;
    }
    const double weight = exchangeStats(stats);
    sumGradients(params, weight);
    ++m_steps;
  }

  // Overlap: the global statistics (as reduceStep) before backward; opens the step for gradientsReady.
  // params: the model's walk, the one its reports index.
  void beginStep(StepStats& stats, const ParamList<S>& params) {
    require(!m_open, "ddl::DataParallel::beginStep", "the previous step was not finished (reduceStep or failStep)");
    const double weight = exchangeStats(stats);
    plan(params);
    m_weight = static_cast<S>(weight);
    m_params = &params;
    m_open = true;
  }

  // Overlap: the gradients of parameters [first, end) of the walk are final (core/gradients_ready.hpp);
  // starts every bucket they complete, last bucket first. Ignored outside beginStep ... reduceStep.
  void gradientsReady(std::size_t first, std::size_t end) {
    if (!m_open) return;
    const std::size_t count = m_offsets.size() - 1;
    require(first <= end && end <= count, "ddl::DataParallel::gradientsReady", "parameters [", first, ", ", end,
            ") of a walk of ", count);
    if (first == end) return;
    for (std::size_t i = first; i < end; ++i) {
      if (m_offsets[i + 1] == m_offsets[i]) continue;  // no values: in no bucket
      for (std::size_t b = bucketOf(m_offsets[i]); b <= bucketOf(m_offsets[i + 1] - 1); ++b) --m_pending[b];
    }
    if (m_offsets[end] == m_offsets[first]) return;
    for (std::size_t b = bucketOf(m_offsets[end] - 1) + 1; b-- > bucketOf(m_offsets[first]);)
      if (m_pending[b] == 0 && !m_started[b]) startBucket(b);
    timed([&] { m_comm->progressSums(); }, 0);
  }

  // In place of reduceStep on a rank whose step failed: the other ranks learn of it and stop.
  // After beginStep: the started sums complete first (the other ranks take part in them), then the
  // failure travels in the message that closes every overlapped step.
  void failStep() {
    if (m_open) {
      m_open = false;
      for (std::size_t b = 0; b < m_started.size(); ++b)
        if (!m_started[b]) startBucket(b);
      timed([&] { m_comm->finishSums(); }, 0);
      double f = 1.0;
      timed([&] { m_comm->allreduceSum(&f, 1); });
      return;
    }
    double s[4] = {0.0, 0.0, 0.0, 1.0};
    timed([&] { m_comm->allreduceSum(s, 4); });
  }

  // grad = sum over ranks of weight_r * grad_r, in buckets.
  void sumGradients(const ParamList<S>& params, double weight) {
    const S w = static_cast<S>(weight);
    const std::size_t cap = m_bucket.size();
    std::size_t first = 0, firstOffset = 0;  // where the current bucket starts in the walk
    std::size_t filled = 0;
    // Packs parameters [first, ...) into the bucket, flushes it when full, unpacks into the same range.
    for (std::size_t i = 0; i < params.size(); ++i) {
      MatX<S>& g = params[i].param->grad;
      std::size_t offset = (i == first) ? firstOffset : 0;
      const std::size_t n = static_cast<std::size_t>(g.size());
      while (offset < n) {
        const std::size_t take = std::min(n - offset, cap - filled);
        const S* src = g.data() + offset;
        S* dst = m_bucket.data() + filled;
        for (std::size_t k = 0; k < take; ++k) dst[k] = w * src[k];
        filled += take;
        offset += take;
        if (filled == cap) {
          flush(params, first, firstOffset, filled);
          first = i;
          firstOffset = offset;
          filled = 0;
        }
      }
    }
    if (filled > 0) flush(params, first, firstOffset, filled);
  }

  // Rank 0's parameter values to every rank.
  void broadcastParameters(const ParamList<S>& params) {
    for (const auto& e : params) broadcastMatrix(e.param->value);
  }

  // Rank 0's optimizer state (tensors and step count) to every rank. Every rank must hold the same
  // tensor names and shapes (a fresh optimizer holds none; checked through the names' digest).
  template <class Optimizer>
  void broadcastOptimizer(Optimizer& optimizer) {
    std::string layout;
    optimizer.visitState([&](const std::string& name, MatX<S>& t) {
      layout += name + ":" + std::to_string(t.rows()) + "x" + std::to_string(t.cols()) + ";";
    });
    requireSame(layout, "the optimizer's state tensors");
    optimizer.visitState([&](const std::string&, MatX<S>& t) { broadcastMatrix(t); });
    std::int64_t steps = optimizer.stepCount();
    m_comm->broadcast(&steps, sizeof steps, 0);
    optimizer.setStepCount(steps);
  }

  // Every rank must pass the same text (compared by digest); otherwise every rank throws ValueError
  // naming the first rank that differs from rank 0 and what was compared.
  void requireSame(const std::string& text, const std::string& what) {
    std::vector<std::uint64_t> all(static_cast<std::size_t>(m_comm->size()));
    m_comm->allgather(fnv1a64(text), all.data());
    for (std::size_t r = 1; r < all.size(); ++r)
      if (all[r] != all[0])
        throw ValueError(message("ddl::DataParallel", "the ranks disagree on ", what, ": rank ", r,
                                 " differs from rank 0 (every rank must run the same program with the same "
                                 "options and data)"));
  }

  // Whether any rank asks to stop: the same answer on every rank.
  bool anyRank(bool flag) {
    double f = flag ? 1.0 : 0.0;
    timed([&] { m_comm->allreduceSum(&f, 1); });
    return f > 0;
  }

  double communicationSeconds() const { return m_commSeconds; }  // in collective calls of steps and votes
  std::int64_t steps() const { return m_steps; }
  std::int64_t messages() const { return m_messages; }

 private:
  template <class F>
  void timed(F&& f, std::int64_t messages = 1) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    m_commSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    m_messages += messages;
  }

  // Sums the statistics over the ranks into stats; returns this rank's weight (its share of the batch).
  double exchangeStats(StepStats& stats) {
    const double localCount = static_cast<double>(stats.count);
    double s[4] = {stats.loss * localCount, static_cast<double>(stats.correct), localCount, 0.0};
    timed([&] { m_comm->allreduceSum(s, 4); });
    if (s[3] > 0)
      throw RankFailedError(message("ddl::DataParallel", static_cast<int>(s[3]), " of ", size(),
                                    " ranks failed in this step (their errors are on their output); every rank stops"));
    require(s[2] > 0, "ddl::DataParallel::reduceStep", "the global batch holds no sample");
    stats.loss = s[0] / s[2];
    stats.correct = static_cast<Index>(s[1]);
    stats.count = static_cast<Index>(s[2]);
    return localCount / s[2];
  }

  std::size_t bucketOf(std::size_t element) const { return element / m_bucket.size(); }

  // The flat layout of params' gradients (offsets in walk order) and its buckets, the same boundaries
  // as sumGradients; allocates only when the parameters changed since the last step.
  void plan(const ParamList<S>& params) {
    bool same = m_planned.size() == params.size();
    for (std::size_t i = 0; same && i < params.size(); ++i)
      same = m_planned[i] == params[i].param &&
             m_offsets[i + 1] - m_offsets[i] == static_cast<std::size_t>(params[i].param->grad.size());
    if (!same) {
      m_planned.resize(params.size());
      m_offsets.assign(params.size() + 1, 0);
      for (std::size_t i = 0; i < params.size(); ++i) {
        m_planned[i] = params[i].param;
        m_offsets[i + 1] = m_offsets[i] + static_cast<std::size_t>(params[i].param->grad.size());
      }
      m_flat.assign(m_offsets.back(), S(0));
      const std::size_t buckets = (m_offsets.back() + m_bucket.size() - 1) / m_bucket.size();
      m_pending.assign(buckets, 0);
      m_started.assign(buckets, 0);
      m_bucketParams.assign(buckets, 0);
      for (std::size_t i = 0; i < params.size(); ++i)
        if (m_offsets[i + 1] > m_offsets[i])
          for (std::size_t b = bucketOf(m_offsets[i]); b <= bucketOf(m_offsets[i + 1] - 1); ++b) ++m_bucketParams[b];
    }
    std::copy(m_bucketParams.begin(), m_bucketParams.end(), m_pending.begin());
    std::fill(m_started.begin(), m_started.end(), char(0));
  }

  // Packs bucket b (weight times the gradients) into its part of m_flat and starts its sum.
  void startBucket(std::size_t b) {
    const std::size_t lo = b * m_bucket.size(), hi = std::min(lo + m_bucket.size(), m_offsets.back());
    std::size_t i = static_cast<std::size_t>(std::upper_bound(m_offsets.begin(), m_offsets.end(), lo) - m_offsets.begin()) - 1;
    for (std::size_t e = lo; e < hi; ++i) {
      const std::size_t end = std::min(hi, m_offsets[i + 1]);
      const S* src = (*m_params)[i].param->grad.data() + (e - m_offsets[i]);
      S* dst = m_flat.data() + e;
      for (std::size_t k = 0; k < end - e; ++k) dst[k] = m_weight * src[k];
      e = end;
    }
    m_started[b] = 1;
    timed([&] { m_comm->startSum(m_flat.data() + lo, hi - lo); });
  }

  // The end of an overlapped step: the buckets no report started (in order), the wait, the sums back
  // into the gradients, then the message that says whether a rank failed in its backward.
  void finishStep(const ParamList<S>& params) {
    require(&params == m_params, "ddl::DataParallel::reduceStep", "the parameters differ from beginStep's");
    for (std::size_t b = 0; b < m_started.size(); ++b)
      if (!m_started[b]) startBucket(b);
    timed([&] { m_comm->finishSums(); }, 0);
    m_open = false;
    for (std::size_t i = 0; i < params.size(); ++i) {
      MatX<S>& g = params[i].param->grad;
      std::copy(m_flat.data() + m_offsets[i], m_flat.data() + m_offsets[i + 1], g.data());
    }
    double failed = 0.0;
    timed([&] { m_comm->allreduceSum(&failed, 1); });
    if (failed > 0)
      throw RankFailedError(message("ddl::DataParallel", static_cast<int>(failed), " of ", size(),
                                    " ranks failed in this step's backward (their errors are on their output); "
                                    "every rank stops"));
    ++m_steps;
  }

  // Sums the bucket over the ranks and writes it back into the gradients it was packed from.
  void flush(const ParamList<S>& params, std::size_t first, std::size_t firstOffset, std::size_t filled) {
    timed([&] { m_comm->allreduceSum(m_bucket.data(), filled); });
    std::size_t pos = 0;
    for (std::size_t i = first; pos < filled; ++i) {
      MatX<S>& g = params[i].param->grad;
      const std::size_t offset = (i == first) ? firstOffset : 0;
      const std::size_t take = std::min(static_cast<std::size_t>(g.size()) - offset, filled - pos);
      std::copy(m_bucket.data() + pos, m_bucket.data() + pos + take, g.data() + offset);
      pos += take;
    }
  }

  void broadcastMatrix(MatX<S>& m) {
    if (m.size() > 0) m_comm->broadcast(m.data(), static_cast<std::size_t>(m.size()) * sizeof(S), 0);
  }

  Collective* m_comm;
  std::vector<S> m_bucket;
  bool m_overlap = true;
  // Overlap: the step's state between beginStep and reduceStep / failStep.
  bool m_open = false;
  S m_weight = S(1);
  const ParamList<S>* m_params = nullptr;
  std::vector<const Param<S>*> m_planned;  // the parameters the plan is for
  std::vector<std::size_t> m_offsets;      // parameter i's values are m_flat[m_offsets[i], m_offsets[i + 1])
  std::vector<S> m_flat;                   // every bucket's buffer, in walk order
  std::vector<int> m_bucketParams, m_pending;  // per bucket: parameters in it, of them not yet final
  std::vector<char> m_started;
  double m_commSeconds = 0.0;
  std::int64_t m_steps = 0, m_messages = 0;
};

namespace detail {
// A batch source that says which rank's part of each global batch it yields.
template <class Source>
using ShardedSourceProbe = std::void_t<decltype(int(std::declval<const Source&>().rank())),
                                       decltype(int(std::declval<const Source&>().ranks()))>;
template <class Source>
using IsShardedSource = Detects<ShardedSourceProbe, Source>;
}  // namespace detail

// A source that yields the whole global batch on every rank would train every rank on the same
// samples: P times the compute for one process's result. So a data-parallel source must say which
// part it yields (rank(), ranks(): ShardedBatches, TextWindows::shard) and that part must be this
// rank's; ValueError naming fn otherwise.
template <class S, class Source>
void requireShardOf(const Source& source, const DataParallel<S>& dp, const char* fn) {
  if constexpr (detail::IsShardedSource<Source>::value) {
    if (source.ranks() != dp.size() || source.rank() != dp.rank())
      throw ValueError(message(fn, "data-parallel on rank ", dp.rank(), " of ", dp.size(),
                               ", but the batch source yields rank ", source.rank(), " of ", source.ranks(),
                               "'s part of each batch (shard the source for this communicator: ShardedBatches, "
                               "TextWindows::shard)"));
  } else {
    throw ValueError(message(fn, "data-parallel over ", dp.size(),
                             " ranks needs a batch source that yields this rank's part of each global batch "
                             "(rank() and ranks(): ShardedBatches, TextWindows::shard); this one would give "
                             "every rank the same samples"));
  }
}

}  // namespace ddl
