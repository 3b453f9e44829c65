// Thread-count defaults (core/threading.hpp): 0 honours OMP_NUM_THREADS, else the CPUs this
// process may use (its affinity mask), never simply every core of the machine.
#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "catch_compat.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/nn/layers/activation.hpp"
#include "ddl/nn/layers/linear.hpp"
#if defined(__linux__)
#include <sched.h>
#endif

namespace test_threading {  // each test file in its own namespace: a group of files compiles as one unit

TEST_CASE("defaultThreads honours OMP_NUM_THREADS", "[core][threading]") {
  ::setenv("OMP_NUM_THREADS", "3", 1);
  CHECK(ddl::defaultThreads() == 3);
  ::setenv("OMP_NUM_THREADS", "2,1", 1);  // nested form: the outer level counts
  CHECK(ddl::defaultThreads() == 2);
  ::setenv("OMP_NUM_THREADS", "zero", 1);  // unusable value: fall back to the usable CPUs
  CHECK(ddl::defaultThreads() == ddl::hardwareThreads());
  ::setenv("OMP_NUM_THREADS", "1", 1);
  ddl::setNumThreads(0);
#if DDL_WITH_OPENMP
  CHECK(ddl::numThreads() == 1);
#endif
  ::unsetenv("OMP_NUM_THREADS");
  CHECK(ddl::defaultThreads() == ddl::hardwareThreads());
}

#if defined(__linux__)
TEST_CASE("hardwareThreads follows the affinity mask", "[core][threading]") {
  cpu_set_t saved;
  REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  const int n = ddl::hardwareThreads();
  REQUIRE(sched_setaffinity(0, sizeof saved, &saved) == 0);
  CHECK(n == 1);
  CHECK(ddl::hardwareThreads() <= CPU_COUNT(&saved));
}
#endif

TEST_CASE("an exception inside a threaded region reaches the caller instead of terminating", "[core][threading]") {
  ddl::setNumThreads(2);
  auto throwOnSecond = [](int t, int) {
    if (t == 1) throw std::runtime_error("task 1 failed");
  };
  CHECK_THROWS_WITH(ddl::detail::runProductTasks(ddl::detail::kLinearParallelMin, [](int threads) { return std::max(2, threads); },
                                                 throwOnSecond),
                    "task 1 failed");
  CHECK_THROWS_WITH(ddl::detail::forColumnRanges(256, 256, [](ddl::Index j0, ddl::Index) {
                      if (j0 > 0 || ddl::numThreads() == 1) throw std::runtime_error("range failed");
                    }),
                    "range failed");
  ddl::setNumThreads(0);
}

}  // namespace test_threading
