#pragma once
// ddl/distributed/mpi_communicator.hpp: ddl::Collective (core/collective.hpp) over MPI, for data-parallel
// training on several processes or machines (Open MPI 4.1 on Debian: libopenmpi-dev, openmpi-bin).
//
//   int main(int argc, char** argv) {
//     ddl::MpiSession mpi(&argc, &argv);                  // MPI_Init_thread ... MPI_Finalize
//     ddl::MpiCommunicator world;                         // MPI_COMM_WORLD, deterministic sums
//     ddl::Trainer<float> trainer(net, train, options, &val, nullptr, &world);
//   }
// Needs MPI: link the CMake target ddl::mpi (find_package(ddl COMPONENTS mpi), or DDL_USE_MPI in a
// source build), which defines DDL_WITH_MPI=1 and adds MPI's flags; without it this header stops with
// #error. Only the thread that created the session calls MPI
// (MPI_THREAD_FUNNELED): ddl's OpenMP threads never do; the one exception is the watchdog's
// MPI_Abort, which ends the job (Open MPI allows it from any thread).
//
// Sums: in the deterministic mode (the default) every rank adds the ranks' buffers in rank order,
// r = 0, 1, ..., P - 1, so a sum does not depend on the algorithm MPI picks, on the process placement
// or on the message sizes: the buffer is cut into P segments, rank j receives segment j of every rank
// (MPI_Alltoallv), adds them in rank order and the sums are gathered back (MPI_Allgatherv). That sends
// 2 (P - 1) / P of the buffer per rank, as a ring allreduce does. The native mode is MPI_Allreduce.
// Started sums (startSum, progressSums, finishSums; core/collective.hpp) are the same sums as
// nonblocking calls: MPI_Ialltoallv, then, once it is complete, the rank-order sum and MPI_Iallgatherv
// on a duplicate of the communicator (so the second phases, started in the sums' order, never cross
// the first ones of later sums); MPI_Iallreduce in the native mode. Open MPI moves them only inside
// MPI calls: progressSums is such a call. Same bits as allreduceSum in the deterministic mode (each
// element is the same rank-order sum); in the native mode MPI picks the algorithm of each.
// Errors: the communicator returns MPI errors instead of aborting (MPI_ERRORS_RETURN) and every
// failed call throws ddl::Error naming the call and MPI's text. A rank that stops or hangs would leave
// the others in a call forever: endJobAfter(seconds, status) ends the job instead (collective_watchdog.hpp).
// The job's start and end are watched too (docs/distributed.md): MpiSession (mpi_session.hpp) can time
// MPI_Init (a rank that exits before it starts MPI leaves the others there) and MPI_Finalize, and
// meetAtEnd() names the ranks that never reach the end.
#include "ddl/core/config.hpp"

#if !DDL_WITH_MPI
#error "ddl/distributed/mpi_communicator.hpp needs MPI: link ddl::mpi (find_package(ddl COMPONENTS mpi); Debian: libopenmpi-dev), or compile with -DDDL_WITH_MPI=1 and MPI's flags"
#endif
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <mpi.h>

#include "ddl/core/collective.hpp"
#include "ddl/core/error.hpp"
#include "ddl/distributed/collective_watchdog.hpp"
#include "ddl/distributed/mpi_session.hpp"

