#pragma once
// ddl/core/threading.hpp: one setting for the number of threads, shared by Eigen and OpenMP.
#include <thread>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include <Eigen/Core>
#if DDL_WITH_OPENMP
#include <omp.h>
#endif

namespace ddl {

// Number of hardware threads (at least 1).
inline int hardwareThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

// Sets the threads used by Eigen's products and by ddl's OpenMP loops; n = 0 means all hardware
// threads. Without OpenMP everything runs on one thread and this only records the request.
inline void setNumThreads(int n) {
  require(n >= 0, "ddl::setNumThreads", "thread count must be >= 0, got ", n);
  const int t = n == 0 ? hardwareThreads() : n;
  Eigen::setNbThreads(t);
#if DDL_WITH_OPENMP
  omp_set_num_threads(t);
#endif
}

// Threads actually in use (1 without OpenMP).
inline int numThreads() {
#if DDL_WITH_OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace ddl
