#pragma once
// ddl/diag/exact_tests.hpp: the exact tests of the claim test (docs/claims.md, "Statistics"): Fisher's
// exact test on a 2x2 table of solved / unsolved runs of two kinds, and the paired sign test on a per-seed
// quantity (epochs to a threshold). Both are two-sided and exact (no large-sample approximation), so they
// are valid for 10 seeds.
//   const ddl::FisherExact f = ddl::fisherExact(9, 1, 3, 7);        // kind A 9/10 solved, kind B 3/10
//   const ddl::SignTest s = ddl::signTest(epochsA, epochsB);        // sign of b - a per seed
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ddl/core/error.hpp"

namespace ddl {

namespace detail {
// ln C(n, k) for 0 <= k <= n.
inline double logChoose(std::int64_t n, std::int64_t k) {
  return std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(k) + 1) -
         std::lgamma(static_cast<double>(n - k) + 1);
}
}  // namespace detail

// P(B <= k) for B ~ Binomial(n, 1/2), n >= 0 (0 for k < 0, 1 for k >= n).
inline double binomialHalfLowerTail(std::int64_t k, std::int64_t n) {
  require(n >= 0, "ddl::binomialHalfLowerTail", "n must be >= 0, got ", n);
  if (k < 0) return 0;
  if (k >= n) return 1;
  double sum = 0;
  if (n <= 1000) {
    // C(n, i) / 2^n by C(n, i + 1) = C(n, i) (n - i) / (i + 1): exact while C(n, i) < 2^53 (n <= 56).
    double term = std::ldexp(1.0, -static_cast<int>(n));
    for (std::int64_t i = 0; i <= k; ++i) {
      sum += term;
      term = term * static_cast<double>(n - i) / static_cast<double>(i + 1);
    }
  } else {
    for (std::int64_t i = 0; i <= k; ++i)
      sum += std::exp(detail::logChoose(n, i) - static_cast<double>(n) * std::log(2.0));
  }
  return std::min(sum, 1.0);
}

// Fisher's exact test of the table
//            success  failure
//   row 1       a        b
//   row 2       c        d
// conditional on its margins (the count a is hypergeometric). Two-sided p as R's fisher.test and scipy's
// fisher_exact compute it: the sum of the probabilities of the tables with the same margins that are no
// more probable than the observed one, "no more" with a relative tolerance of 1e-7 (tables exactly as
// probable, e.g. mirror images, are counted despite rounding).
struct FisherExact {
  std::int64_t a = 0, b = 0, c = 0, d = 0;
  double rate1 = 0;      // a / (a + b), the success rate of row 1 (0 for an empty row)
  double rate2 = 0;      // c / (c + d)
  double p = 1;          // two-sided
  double pObserved = 1;  // the probability of the observed table given the margins
};

// ValueError on a negative count.
inline FisherExact fisherExact(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  require(a >= 0 && b >= 0 && c >= 0 && d >= 0, "ddl::fisherExact", "counts must be >= 0, got a = ", a, ", b = ", b,
          ", c = ", c, ", d = ", d);
  FisherExact r;
  r.a = a, r.b = b, r.c = c, r.d = d;
  r.rate1 = a + b > 0 ? static_cast<double>(a) / static_cast<double>(a + b) : 0;
  r.rate2 = c + d > 0 ? static_cast<double>(c) / static_cast<double>(c + d) : 0;
  const std::int64_t row1 = a + b, col1 = a + c, n = a + b + c + d;
  const std::int64_t lo = std::max<std::int64_t>(0, col1 - (n - row1)), hi = std::min(row1, col1);
  auto logP = [&](std::int64_t x) {
    return detail::logChoose(row1, x) + detail::logChoose(n - row1, col1 - x) - detail::logChoose(n, col1);
  };
  const double observed = logP(a);
  const double bound = observed + std::log1p(1e-7);
  double sum = 0;
  for (std::int64_t x = lo; x <= hi; ++x) {
    const double lp = logP(x);
    if (lp <= bound) sum += std::exp(lp);
  }
  r.pObserved = std::exp(observed);
  r.p = std::min(1.0, sum);
  return r;
}

// The paired two-sided sign test of b[i] against a[i]: under the null each untied pair is b > a or b < a
// with probability 1/2; ties are dropped. p = min(1, 2 P(B <= min(greater, less))), B ~ Binomial(greater
// + less, 1/2), R's binom.test on the untied pairs; 1 when every pair is tied.
struct SignTest {
  int pairs = 0;    // all pairs
  int greater = 0;  // b > a
  int less = 0;     // b < a
  int ties = 0;     // b == a (dropped)
  double p = 1;     // two-sided
};

// a, b: one value per seed. Only the order of a[i] and b[i] matters, so a run that never reached a
// threshold may carry +infinity (two such runs tie). ValueError on different sizes or a NaN.
inline SignTest signTest(const std::vector<double>& a, const std::vector<double>& b) {
  const char* fn = "ddl::signTest";
  require(a.size() == b.size(), fn, "a has ", a.size(), " values but b has ", b.size(), " (one pair per seed)");
  SignTest r;
  r.pairs = static_cast<int>(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    require(!std::isnan(a[i]) && !std::isnan(b[i]), fn, "pair ", i, " holds a NaN: a = ", a[i], ", b = ", b[i]);
    (b[i] > a[i] ? r.greater : b[i] < a[i] ? r.less : r.ties)++;
  }
  const int n = r.greater + r.less;
  r.p = std::min(1.0, 2 * binomialHalfLowerTail(std::min(r.greater, r.less), n));
  return r;
}

}  // namespace ddl
