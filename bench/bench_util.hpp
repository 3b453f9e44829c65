// bench_util.hpp: the helpers the benchmark programs share, kept once so that every program times,
// summarizes and seeds its operands alike (they were copied into each bench_*.cpp before):
//   Stopwatch     wall clock since construction, seconds() (steady_clock)
//   median(v)     median of per-iteration times (mean of the two middle ones for an even count)
//   minimum(v)    smallest of them
//   fillNormal    M(i, j) = scale · N(0, 1) from ddl::Rng(seed), column by column
// (bench_conv keeps its own upper median, nth_element's middle, which its published ratios used.)
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"

namespace ddl_bench {

struct Stopwatch {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
};

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline double minimum(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

template <class Mat>
void fillNormal(Mat& M, std::uint64_t seed, typename Mat::Scalar scale) {
  using S = typename Mat::Scalar;
  ddl::Rng rng(seed);
  for (ddl::Index j = 0; j < M.cols(); ++j)
    for (ddl::Index i = 0; i < M.rows(); ++i) M(i, j) = scale * static_cast<S>(rng.normal());
}

}  // namespace ddl_bench
