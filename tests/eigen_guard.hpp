#pragma once
// Include FIRST in a test file, before any Eigen header. It turns on Eigen's runtime allocation check
// (EIGEN_RUNTIME_NO_MALLOC) and makes eigen_assert throw EigenAssertFailure even in Release builds,
// where NDEBUG would otherwise silence both: a no-allocation test can then fail in every build type.
// EigenAssertFailure is not a ddl::Error, so a test expecting ddl's own shape error fails if Eigen
// asserts first.
#ifdef EIGEN_CORE_MODULE_H
#error "tests/eigen_guard.hpp must be included before any Eigen header"
#endif
#define EIGEN_RUNTIME_NO_MALLOC
// The layers and blocks compile here, under these checks, not as the library's extern copies
// (ddl::compiled is built without them); the models stay extern (include/ddl/core/config.hpp).
#define DDL_EXTERN_LAYERS 0
#include <stdexcept>
#include <string>

namespace ddl_test {
struct EigenAssertFailure : std::logic_error {
  using std::logic_error::logic_error;
};
[[noreturn]] inline void eigenAssertFailed(const char* what) {
  throw EigenAssertFailure(std::string("eigen_assert failed: ") + what);
}
}  // namespace ddl_test

#define eigen_assert(x) ((x) ? static_cast<void>(0) : ::ddl_test::eigenAssertFailed(#x))
