#pragma once
// ddl/core/bf16.hpp: bfloat16 numbers as the bf16 precision policy uses them (docs/decisions.md, "bf16").
//
// A bf16 is the upper 16 bits of a float: 8 exponent bits like a float, 7 mantissa bits. Floats become bf16
// by rounding to nearest, ties to even, on the bits, so subnormals round like any number (they are not
// flushed), Inf stays Inf, a float too large for bf16 rounds to Inf, and a NaN stays a quiet NaN of the
// same sign. Every conversion in ddl goes through these functions: the emulated products and the inputs
// handed to oneDNN's bf16 kernel are rounded the same way, so they differ only in how sums are ordered.
#include <cstdint>
#include <cstring>

#include "ddl/core/types.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DDL_BF16_X86 1
#include <immintrin.h>
#else
#define DDL_BF16_X86 0
#endif

namespace ddl {

// The bf16 nearest to x (ties to even), as its 16 bits.
inline std::uint16_t toBf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

// The float whose upper bits are b (exact).
inline float fromBf16(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// x rounded to the nearest bf16, held in a float.
inline float roundToBf16(float x) { return fromBf16(toBf16(x)); }

namespace detail {

#if DDL_BF16_X86
// 16 floats to bf16 with the rounding of toBf16, in AVX-512 integer lanes (vcvtneps2bf16 would flush
// subnormals, and the emulation must match bit for bit).
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void toBf16x16(const float* src, std::uint16_t* dst, __mmask16 k) {
  const __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(k, src));
  const __m512i absU = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(absU, _mm512_set1_epi32(0x7f800000));
  // The maskz forms: g++ 12 warns about the undefined vectors of the plain ones.
  const __m512i high = _mm512_maskz_srli_epi32(0xffff, u, 16);
  const __m512i lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
  __m512i r = _mm512_maskz_srli_epi32(0xffff, _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  r = _mm512_mask_or_epi32(r, nan, high, _mm512_set1_epi32(0x0040));
  _mm256_mask_storeu_epi16(dst, k, _mm512_maskz_cvtepi32_epi16(0xffff, r));
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void toBf16Avx512(const float* src, Index n, std::uint16_t* dst) {
  Index i = 0;
  for (; i + 16 <= n; i += 16) toBf16x16(src + i, dst + i, 0xffff);
  if (i < n) toBf16x16(src + i, dst + i, static_cast<__mmask16>((1u << (n - i)) - 1u));
}

inline bool bf16ConvertAvx512() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  }();
  return has;
}
#endif

// dst[0, n) = toBf16(src[0, n)).
inline void toBf16(const float* src, Index n, std::uint16_t* dst) {
#if DDL_BF16_X86
  if (bf16ConvertAvx512()) {
    toBf16Avx512(src, n, dst);
    return;
  }
#endif
  for (Index i = 0; i < n; ++i) dst[i] = ddl::toBf16(src[i]);
}

}  // namespace detail

// Column-major (rows, cols) at src with column stride ld -> dst packed with column stride rows (bf16 bits).
inline void toBf16(const float* src, Index ld, Index rows, Index cols, std::uint16_t* dst) {
  if (ld == rows) {
    detail::toBf16(src, rows * cols, dst);
    return;
  }
  for (Index j = 0; j < cols; ++j) detail::toBf16(src + j * ld, rows, dst + j * rows);
}

// Column-major (rows, cols) of bf16 bits, column stride ld -> floats, column stride ldDst (exact).
inline void fromBf16(const std::uint16_t* src, Index ld, Index rows, Index cols, float* dst, Index ldDst) {
  for (Index j = 0; j < cols; ++j)
    for (Index i = 0; i < rows; ++i) dst[i + j * ldDst] = fromBf16(src[i + j * ld]);
}

}  // namespace ddl
