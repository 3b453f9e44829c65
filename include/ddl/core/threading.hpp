#pragma once
// ddl/core/threading.hpp: one setting for the number of threads, shared by Eigen and OpenMP.
#include <algorithm>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>
#include <thread>
#if defined(__linux__)
#include <sched.h>
#endif

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include <Eigen/Core>
#if DDL_WITH_OPENMP
#include <omp.h>
#endif

namespace ddl {

// CPUs this process may run on (at least 1): the affinity mask (taskset, cpusets, container CPU
// sets) capped by a cgroup-v2 CPU quota (docker --cpus), not the machine's total.
inline int hardwareThreads() {
  const unsigned total = std::thread::hardware_concurrency();
  int n = total == 0 ? 1 : static_cast<int>(total);
#if defined(__linux__)
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) == 0 && CPU_COUNT(&mask) > 0) n = CPU_COUNT(&mask);
  std::ifstream quota("/sys/fs/cgroup/cpu.max");
  std::string limit;
  long long period = 0;
  if (quota >> limit >> period && limit != "max" && period > 0) {
    const long long q = std::atoll(limit.c_str());
    if (q > 0) n = std::min<long long>(n, std::max<long long>(1, (q + period - 1) / period));
  }
#endif
  return std::max(1, n);
}

// The thread count for "0 = automatic": OMP_NUM_THREADS when set to a positive integer (its first
// entry), else hardwareThreads().
inline int defaultThreads() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env != nullptr) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && (*end == '\0' || *end == ',') && v >= 1 && v <= 4096) return static_cast<int>(v);
  }
  return hardwareThreads();
}

// Sets the threads used by Eigen's products and by ddl's OpenMP loops; n = 0 means defaultThreads()
// (the user's OMP_NUM_THREADS, else the CPUs this process may use). Without OpenMP everything runs
// on one thread and this only records the request.
inline void setNumThreads(int n) {
  require(n >= 0, "ddl::setNumThreads", "thread count must be >= 0, got ", n);
  const int t = n == 0 ? defaultThreads() : n;
  Eigen::setNbThreads(t);
#if DDL_WITH_OPENMP
  omp_set_num_threads(t);
#endif
}

// The OpenMP threads of the calling thread's parallel regions (n = 0: defaultThreads()), for a worker of
// the caller's own pool: OpenMP keeps this setting per thread, so setNumThreads in the main thread does not
// reach a std::thread started later. Eigen's count stays setNumThreads' (one process-wide value).
inline void setThreadsOfThisThread(int n) {
  require(n >= 0, "ddl::setThreadsOfThisThread", "thread count must be >= 0, got ", n);
#if DDL_WITH_OPENMP
  omp_set_num_threads(n == 0 ? defaultThreads() : n);
#endif
}

// An exception escaping an OpenMP region terminates the process, so code that may throw inside
// one (a workspace growing, bad_alloc) runs through guard(): the first exception is kept and
// rethrown by rethrow() after the region has joined.
class ParallelErrors {
 public:
  template <class F>
  void guard(F&& f) noexcept {
    try {
      f();
    } catch (...) {
      DDL_OMP(critical(ddl_parallel_errors))
      if (!m_first) m_first = std::current_exception();
    }
  }
  void rethrow() const {
    if (m_first) std::rethrow_exception(m_first);
  }

 private:
  std::exception_ptr m_first;
};

// Threads actually in use (1 without OpenMP).
inline int numThreads() {
#if DDL_WITH_OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace ddl
