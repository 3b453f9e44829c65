#pragma once
// ddl/core/packed_sgemm.hpp: ddl's own single-precision matrix product for x86-64 CPUs with AVX2 and FMA.
//
//   C (m, n) = alpha op(A) op(B)  or  C += alpha op(A) op(B),   column-major, op(M) = M or Mᵀ
//
// Why: Eigen's float product runs at 45-60 GFLOP/s at ddl's shapes on AVX2 cores whose FMA peak is about
// 86; this one, a 16 x 6 register tile over packed panels (the loop nest of BLIS: B packed per kc x nc
// block, A per mc x kc block, the micro kernel streaming one 16-row panel of A against one 6-column
// panel of B), runs 1.1-1.45x faster (docs/results.md, "Float products"). GemmWorkspace<float> (core/gemm.hpp) uses it
// whenever the CPU has AVX2 and FMA, decided at run time, so a portable build gains too; a build for
// AVX-512 (-march=native on such a CPU) keeps Eigen's AVX-512 kernel.
//
// The bits of an output element depend on k only. Each element is summed over k in panels of kSgemmKc,
// in order, every panel from zero by one FMA per term, and the panels are added into C in order
// (C = alpha s for the first without accumulate, else C = fma(alpha, s, C)). Neither the element's
// place in its tile nor m, n or the blocking of the other dimensions enter, so a product cut into
// column or row ranges (one per thread, nn/layers/linear.hpp) gives the bits of the whole product,
// on any number of threads (tests/test_gemm.cpp checks it).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include <Eigen/Core>

#include "ddl/core/types.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DDL_PACKED_SGEMM_X86 1
#include <immintrin.h>
#else
#define DDL_PACKED_SGEMM_X86 0
#endif

namespace ddl {

namespace detail {
inline std::atomic<bool>& packedSgemmSwitch() {
  static std::atomic<bool> on{true};
  return on;
}
}  // namespace detail

// True when this build and CPU run float products with the packed kernel: an x86-64 CPU with AVX2 and
// FMA, and a build that does not target AVX-512 (there Eigen's own kernel is twice as wide).
inline bool packedSgemmSupported() {
#if DDL_PACKED_SGEMM_X86 && !defined(__AVX512F__)
  static const bool supported = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return supported;
#else
  return false;
#endif
}

// Whether GemmWorkspace<float> uses the packed kernel now: supported and not switched off.
inline bool packedSgemmEnabled() { return packedSgemmSupported() && detail::packedSgemmSwitch().load(); }

// Switches the packed kernel off (Eigen's product everywhere) or back on, for comparisons; set it before
// products run on other threads. Returns the previous setting.
inline bool setPackedSgemmEnabled(bool on) { return detail::packedSgemmSwitch().exchange(on); }

namespace detail {

// Panel sizes. kKc fixes the bits (see above); kMc x kKc floats of A (192 KiB) stay in the 512 KiB L2,
// a kKc x 6 panel of B (6 KiB) in L1; kNc bounds the packed block of B (3 MiB) for very wide products.
inline constexpr Index kSgemmMr = 16, kSgemmNr = 6, kSgemmKc = 256, kSgemmMc = 192, kSgemmNc = 3072;
// Products of at most this many rows read an untransposed B in place (measured: 1.4x at m = 32,
// slower from m = 128 on, where a packed panel is reused by 8 or more row panels).
inline constexpr Index kSgemmBInPlaceRows = 64;

// A float buffer aligned to a 64-byte cache line that only grows. Eigen's aligned_malloc (whose own
// alignment is 16 bytes in a portable build, hence the offset), so Eigen's malloc checks
// (tests/eigen_guard.hpp) see its allocations like those of Eigen's own blocking.
class PackBuffer {
 public:
  PackBuffer() = default;
  PackBuffer(const PackBuffer&) = delete;
  PackBuffer& operator=(const PackBuffer&) = delete;
  PackBuffer(PackBuffer&& o) noexcept { swap(o); }
  PackBuffer& operator=(PackBuffer&& o) noexcept {
    swap(o);
    return *this;
  }
  ~PackBuffer() { Eigen::internal::aligned_free(m_raw); }

