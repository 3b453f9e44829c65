// bench_util.hpp: the helpers the benchmark programs share, kept once so that every program times,
// summarizes and seeds its operands alike (they were copied into each bench_*.cpp before):
//   Stopwatch     wall clock since construction, seconds() (steady_clock)
//   median(v)     median of per-iteration times (mean of the two middle ones for an even count)
//   minimum(v)    smallest of them
//   fillNormal    M(i, j) = scale · N(0, 1) from ddl::Rng(seed), column by column
//   PrecisionArg  a benchmark's precision argument (0 float, 1 bf16 on oneDNN): sets the product
//                 precision for the benchmark's lifetime, or says why bf16 cannot run on this CPU
//   Bf16Step      one training step under the current precision, the weights' bf16 copies made once per
//                 step and released before the update, as ddl::taskStep does (train/task_step.hpp)
// (bench_conv keeps its own upper median, nth_element's middle, which its published ratios used.)
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ddl/core/bf16_weights.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/precision.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#if DDL_WITH_DNNL
#include "ddl/dnnl/bf16.hpp"
#endif

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

// precision 0: float products; 1: bf16 products on oneDNN's native bf16 matmul (the emulation is for tests,
// not for timing). refusal() is empty when the precision is in force, else the reason (the caller skips).
class PrecisionArg {
 public:
  explicit PrecisionArg(std::int64_t precision) : m_previous(ddl::productPrecision()) {
    if (precision == 0) {
      ddl::setProductPrecision(ddl::Precision::Float);
      return;
    }
#if DDL_WITH_DNNL
    m_refusal = ddl::installDnnlBf16() ? "" : ddl::dnnlBf16Refusal();
#else
    m_refusal = "this build has no oneDNN (ddl::dnnl), so no native bf16 products";
#endif
    if (m_refusal.empty()) ddl::setProductPrecision(ddl::Precision::BF16);
  }
  ~PrecisionArg() { ddl::setProductPrecision(m_previous); }
  PrecisionArg(const PrecisionArg&) = delete;
  PrecisionArg& operator=(const PrecisionArg&) = delete;

  const std::string& refusal() const { return m_refusal; }
  static const char* name(std::int64_t precision) { return precision == 0 ? "float" : "bf16"; }

 private:
  ddl::Precision m_previous;
  std::string m_refusal;
};

struct Bf16Step {
  ddl::Bf16Weights bf16;
  // forwardBackward() under the bf16 copies of params (a module or ParamList) when the policy is bf16,
  // then update() outside their scope; returns forwardBackward's value.
  template <class Walk, class ForwardBackward, class Update>
  auto run(Walk& params, ForwardBackward&& forwardBackward, Update&& update) {
    const bool bf16Step = ddl::productPrecision() == ddl::Precision::BF16;
    if (bf16Step) bf16.refresh(params);
    ddl::Bf16WeightScope scope(bf16Step ? &bf16 : nullptr);
    auto value = forwardBackward();
    scope.end();
    update();
    return value;
  }
};

}  // namespace ddl_bench
