#pragma once
// ddl/core/config.hpp: version and the one place where optional dependencies become macros.
// The CMake targets of the optional parts define them (ddl::openmp DDL_WITH_OPENMP=1, ddl::zlib
// DDL_WITH_ZLIB=1, ddl::mpi DDL_WITH_MPI=1, ddl::json DDL_WITH_JSON=1, ddl::dnnl DDL_WITH_DNNL=1); ddl::ddl
// alone defines none.
// Without them: OpenMP follows the compiler (-fopenmp), nlohmann-json is used when its header is
// reachable, zlib and MPI are off (they need libraries at link time, so only an explicit choice turns
// them on), and so is oneDNN.

#define DDL_VERSION_MAJOR 0
#define DDL_VERSION_MINOR 1
#define DDL_VERSION_PATCH 0
#define DDL_VERSION_STRING "0.1.0"

#ifndef DDL_WITH_ZLIB
#define DDL_WITH_ZLIB 0
#endif

#ifndef DDL_WITH_MPI
#define DDL_WITH_MPI 0
#endif

// DDL_WITH_DNNL: oneDNN, the bf16 products' kernel (ddl/dnnl/matmul.hpp); set by ddl::dnnl.
#ifndef DDL_WITH_DNNL
#define DDL_WITH_DNNL 0
#endif

#ifndef DDL_WITH_JSON
#if defined(__has_include)
#if __has_include(<nlohmann/json.hpp>)
#define DDL_WITH_JSON 1
#endif
#endif
#endif
#ifndef DDL_WITH_JSON
#define DDL_WITH_JSON 0
#endif

#ifndef DDL_WITH_OPENMP
#ifdef _OPENMP
#define DDL_WITH_OPENMP 1
#else
#define DDL_WITH_OPENMP 0
#endif
#endif

// DDL_EXTERN_TEMPLATES: 1 when the program links ddl::compiled, the library that holds the float and
// double instantiations of the models (DeltaNet, ConvDeltaNet, DeltaLM and everything they call); their
// headers then declare those instantiations extern, so a program does not compile them again
// (docs/building.md). 0 (the default) is the header-only use.
#ifndef DDL_EXTERN_TEMPLATES
#define DDL_EXTERN_TEMPLATES 0
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

// ddl::compiled (docs/building.md): with DDL_EXTERN_TEMPLATES=1 (set by linking it) the float and double
// instantiations of the models, of the layers and blocks of nn/ and of the audit's spectrum sampler are
// declared extern. DDL_EXTERN_LAYERS=0 keeps the layers, blocks and sampler compiled in the unit (the
// tests that check them under Eigen's allocation check and throwing asserts, tests/eigen_guard.hpp, do).
#ifndef DDL_EXTERN_TEMPLATES
#define DDL_EXTERN_TEMPLATES 0
#endif
#ifndef DDL_EXTERN_LAYERS
#define DDL_EXTERN_LAYERS DDL_EXTERN_TEMPLATES
#endif
