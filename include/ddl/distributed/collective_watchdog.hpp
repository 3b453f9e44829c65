#pragma once
// ddl/distributed/collective_watchdog.hpp: ends a wait in a collective call that never returns.
//
// A blocking collective (MPI_Allreduce, MPI_Alltoallv, ...) waits for every rank; a rank that is
// stopped (SIGSTOP, a frozen node) or hangs leaves the others waiting forever. The watchdog is a thread
// that sees which call this process is in and for how long, and calls `expired(call, seconds)` once a
// single call has waited `timeout` seconds (MpiCommunicator ends the job there, docs/runs.md).
//
// A stop of this process itself does not count: a gap of more than a second between two looks of
// the thread (a load-induced delay is far shorter) is a stop and counts as one poll, so a rank that
// was stopped and continued (SIGCONT) does not expire on waking. A peer stopped for less than the
// timeout is waited for; the timeout is the tolerance.
// Entering and leaving a call are two relaxed atomic stores: no cost a training step can measure.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "ddl/core/error.hpp"

namespace ddl {

class CollectiveWatchdog {
 public:
  using Expired = std::function<void(const char* call, double waitedSeconds)>;

  // timeoutSeconds > 0; pollSeconds > 0 is how often the thread looks (the timeout's resolution).
  CollectiveWatchdog(double timeoutSeconds, Expired expired, double pollSeconds = 0.25)
      : m_timeout(timeoutSeconds), m_poll(pollSeconds), m_expired(std::move(expired)) {
    require(timeoutSeconds > 0 && pollSeconds > 0, "ddl::CollectiveWatchdog", "timeout ", timeoutSeconds,
            " s and poll ", pollSeconds, " s must be > 0");
    require(static_cast<bool>(m_expired), "ddl::CollectiveWatchdog", "needs an expiry action");
    m_thread = std::thread([this] { watch(); });
  }
  ~CollectiveWatchdog() {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_stop = true;
    }
    m_wake.notify_all();
    m_thread.join();
  }
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Marks one collective call, from construction to destruction. `call` must outlive the scope
  // (a string literal).
  class Scope {
   public:
    Scope(CollectiveWatchdog* dog, const char* call) : m_dog(dog) {
      if (!m_dog) return;
      m_dog->m_entered.fetch_add(1, std::memory_order_relaxed);
      m_dog->m_call.store(call, std::memory_order_release);
    }
    ~Scope() {
      if (m_dog) m_dog->m_call.store(nullptr, std::memory_order_release);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    CollectiveWatchdog* m_dog;
  };

  double timeoutSeconds() const { return m_timeout; }

 private:
  void watch() {
    using Clock = std::chrono::steady_clock;
    const auto poll = std::chrono::duration<double>(m_poll);
    std::uint64_t watched = 0;  // the call (its entry count) being timed
    double waited = 0;
    bool fired = false;
    auto last = Clock::now();
    std::unique_lock<std::mutex> lock(m_mutex);
    while (!m_wake.wait_for(lock, poll, [this] { return m_stop; })) {
      const auto now = Clock::now();
      // The time this process itself stood still is not a wait.
      const double gap = std::chrono::duration<double>(now - last).count();
      const double step = gap > std::max(1.0, 4 * m_poll) ? m_poll : gap;
      last = now;
      const char* call = m_call.load(std::memory_order_acquire);
      const std::uint64_t entered = m_entered.load(std::memory_order_relaxed);
      if (!call || entered != watched) {  // idle, or a new call since the last look
        watched = entered;
        waited = 0;
        fired = false;
        continue;
      }
      waited += step;
      if (waited >= m_timeout && !fired) {
        fired = true;
        lock.unlock();  // the action may end the process; the destructor must not wait on the lock
        m_expired(call, waited);
        lock.lock();
      }
    }
  }

  double m_timeout, m_poll;
  Expired m_expired;
  std::atomic<const char*> m_call{nullptr};
  std::atomic<std::uint64_t> m_entered{0};
  std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_stop = false;
  std::thread m_thread;
};

}  // namespace ddl
