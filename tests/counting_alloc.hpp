#pragma once
// Include FIRST in a test file, before any Eigen header: allocationsDuring(f) counts every heap
// allocation while f runs, operator new calls (counting_new.hpp: std::string, std::vector, ...) plus
// Eigen's own, which go through std::malloc and are seen through EIGEN_RUNTIME_NO_MALLOC. Its check
// calls eigen_assert, here made to count instead of throwing (an exception from inside
// DenseStorage::resize would leave a freed pointer behind). Replaces the global operator new, so
// include it in one translation unit of an executable (a test file that includes it is an executable of
// its own: tests/CMakeLists.txt).
#ifdef EIGEN_CORE_MODULE_H
#error "tests/counting_alloc.hpp must be included before any Eigen header"
#endif
#define EIGEN_RUNTIME_NO_MALLOC
#include <atomic>

namespace ddl_test {
// Eigen heap allocations while forbidden (or failed Eigen checks), on all threads.
inline std::atomic<long> eigenAssertCount{0};
}  // namespace ddl_test

#define eigen_assert(x) ((x) ? static_cast<void>(0) : static_cast<void>(::ddl_test::eigenAssertCount.fetch_add(1)))

#include <Eigen/Core>

#include "counting_new.hpp"

namespace ddl_test {

// operator new calls plus Eigen heap allocations (all threads) while f runs.
template <class F>
long allocationsDuring(F&& f) {
  const long before = operatorNewCount() + eigenAssertCount.load();
  Eigen::internal::set_is_malloc_allowed(false);
  f();
  Eigen::internal::set_is_malloc_allowed(true);
  return operatorNewCount() + eigenAssertCount.load() - before;
}

}  // namespace ddl_test
