#pragma once
// allocationGuardFires(): whether the check of eigen_guard.hpp (included first in the test file) throws
// EigenAssertFailure on an Eigen heap allocation while allocation is forbidden.
#include "eigen_guard.hpp"  // before any Eigen header, if the test file did not include it first

#include <Eigen/Core>

#include "catch_compat.hpp"
#include "ddl/core/types.hpp"

namespace ddl_test {

inline bool allocationGuardFires() {
  Eigen::internal::set_is_malloc_allowed(false);
  bool threw = false;
  try {
    ddl::MatX<float> M(64, 64);
    CHECK(M.size() == 4096);
  } catch (const EigenAssertFailure&) {
    threw = true;
  }
  Eigen::internal::set_is_malloc_allowed(true);
  return threw;
}

}  // namespace ddl_test
