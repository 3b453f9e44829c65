#pragma once
// ddl/diag/t_test.hpp: Student's t test of paired differences, for comparing runs over seeds (the
// residual ablation compares delta, write_only and additive this way).
//   const ddl::PairedTTest r = ddl::pairedTTest(accuracyA, accuracyB);  // b - a per seed
//   r.meanDiff, r.t, r.df, r.p (two-sided), r.better / r.worse / r.ties
// The p-value comes from the regularized incomplete beta function,
// P(|T| >= |t|) = I_{nu / (nu + t^2)}(nu / 2, 1 / 2), evaluated by its continued fraction.
#include <cmath>
#include <limits>
#include <vector>

#include "ddl/core/error.hpp"

namespace ddl {

namespace detail {
// Continued fraction of I_x(a, b) (modified Lentz), converging for x < (a + 1) / (a + b + 2).
inline double betaContinuedFraction(double a, double b, double x) {
  const double tiny = 1e-300;
  auto guard = [tiny](double v) { return std::fabs(v) < tiny ? tiny : v; };
  double c = 1, d = 1 / guard(1 - (a + b) * x / (a + 1));
  double h = d;
  for (int m = 1; m <= 300; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
    d = 1 / guard(1 + aa * d);
    c = guard(1 + aa / c);
    h *= d * c;
    aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
    d = 1 / guard(1 + aa * d);
    c = guard(1 + aa / c);
    const double step = d * c;
    h *= step;
    if (std::fabs(step - 1) < 1e-15) break;
  }
  return h;
}
}  // namespace detail

// I_x(a, b), the regularized incomplete beta function, for a, b > 0 and x in [0, 1].
inline double incompleteBeta(double a, double b, double x) {
  const char* fn = "ddl::incompleteBeta";
  require(a > 0 && b > 0, fn, "a and b must be > 0, got a = ", a, ", b = ", b);
  require(x >= 0 && x <= 1, fn, "x must be in [0, 1], got ", x);
  if (x == 0) return 0;
  if (x == 1) return 1;
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * detail::betaContinuedFraction(a, b, x) / a;
  return 1 - front * detail::betaContinuedFraction(b, a, 1 - x) / b;
}

// Two-sided p-value of Student's t with nu > 0 degrees of freedom: P(|T| >= |t|). An infinite t gives 0.
inline double studentTwoSidedP(double t, double nu) {
  const char* fn = "ddl::studentTwoSidedP";
  require(!std::isnan(t), fn, "t is NaN");
  require(nu > 0, fn, "degrees of freedom must be > 0, got ", nu);
  if (std::isinf(t)) return 0;
  return incompleteBeta(nu / 2, 0.5, nu / (nu + t * t));
}

struct PairedTTest {
  int n = 0;                 // pairs
  double meanDiff = 0;       // mean of b - a
  double sdDiff = 0;         // sample standard deviation of b - a (n - 1)
  bool defined = false;      // n >= 2 and sdDiff > 0: t, df and p exist
  double t = std::numeric_limits<double>::quiet_NaN();
  int df = 0;                // n - 1
  double p = std::numeric_limits<double>::quiet_NaN();  // two-sided
  int better = 0, worse = 0, ties = 0;                  // pairs with b > a, b < a, b == a
};

// The t test of the paired differences b[i] - a[i]. Throws ValueError when the sizes differ or a
// value is not finite.
inline PairedTTest pairedTTest(const std::vector<double>& a, const std::vector<double>& b) {
  const char* fn = "ddl::pairedTTest";
  require(a.size() == b.size(), fn, "a has ", a.size(), " values but b has ", b.size(), " (one pair per seed)");
  PairedTTest r;
  r.n = static_cast<int>(a.size());
  r.df = r.n > 0 ? r.n - 1 : 0;
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    require(std::isfinite(a[i]) && std::isfinite(b[i]), fn, "pair ", i, " is not finite: a = ", a[i], ", b = ", b[i]);
    sum += b[i] - a[i];
    (b[i] > a[i] ? r.better : b[i] < a[i] ? r.worse : r.ties)++;
  }
  if (r.n == 0) return r;
  r.meanDiff = sum / r.n;
  double ss = 0;
  for (std::size_t i = 0; i < a.size(); ++i) ss += (b[i] - a[i] - r.meanDiff) * (b[i] - a[i] - r.meanDiff);
  r.sdDiff = r.n >= 2 ? std::sqrt(ss / (r.n - 1)) : 0;
  r.defined = r.n >= 2 && r.sdDiff > 0;
  if (r.defined) {
    r.t = r.meanDiff / (r.sdDiff / std::sqrt(static_cast<double>(r.n)));
    r.p = studentTwoSidedP(r.t, r.df);
  }
  return r;
}

}  // namespace ddl