namespace ddl {

enum class ReduceMode {
  Deterministic,  // rank-order sums (the default): identical bits for any MPI algorithm
  Native,         // MPI_Allreduce: MPI's own algorithm and order
};

namespace detail {
template <class S>
MPI_Datatype mpiType();
template <>
inline MPI_Datatype mpiType<float>() { return MPI_FLOAT; }
template <>
inline MPI_Datatype mpiType<double>() { return MPI_DOUBLE; }
}  // namespace detail

class MpiCommunicator final : public Collective {
 public:
  explicit MpiCommunicator(MPI_Comm comm = MPI_COMM_WORLD, ReduceMode mode = ReduceMode::Deterministic)
      : m_comm(comm), m_mode(mode) {
    detail::checkMpi(MPI_Comm_set_errhandler(m_comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    detail::checkMpi(MPI_Comm_rank(m_comm, &m_rank), "MPI_Comm_rank");
    detail::checkMpi(MPI_Comm_size(m_comm, &m_size), "MPI_Comm_size");
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    if (m_gatherComm != MPI_COMM_NULL && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized)
      MPI_Comm_free(&m_gatherComm);
  }
  // Not copied or moved: the watchdog's action refers to this object.
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return m_rank; }
  int size() const override { return m_size; }
  ReduceMode mode() const { return m_mode; }
  MPI_Comm comm() const { return m_comm; }

  void allreduceSum(float* data, std::size_t n) override { sum(data, n); }
  void allreduceSum(double* data, std::size_t n) override { sum(data, n); }

  void startSum(float* data, std::size_t n) override { start(data, n); }
  void startSum(double* data, std::size_t n) override { start(data, n); }
  void progressSums() override { advance(false); }
  void finishSums() override {
    advance(true);
    m_startedCount = 0;
    m_nextSecondPhase = 0;
  }

  void broadcast(void* data, std::size_t bytes, int root) override {
    require(root >= 0 && root < m_size, "ddl::MpiCommunicator::broadcast", "root ", root, " is not a rank of ",
            m_size);
    auto* p = static_cast<char*>(data);
    for (std::size_t done = 0; done < bytes;) {  // MPI counts are int: large buffers go in pieces
      const int count = static_cast<int>(std::min<std::size_t>(bytes - done, INT_MAX));
      const CollectiveWatchdog::Scope watched(m_watchdog.get(), "MPI_Bcast");
      detail::checkMpi(MPI_Bcast(p + done, count, MPI_BYTE, root, m_comm), "MPI_Bcast");
      done += static_cast<std::size_t>(count);
    }
  }

  void allgather(std::uint64_t value, std::uint64_t* out) override {
    const CollectiveWatchdog::Scope watched(m_watchdog.get(), "MPI_Allgather");
    detail::checkMpi(MPI_Allgather(&value, 1, MPI_UINT64_T, out, 1, MPI_UINT64_T, m_comm), "MPI_Allgather");
  }

  void barrier() override {
    const CollectiveWatchdog::Scope watched(m_watchdog.get(), "MPI_Barrier");
    detail::checkMpi(MPI_Barrier(m_comm), "MPI_Barrier");
  }

  // When one collective call has waited `seconds` (a rank stopped, hung or gone), says so on stderr
  // and ends every rank with MPI_Abort(status); seconds = 0 turns the watchdog off (the default).
  void endJobAfter(double seconds, int status) {
    require(seconds >= 0, "ddl::MpiCommunicator::endJobAfter", "seconds ", seconds, " must be >= 0");
    m_watchdog.reset();
    if (seconds == 0) return;
    m_watchdog = std::make_unique<CollectiveWatchdog>(seconds, [this, status](const char* call, double waited) {
      std::string silent;
      {
        std::lock_guard<std::mutex> lock(m_silentMutex);
        silent = m_silent;
      }
      std::cerr << "ddl::MpiCommunicator: rank " << m_rank << " of " << m_size << ": " << call << " has waited "
                << static_cast<long long>(waited) << " s for the other ranks ("
                << (silent.empty() ? "a rank is" : silent + " did not answer:") << " stopped, hung or gone); "
                << "ending the job with status " << status << "\n"
                << std::flush;
      MPI_Abort(m_comm, status);
    });
  }

  // The job's end, called by every rank after its last collective call: each rank tells rank 0 it
  // arrived, rank 0 answers once all have, and each rank confirms it got the answer. Rank 0 waits under
  // the watchdog, which names the ranks it has not heard from; the other ranks wait for rank 0 without
  // a limit, since rank 0 alone may still test and sample for the run. A rank stopped after this
  // leaves the others only in MPI_Finalize (MpiSession::finalize times it).
  void meetAtEnd() {
    if (m_size == 1) return;
    constexpr int kArrived = 32001, kAnswer = 32002, kConfirmed = 32003;
    if (m_rank == 0) {
      awaitEveryRank(kArrived, "the job's end (every rank arrives)");
      std::vector<MPI_Request> sent(static_cast<std::size_t>(m_size - 1));
      for (int r = 1; r < m_size; ++r)
        detail::checkMpi(MPI_Isend(nullptr, 0, MPI_BYTE, r, kAnswer, m_comm, &sent[static_cast<std::size_t>(r - 1)]),
                         "MPI_Isend");
      awaitEveryRank(kConfirmed, "the job's end (every rank confirms)");
      detail::checkMpi(MPI_Waitall(m_size - 1, sent.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    } else {
      detail::checkMpi(MPI_Send(nullptr, 0, MPI_BYTE, 0, kArrived, m_comm), "MPI_Send");
      detail::checkMpi(MPI_Recv(nullptr, 0, MPI_BYTE, 0, kAnswer, m_comm, MPI_STATUS_IGNORE), "MPI_Recv");
      detail::checkMpi(MPI_Send(nullptr, 0, MPI_BYTE, 0, kConfirmed, m_comm), "MPI_Send");
    }
  }

  std::string describe() const override {
    return std::to_string(m_size) + (m_size == 1 ? " rank" : " ranks") + " (MPI, " +
           (m_mode == ReduceMode::Deterministic ? "rank-order sums" : "MPI_Allreduce sums") + ")";
  }

  // Ends every rank of the job (MPI_Abort): for an error on one rank, which the others, waiting in
  // a collective call, would otherwise never learn of.
  [[noreturn]] void abort(int code) const {
    MPI_Abort(m_comm, code);
    std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest if it did
  }

 private:
  template <class S>
  void sum(S* data, std::size_t n) {
    if (m_size == 1 || n == 0) return;
    // Large buffers go in pieces whose per-rank counts fit an int.
    const std::size_t piece = static_cast<std::size_t>(INT_MAX / 2);
    for (std::size_t done = 0; done < n; done += piece) {
      const std::size_t len = std::min(piece, n - done);
      const CollectiveWatchdog::Scope watched(
          m_watchdog.get(), m_mode == ReduceMode::Native ? "MPI_Allreduce" : "MPI_Alltoallv + MPI_Allgatherv");
      if (m_mode == ReduceMode::Native)
        detail::checkMpi(MPI_Allreduce(MPI_IN_PLACE, data + done, static_cast<int>(len), detail::mpiType<S>(),
                                       MPI_SUM, m_comm),
                         "MPI_Allreduce");
      else
        rankOrderSum(data + done, len);
    }
  }

  // Segment j of the buffer is summed by rank j, in rank order, then gathered back to every rank.
  template <class S>
  void rankOrderSum(S* data, std::size_t n) {
    const int P = m_size;
    segments(n, m_counts, m_offsets);
    const int mine = m_counts[static_cast<std::size_t>(m_rank)];
    m_recvCounts.assign(static_cast<std::size_t>(P), mine);
    m_recvOffsets.resize(static_cast<std::size_t>(P));
    for (int r = 0; r < P; ++r) m_recvOffsets[static_cast<std::size_t>(r)] = r * mine;
    std::vector<S>& scratch = scratchOf(static_cast<S*>(nullptr));
    const std::size_t need = static_cast<std::size_t>(P) * static_cast<std::size_t>(mine);
    if (scratch.size() < need) scratch.resize(need);  // grows to the largest bucket once, then is reused
    S* recv = scratch.data();
    detail::checkMpi(MPI_Alltoallv(data, m_counts.data(), m_offsets.data(), detail::mpiType<S>(), recv,
                                   m_recvCounts.data(), m_recvOffsets.data(), detail::mpiType<S>(), m_comm),
                     "MPI_Alltoallv");
    S* out = data + m_offsets[static_cast<std::size_t>(m_rank)];
    for (int i = 0; i < mine; ++i) {
      S s = recv[i];
      for (int r = 1; r < P; ++r) s += recv[static_cast<std::size_t>(r) * static_cast<std::size_t>(mine) + static_cast<std::size_t>(i)];
      out[i] = s;
    }
    detail::checkMpi(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, m_counts.data(), m_offsets.data(),
                                    detail::mpiType<S>(), m_comm),
                     "MPI_Allgatherv");
  }

  // Rank 0: waits (watched) for an empty message with `tag` from every other rank; m_silent names the
  // ranks not heard from yet, for the watchdog's message.
  void awaitEveryRank(int tag, const char* call) {
    std::vector<MPI_Request> recv(static_cast<std::size_t>(m_size - 1));
    for (int r = 1; r < m_size; ++r)
      detail::checkMpi(MPI_Irecv(nullptr, 0, MPI_BYTE, r, tag, m_comm, &recv[static_cast<std::size_t>(r - 1)]),
                       "MPI_Irecv");
    const CollectiveWatchdog::Scope watched(m_watchdog.get(), call);
    for (;;) {
      std::string silent;
      int missing = 0;
      for (int r = 1; r < m_size; ++r) {
        int flag = 0;
        detail::checkMpi(MPI_Test(&recv[static_cast<std::size_t>(r - 1)], &flag, MPI_STATUS_IGNORE), "MPI_Test");
        if (flag) continue;
        if (++missing <= 8) silent += (silent.empty() ? "" : ", ") + std::to_string(r);
      }
      if (missing > 8) silent += " and " + std::to_string(missing - 8) + " more";
      {
        std::lock_guard<std::mutex> lock(m_silentMutex);
        m_silent = missing == 0 ? std::string() : (missing == 1 ? "rank " : "ranks ") + silent;
      }
      if (missing == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a poll, not a busy loop
    }
  }

  std::vector<float>& scratchOf(float*) { return m_scratchFloat; }
  std::vector<double>& scratchOf(double*) { return m_scratchDouble; }

  // The segments of a rank-order sum of n values: rank j sums counts[j] values from offsets[j].
  void segments(std::size_t n, std::vector<int>& counts, std::vector<int>& offsets) const {
    const std::size_t P = static_cast<std::size_t>(m_size), base = n / P, extra = n % P;
    counts.resize(P);
    offsets.resize(P);
    for (std::size_t j = 0; j < P; ++j) {  // the first n % P segments hold one element more
      counts[j] = static_cast<int>(base + (j < extra ? 1 : 0));
      offsets[j] = static_cast<int>(j * base + std::min(j, extra));
    }
  }

  // One started sum. Slots are kept and reused in the same order every step, so a steady-state step
  // allocates nothing; a deque never moves a slot whose arrays a pending MPI call reads.
  struct Started {
    void* data = nullptr;
    bool isDouble = false;
    std::size_t n = 0;
    int phase = 0;  // 0: MPI_Ialltoallv pending, 1: the last call pending, 2: complete
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<int> counts, offsets, recvCounts, recvOffsets;
    std::vector<float> scratchFloat;  // the P received copies of this rank's segment
    std::vector<double> scratchDouble;
  };
  static std::vector<float>& scratchOf(Started& op, float*) { return op.scratchFloat; }
  static std::vector<double>& scratchOf(Started& op, double*) { return op.scratchDouble; }

  template <class S>
  void start(S* data, std::size_t n) {
    if (m_size == 1 || n == 0) return;
    if (m_mode == ReduceMode::Deterministic && m_gatherComm == MPI_COMM_NULL)  // every rank starts its first sum here
      detail::checkMpi(MPI_Comm_dup(m_comm, &m_gatherComm), "MPI_Comm_dup");
    const std::size_t piece = static_cast<std::size_t>(INT_MAX / 2);  // per-rank counts fit an int
    for (std::size_t done = 0; done < n; done += piece) {
      const std::size_t len = std::min(piece, n - done);
      if (m_startedCount == m_started.size()) m_started.emplace_back();
      Started& op = m_started[m_startedCount++];
      op.data = data + done;
      op.isDouble = std::is_same<S, double>::value;
      op.n = len;
      if (m_mode == ReduceMode::Native) {
        detail::checkMpi(MPI_Iallreduce(MPI_IN_PLACE, data + done, static_cast<int>(len), detail::mpiType<S>(),
                                        MPI_SUM, m_comm, &op.request),
                         "MPI_Iallreduce");
        op.phase = 1;
        continue;
      }
      segments(len, op.counts, op.offsets);
      const int mine = op.counts[static_cast<std::size_t>(m_rank)];
      op.recvCounts.assign(static_cast<std::size_t>(m_size), mine);
      op.recvOffsets.resize(static_cast<std::size_t>(m_size));
      for (int r = 0; r < m_size; ++r) op.recvOffsets[static_cast<std::size_t>(r)] = r * mine;
      std::vector<S>& scratch = scratchOf(op, static_cast<S*>(nullptr));
      const std::size_t need = static_cast<std::size_t>(m_size) * static_cast<std::size_t>(mine);
      if (scratch.size() < need) scratch.resize(need);
      detail::checkMpi(MPI_Ialltoallv(data + done, op.counts.data(), op.offsets.data(), detail::mpiType<S>(),
                                      scratch.data(), op.recvCounts.data(), op.recvOffsets.data(),
                                      detail::mpiType<S>(), m_comm, &op.request),
                       "MPI_Ialltoallv");
      op.phase = 0;
    }
  }

  // Whether op's pending call is complete; with wait, waits for it (watched).
  bool complete(Started& op, bool wait) {
    if (wait) {
      const CollectiveWatchdog::Scope watched(m_watchdog.get(), "MPI_Wait (a started sum)");
      detail::checkMpi(MPI_Wait(&op.request, MPI_STATUS_IGNORE), "MPI_Wait");
      return true;
    }
    int flag = 0;
    detail::checkMpi(MPI_Test(&op.request, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    return flag != 0;
  }

  // The received segments summed in rank order into this rank's segment, then gathered to every rank.
  template <class S>
  void secondPhase(Started& op) {
    S* data = static_cast<S*>(op.data);
    const std::vector<S>& recv = scratchOf(op, static_cast<S*>(nullptr));
    const std::size_t mine = static_cast<std::size_t>(op.counts[static_cast<std::size_t>(m_rank)]);
    S* out = data + op.offsets[static_cast<std::size_t>(m_rank)];
    for (std::size_t i = 0; i < mine; ++i) {
      S s = recv[i];
      for (std::size_t r = 1; r < static_cast<std::size_t>(m_size); ++r) s += recv[r * mine + i];
      out[i] = s;
    }
    detail::checkMpi(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, op.counts.data(), op.offsets.data(),
                                     detail::mpiType<S>(), m_gatherComm, &op.request),
                     "MPI_Iallgatherv");
    op.phase = 1;
  }

  // Moves the started sums on: second phases in the sums' order (on every rank the same order on
  // m_gatherComm), as far as first phases are complete; with wait, to the end.
  void advance(bool wait) {
    for (; m_nextSecondPhase < m_startedCount; ++m_nextSecondPhase) {
      Started& op = m_started[m_nextSecondPhase];
      if (op.phase != 0) continue;
      if (!complete(op, wait)) break;
      if (op.isDouble)
        secondPhase<double>(op);
      else
        secondPhase<float>(op);
    }
    for (std::size_t i = 0; i < m_startedCount; ++i) {
      Started& op = m_started[i];
      if (op.phase == 1 && complete(op, wait)) op.phase = 2;
      if (!wait && op.phase != 2) break;  // one test drives MPI's progress for all
    }
  }

  MPI_Comm m_comm;
  ReduceMode m_mode;
  int m_rank = 0, m_size = 1;
  std::vector<int> m_counts, m_offsets, m_recvCounts, m_recvOffsets;
  std::vector<float> m_scratchFloat;  // the P received copies of this rank's segment
  std::vector<double> m_scratchDouble;
  std::unique_ptr<CollectiveWatchdog> m_watchdog;  // null: no timeout
  std::deque<Started> m_started;                   // slots of started sums, the first m_startedCount in use
  std::size_t m_startedCount = 0, m_nextSecondPhase = 0;
  MPI_Comm m_gatherComm = MPI_COMM_NULL;  // the second phases' calls (a duplicate of m_comm)
  std::mutex m_silentMutex;               // m_silent: written by meetAtEnd, read by the watchdog
  std::string m_silent;                   // "rank 3": the ranks meetAtEnd has not heard from
};

}  // namespace ddl