  // At least size floats, 64-byte aligned; reallocates only to grow.
  float* reserve(Index size) {
    if (size > m_size) {
      Eigen::internal::aligned_free(m_raw);
      m_raw = nullptr;
      m_data = nullptr;
      m_size = 0;
      m_raw = Eigen::internal::aligned_malloc(static_cast<std::size_t>(size) * sizeof(float) + kAlign);
      const auto address = reinterpret_cast<std::uintptr_t>(m_raw);
      m_data = reinterpret_cast<float*>((address + kAlign - 1) / kAlign * kAlign);
      m_size = size;
    }
    return m_data;
  }
  float* data() { return m_data; }

 private:
  static constexpr std::uintptr_t kAlign = 64;
  void swap(PackBuffer& o) noexcept {
    std::swap(m_raw, o.m_raw);
    std::swap(m_data, o.m_data);
    std::swap(m_size, o.m_size);
  }
  void* m_raw = nullptr;
  float* m_data = nullptr;
  Index m_size = 0;
};

#if DDL_PACKED_SGEMM_X86

// C(16 x 6, column stride ldc) = alpha S (first) or fma(alpha, S, C), S = Ap (16 x kc) op(B) (kc x 6),
// each term one FMA in k order. Ap: 16 floats per k. B: element (p, j) at B[p bp + j bj], so the kernel
// reads a packed panel (bp = 6, bj = 1) or six columns in place (bp = 1, bj = their stride).
__attribute__((target("avx2,fma"))) inline void sgemmMicroKernel(Index kc, const float* Ap, const float* B, Index bp,
                                                                  Index bj, float* C, Index ldc, float alpha,
                                                                  bool first) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  const float* b0 = B;
  const float* b3 = B + 3 * bj;
  for (Index p = 0; p < kc; ++p, Ap += kSgemmMr, b0 += bp, b3 += bp) {
    const __m256 a0 = _mm256_load_ps(Ap), a1 = _mm256_load_ps(Ap + 8);
    __m256 b = _mm256_broadcast_ss(b0);
    c00 = _mm256_fmadd_ps(a0, b, c00), c01 = _mm256_fmadd_ps(a1, b, c01);
    b = _mm256_broadcast_ss(b0 + bj);
    c10 = _mm256_fmadd_ps(a0, b, c10), c11 = _mm256_fmadd_ps(a1, b, c11);
    b = _mm256_broadcast_ss(b0 + 2 * bj);
    c20 = _mm256_fmadd_ps(a0, b, c20), c21 = _mm256_fmadd_ps(a1, b, c21);
    b = _mm256_broadcast_ss(b3);
    c30 = _mm256_fmadd_ps(a0, b, c30), c31 = _mm256_fmadd_ps(a1, b, c31);
    b = _mm256_broadcast_ss(b3 + bj);
    c40 = _mm256_fmadd_ps(a0, b, c40), c41 = _mm256_fmadd_ps(a1, b, c41);
    b = _mm256_broadcast_ss(b3 + 2 * bj);
    c50 = _mm256_fmadd_ps(a0, b, c50), c51 = _mm256_fmadd_ps(a1, b, c51);
  }
  const __m256 al = _mm256_set1_ps(alpha);
  // A lambda would not inherit the function's target: the stores are spelled out per column.
#define DDL_SGEMM_STORE(col, lo, hi)                                                     \
  do {                                                                                   \
    float* c = C + (col) * ldc;                                                          \
    if (first) {                                                                         \
      _mm256_storeu_ps(c, _mm256_mul_ps(al, lo));                                        \
      _mm256_storeu_ps(c + 8, _mm256_mul_ps(al, hi));                                    \
    } else {                                                                             \
      _mm256_storeu_ps(c, _mm256_fmadd_ps(al, lo, _mm256_loadu_ps(c)));                  \
      _mm256_storeu_ps(c + 8, _mm256_fmadd_ps(al, hi, _mm256_loadu_ps(c + 8)));          \
    }                                                                                    \
  } while (false)
  DDL_SGEMM_STORE(0, c00, c01);
  DDL_SGEMM_STORE(1, c10, c11);
  DDL_SGEMM_STORE(2, c20, c21);
  DDL_SGEMM_STORE(3, c30, c31);
  DDL_SGEMM_STORE(4, c40, c41);
  DDL_SGEMM_STORE(5, c50, c51);
#undef DDL_SGEMM_STORE
}

// Packs rows [i0, i0 + mc) and depths [p0, p0 + kc) of op(A) into 16-row panels, zero-padded: panel r
// holds op(A)(i0 + 16 r + i, p0 + p) at r 16 kc + 16 p + i.
inline void sgemmPackA(const float* A, Index lda, bool transA, Index i0, Index mc, Index p0, Index kc, float* Ap) {
  for (Index ir = 0; ir < mc; ir += kSgemmMr, Ap += kSgemmMr * kc) {
    const Index mr = std::min(kSgemmMr, mc - ir);
    if (!transA) {  // op(A)(i, p) = A[p lda + i]: 16 contiguous rows per depth
      for (Index p = 0; p < kc; ++p) {
        const float* src = A + (p0 + p) * lda + i0 + ir;
        float* dst = Ap + p * kSgemmMr;
        if (mr == kSgemmMr) {
          std::memcpy(dst, src, sizeof(float) * kSgemmMr);
        } else {
          for (Index i = 0; i < mr; ++i) dst[i] = src[i];
          for (Index i = mr; i < kSgemmMr; ++i) dst[i] = 0.0f;
        }
      }
    } else {  // op(A)(i, p) = A[i lda + p]: each row contiguous in depth
      for (Index i = 0; i < mr; ++i) {
        const float* src = A + (i0 + ir + i) * lda + p0;
        for (Index p = 0; p < kc; ++p) Ap[p * kSgemmMr + i] = src[p];
      }
      for (Index i = mr; i < kSgemmMr; ++i)
        for (Index p = 0; p < kc; ++p) Ap[p * kSgemmMr + i] = 0.0f;
    }
  }
}

// Packs columns [j0, j0 + nc) and depths [p0, p0 + kc) of op(B) into 6-column panels, zero-padded:
// panel r holds op(B)(p0 + p, j0 + 6 r + j) at r 6 kc + 6 p + j. With inPlace the full panels of an
// untransposed B are left out: the kernel reads them from B.
inline void sgemmPackB(const float* B, Index ldb, bool transB, Index j0, Index nc, Index p0, Index kc, float* Bp,
                       bool inPlace) {
  for (Index jr = 0; jr < nc; jr += kSgemmNr, Bp += kSgemmNr * kc) {
    const Index nr = std::min(kSgemmNr, nc - jr);
    if (inPlace && nr == kSgemmNr) continue;
    if (!transB) {  // op(B)(p, j) = B[j ldb + p]: each column contiguous in depth
      const float* col[kSgemmNr];
      for (Index j = 0; j < nr; ++j) col[j] = B + (j0 + jr + j) * ldb + p0;
      if (nr == kSgemmNr) {
        for (Index p = 0; p < kc; ++p)
          for (Index j = 0; j < kSgemmNr; ++j) Bp[p * kSgemmNr + j] = col[j][p];
      } else {
        for (Index p = 0; p < kc; ++p) {
          for (Index j = 0; j < nr; ++j) Bp[p * kSgemmNr + j] = col[j][p];
          for (Index j = nr; j < kSgemmNr; ++j) Bp[p * kSgemmNr + j] = 0.0f;
        }
      }
    } else {  // op(B)(p, j) = B[p ldb + j]: the panel's columns contiguous per depth
      for (Index p = 0; p < kc; ++p) {
        const float* src = B + (p0 + p) * ldb + j0 + jr;
        float* dst = Bp + p * kSgemmNr;
        for (Index j = 0; j < nr; ++j) dst[j] = src[j];
        for (Index j = nr; j < kSgemmNr; ++j) dst[j] = 0.0f;
      }
    }
  }
}

// Sizes the packing buffers for a product of op(A): (m, k) times op(B): (k, n) (they only grow).
inline void sgemmReserve(Index m, Index n, Index k, PackBuffer& bufA, PackBuffer& bufB) {
  const auto roundUp = [](Index x, Index r) { return (x + r - 1) / r * r; };
  const Index kc = std::min(kSgemmKc, k);
  bufA.reserve(kc * roundUp(std::min(kSgemmMc, m), kSgemmMr));
  bufB.reserve(kc * roundUp(std::min(kSgemmNc, n), kSgemmNr));
}

// The loop nest over packed blocks; see the file comment. m, n, k >= 1; C must not alias A or B.
__attribute__((target("avx2,fma"))) inline void packedSgemm(Index m, Index n, Index k, const float* A, Index lda,
                                                             bool transA, const float* B, Index ldb, bool transB,
                                                             float* C, Index ldc, float alpha, bool accumulate,
                                                             PackBuffer& bufA, PackBuffer& bufB) {
  sgemmReserve(m, n, k, bufA, bufB);
  float* Ap = bufA.data();
  float* Bp = bufB.data();
  // Few row panels reuse a packed B panel too little to repay packing it: an untransposed B (columns
  // contiguous in depth) is then read in place. The arithmetic is the same either way.
  const bool bInPlace = !transB && m <= kSgemmBInPlaceRows;
  alignas(32) float tile[kSgemmMr * kSgemmNr];
  for (Index jc = 0; jc < n; jc += kSgemmNc) {
    const Index nc = std::min(kSgemmNc, n - jc);
    for (Index pc = 0; pc < k; pc += kSgemmKc) {
      const Index kc = std::min(kSgemmKc, k - pc);
      const bool first = !accumulate && pc == 0;
      sgemmPackB(B, ldb, transB, jc, nc, pc, kc, Bp, bInPlace);
      for (Index ic = 0; ic < m; ic += kSgemmMc) {
        const Index mc = std::min(kSgemmMc, m - ic);
        sgemmPackA(A, lda, transA, ic, mc, pc, kc, Ap);
        for (Index jr = 0; jr < nc; jr += kSgemmNr) {
          const Index nr = std::min(kSgemmNr, nc - jr);
          for (Index ir = 0; ir < mc; ir += kSgemmMr) {
            const Index mr = std::min(kSgemmMr, mc - ir);
            float* c = C + (jc + jr) * ldc + ic + ir;
            const float* ap = Ap + ir * kc;
            const bool inPlace = bInPlace && nr == kSgemmNr;
            const float* bp = inPlace ? B + (jc + jr) * ldb + pc : Bp + jr * kc;
            const Index bStep = inPlace ? 1 : kSgemmNr, bCol = inPlace ? ldb : 1;
            if (mr == kSgemmMr && nr == kSgemmNr) {
              sgemmMicroKernel(kc, ap, bp, bStep, bCol, c, ldc, alpha, first);
              continue;
            }
            // An edge tile: the same sums into a scratch tile (alpha 1 keeps them exact), then the
            // same final operation per element as the kernel's.
            sgemmMicroKernel(kc, ap, bp, bStep, bCol, tile, kSgemmMr, 1.0f, true);
            for (Index j = 0; j < nr; ++j)
              for (Index i = 0; i < mr; ++i) {
                float& out = c[j * ldc + i];
                out = first ? alpha * tile[j * kSgemmMr + i] : std::fma(alpha, tile[j * kSgemmMr + i], out);
              }
          }
        }
      }
    }
  }
}

#endif  // DDL_PACKED_SGEMM_X86

}  // namespace detail
}  // namespace ddl
