#pragma once
// ddl/core/config.hpp: version and the one place where optional dependencies become macros.
// CMake defines DDL_WITH_ZLIB / DDL_WITH_OPENMP / DDL_WITH_MPI on the ddl::ddl target when it finds them;
// without CMake both default to what the compiler can see, so the headers work standalone.

#define DDL_VERSION_MAJOR 0
#define DDL_VERSION_MINOR 1
#define DDL_VERSION_PATCH 0
#define DDL_VERSION_STRING "0.1.0"

#ifndef DDL_WITH_ZLIB
#if defined(__has_include)
#if __has_include(<zlib.h>)
#define DDL_WITH_ZLIB 1
#endif
#endif
#endif
#ifndef DDL_WITH_ZLIB
#define DDL_WITH_ZLIB 0
#endif

// DDL_WITH_MPI is 1 only when CMake found MPI (mpi.h is not on the default include path).
#ifndef DDL_WITH_MPI
#define DDL_WITH_MPI 0
#endif

#ifndef DDL_WITH_OPENMP
#ifdef _OPENMP
#define DDL_WITH_OPENMP 1
#else
#define DDL_WITH_OPENMP 0
#endif
#endif

// DDL_OMP(parallel for) expands to an OpenMP pragma only when OpenMP is on, so builds
// without -fopenmp stay free of -Wunknown-pragmas.
#if DDL_WITH_OPENMP
#define DDL_PRAGMA_(x) _Pragma(#x)
#define DDL_OMP(x) DDL_PRAGMA_(omp x)
#else
#define DDL_OMP(x)
#endif

#include <cstddef>

namespace ddl {
inline constexpr const char* versionString() { return DDL_VERSION_STRING; }

namespace detail {
// Work (scalars touched, e.g. d * dv * N) below which a per-token loop runs on one thread: threading
// costs more than it saves there. Shared by the Delta kernels, direction normalisation and the gate.
inline constexpr std::ptrdiff_t kParallelMinWork = std::ptrdiff_t(1) << 15;
}  // namespace detail
}  // namespace ddl
