#pragma once
// ddl/diag/confidence_intervals.hpp: the intervals the claim test reports (docs/claims.md, "Statistics"):
// for a solve rate x/n Wilson's score interval and the exact Clopper–Pearson interval, for the difference
// of two independent rates Newcombe's hybrid score interval (his method 10, built from the two Wilson
// intervals), and for paired values the median of the differences with its distribution-free interval
// from the sign test (order statistics of the differences).
//   const ddl::Interval ci = ddl::wilsonInterval(9, 10);              // 0.95 by default
//   const ddl::Interval diff = ddl::newcombeDifference(9, 10, 3, 10);  // for 9/10 - 3/10
//   const ddl::MedianDifference m = ddl::pairedMedianDifference(epochsA, epochsB);  // b - a
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/diag/exact_tests.hpp"
#include "ddl/diag/t_test.hpp"

namespace ddl {

struct Interval {
  double lower = 0;
  double upper = 0;
};

namespace detail {
inline void requireRate(const char* fn, std::int64_t x, std::int64_t n, double confidence) {
  require(n >= 1 && x >= 0 && x <= n, fn, "successes x = ", x, " expected in [0, n] with n >= 1, n = ", n);
  require(confidence > 0 && confidence < 1, fn, "confidence expected in (0, 1), found ", confidence);
}
// The root of an increasing f on [0, 1] (f(0) <= 0 <= f(1)) by bisection to double precision.
template <class F>
double bisectUnit(F f) {
  double lo = 0, hi = 1;
  for (int i = 0; i < 200 && hi - lo > 1e-16; ++i) {
    const double mid = (lo + hi) / 2;
    (f(mid) < 0 ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}
}  // namespace detail

// The standard normal quantile: Φ(z) = p for p in (0, 1) (Φ by std::erfc, inverted by bisection to double
// precision). normalQuantile(0.975) = 1.959963984540054.
inline double normalQuantile(double p) {
  require(p > 0 && p < 1, "ddl::normalQuantile", "p expected in (0, 1), found ", p);
  double lo = -40, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    if (mid == lo || mid == hi) break;
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

// Wilson's score interval for a rate of x successes in n trials (0 <= x <= n, n >= 1).
inline Interval wilsonInterval(std::int64_t x, std::int64_t n, double confidence = 0.95) {
  detail::requireRate("ddl::wilsonInterval", x, n, confidence);
  const double z = normalQuantile(1 - (1 - confidence) / 2), z2 = z * z;
  const double nn = static_cast<double>(n), p = static_cast<double>(x) / nn;
  const double denominator = 1 + z2 / nn;
  const double centre = (p + z2 / (2 * nn)) / denominator;
  const double half = z / denominator * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn));
  // x = 0 and x = n give exactly 0 and 1 on paper; keep them so despite rounding.
  return {x == 0 ? 0.0 : std::max(0.0, centre - half), x == n ? 1.0 : std::min(1.0, centre + half)};
}

// The exact (Clopper–Pearson) interval: the rates p whose binomial tails at x are both above
// (1 - confidence) / 2, i.e. the beta quantiles B(α/2; x, n-x+1) and B(1-α/2; x+1, n-x), found by bisection
// on the regularized incomplete beta function. 0 <= x <= n, n >= 1.
inline Interval clopperPearsonInterval(std::int64_t x, std::int64_t n, double confidence = 0.95) {
  detail::requireRate("ddl::clopperPearsonInterval", x, n, confidence);
  const double tail = (1 - confidence) / 2, xd = static_cast<double>(x), nd = static_cast<double>(n);
  Interval r{0, 1};
  // P(X >= x | p) = I_p(x, n - x + 1) grows with p; the lower bound is where it reaches the tail.
  if (x > 0) r.lower = detail::bisectUnit([&](double p) { return incompleteBeta(xd, nd - xd + 1, p) - tail; });
  // P(X <= x | p) = 1 - I_p(x + 1, n - x) falls with p; the upper bound is where it falls to the tail.
  if (x < n) r.upper = detail::bisectUnit([&](double p) { return incompleteBeta(xd + 1, nd - xd, p) - (1 - tail); });
  return r;
}

// Newcombe's hybrid score interval for the difference x1/n1 - x2/n2 of two independent rates (his method
// 10): with Wilson intervals (l1, u1), (l2, u2) and D = p1 - p2,
//   [D - sqrt((p1 - l1)² + (u2 - p2)²),  D + sqrt((u1 - p1)² + (p2 - l2)²)].
inline Interval newcombeDifference(std::int64_t x1, std::int64_t n1, std::int64_t x2, std::int64_t n2,
                                   double confidence = 0.95) {
  const char* fn = "ddl::newcombeDifference";
  detail::requireRate(fn, x1, n1, confidence);
  detail::requireRate(fn, x2, n2, confidence);
  const double p1 = static_cast<double>(x1) / static_cast<double>(n1);
  const double p2 = static_cast<double>(x2) / static_cast<double>(n2);
  const Interval w1 = wilsonInterval(x1, n1, confidence), w2 = wilsonInterval(x2, n2, confidence);
  const double d = p1 - p2;
  return {d - std::hypot(p1 - w1.lower, w2.upper - p2), d + std::hypot(w1.upper - p1, p2 - w2.lower)};
}

// The median of paired differences b[i] - a[i] and its sign-test interval: with the differences sorted,
// [d_(k), d_(n+1-k)] for the largest k >= 1 with P(B <= k - 1) <= (1 - confidence) / 2, B ~ Binomial(n,
// 1/2); its exact coverage is 1 - 2 P(B <= k - 1) >= confidence (0.9785 for n = 10 at 0.95: [d_(2), d_(9)]).
// When no k reaches the confidence (n <= 5 at 0.95) the interval is the whole line, coverage 1, and
// `attained` is false.
struct MedianDifference {
  int n = 0;
  double median = 0;  // of b - a; the mean of the two middle values for even n
  double lower = -std::numeric_limits<double>::infinity();
  double upper = std::numeric_limits<double>::infinity();
  double coverage = 1;    // exact coverage of [lower, upper]
  bool attained = false;  // a finite interval with coverage >= confidence exists
};

// a, b: one finite value per seed, at least one pair. ValueError otherwise.
inline MedianDifference pairedMedianDifference(const std::vector<double>& a, const std::vector<double>& b,
                                               double confidence = 0.95) {
  const char* fn = "ddl::pairedMedianDifference";
  require(a.size() == b.size(), fn, "a has ", a.size(), " values but b has ", b.size(), " (one pair per seed)");
  require(!a.empty(), fn, "needs at least one pair");
  require(confidence > 0 && confidence < 1, fn, "confidence expected in (0, 1), found ", confidence);
  std::vector<double> d(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    require(std::isfinite(a[i]) && std::isfinite(b[i]), fn, "pair ", i, " is not finite: a = ", a[i], ", b = ", b[i],
            " (censor a run that never reached the threshold at a finite value, docs/claims.md)");
    d[i] = b[i] - a[i];
  }
  std::sort(d.begin(), d.end());
  MedianDifference r;
  r.n = static_cast<int>(d.size());
  const std::size_t half = d.size() / 2;
  r.median = d.size() % 2 ? d[half] : (d[half - 1] + d[half]) / 2;
  const double tail = (1 - confidence) / 2;
  int k = 0;
  while (k + 1 <= (r.n + 1) / 2 && binomialHalfLowerTail(k, r.n) <= tail) ++k;  // k - 1 = the last index that fits
  if (k >= 1) {
    r.lower = d[static_cast<std::size_t>(k - 1)];
    r.upper = d[static_cast<std::size_t>(r.n - k)];
    r.coverage = 1 - 2 * binomialHalfLowerTail(k - 1, r.n);
    r.attained = true;
  }
  return r;
}

}  // namespace ddl
