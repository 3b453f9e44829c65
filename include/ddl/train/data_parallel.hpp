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
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <type_traits>
#include <vector>

#include "ddl/core/collective.hpp"
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
};

template <class S>
class DataParallel {
 public:
  explicit DataParallel(Collective& comm, DataParallelOptions options = {}) : m_comm(&comm) {
    require(options.bucketBytes >= sizeof(S), "ddl::DataParallel", "bucketBytes must hold one value, got ",
            options.bucketBytes);
    m_bucket.resize(std::max<std::size_t>(1, options.bucketBytes / sizeof(S)));
  }

  Collective& comm() const { return *m_comm; }
  int rank() const { return m_comm->rank(); }
  int size() const { return m_comm->size(); }

  // The global batch's statistics on every rank, then the gradients averaged over it.
  void reduceStep(StepStats& stats, const ParamList<S>& params) {
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
    sumGradients(params, localCount / s[2]);
    ++m_steps;
  }

  // In place of reduceStep on a rank whose step failed: the other ranks learn of it and stop.
  void failStep() {
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
  void timed(F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    m_commSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++m_messages;
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
  double m_commSeconds = 0.0;
  std::int64_t m_steps = 0, m_messages = 0;
};

namespace detail {
// A batch source that says which rank's part of each global batch it yields.
template <class Source, class = void>
struct IsShardedSource : std::false_type {};
template <class Source>
struct IsShardedSource<Source, std::void_t<decltype(int(std::declval<const Source&>().rank())),
                                           decltype(int(std::declval<const Source&>().ranks()))>> : std::true_type {};
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
