// Tests of ddl/diag/t_test.hpp against closed forms of Student's t (nu = 1, 2), a quadrature of its
// density, and hand-computed paired tests.
#include <cmath>
#include <vector>

#include "catch_compat.hpp"
#include "ddl/diag/t_test.hpp"

namespace test_stats {  // each test file in its own namespace: a group of files compiles as one unit

using ddl_test::contains;
using ddl_test::thrownMessage;

namespace {
const double kPi = std::acos(-1.0);

// P(|T| >= t) by Simpson's rule on the density of Student's t over [0, t] (t >= 0).
double quadratureP(double t, double nu) {
  const double c = std::exp(std::lgamma((nu + 1) / 2) - std::lgamma(nu / 2)) / std::sqrt(nu * kPi);
  auto pdf = [&](double x) { return c * std::pow(1 + x * x / nu, -(nu + 1) / 2); };
  const int n = 20000;
  const double h = t / n;
  double s = pdf(0) + pdf(t);
  for (int i = 1; i < n; ++i) s += (i % 2 ? 4 : 2) * pdf(i * h);
  return 1 - 2 * s * h / 3;
}
}  // namespace

TEST_CASE("studentTwoSidedP matches the closed forms for 1 and 2 degrees of freedom", "[stats]") {
  for (double t : {0.0, 0.3, 1.0, 2.5, 10.0, 1e3}) {
    CAPTURE(t);
    CHECK(std::fabs(ddl::studentTwoSidedP(t, 1) - (1 - 2 / kPi * std::atan(t))) < 1e-12);
    CHECK(std::fabs(ddl::studentTwoSidedP(-t, 2) - (1 - t / std::sqrt(2 + t * t))) < 1e-12);
  }
  CHECK(ddl::studentTwoSidedP(INFINITY, 3) == 0.0);
}

TEST_CASE("studentTwoSidedP matches a quadrature of the density", "[stats]") {
  for (double nu : {3.0, 4.0, 9.0, 30.0})
    for (double t : {0.5, 1.7, 2.262, 4.0}) {
      CAPTURE(nu, t);
      CHECK(std::fabs(ddl::studentTwoSidedP(t, nu) - quadratureP(t, nu)) < 1e-10);
    }
  // The 97.5 % quantile of t with 9 degrees of freedom is 2.262157...: two-sided p = 0.05.
  CHECK(std::fabs(ddl::studentTwoSidedP(2.2621571627982, 9) - 0.05) < 1e-9);
}

TEST_CASE("pairedTTest on hand-computed differences", "[stats]") {
  const ddl::PairedTTest r = ddl::pairedTTest({1, 2, 3, 4}, {2, 4, 3, 6});  // differences 1, 2, 0, 2
  CHECK(r.n == 4);
  CHECK(r.meanDiff == 1.25);
  CHECK(std::fabs(r.sdDiff - std::sqrt(2.75 / 3)) < 1e-15);
  CHECK(r.defined);
  CHECK(std::fabs(r.t - 1.25 / (std::sqrt(2.75 / 3) / 2)) < 1e-12);
  CHECK(r.df == 3);
  CHECK(std::fabs(r.p - ddl::studentTwoSidedP(r.t, 3)) < 1e-15);
  CHECK(r.better == 3);
  CHECK(r.worse == 0);
  CHECK(r.ties == 1);
  const ddl::PairedTTest same = ddl::pairedTTest({1, 2}, {2, 3});  // constant difference: no t
  CHECK_FALSE(same.defined);
  CHECK(same.meanDiff == 1.0);
  CHECK(std::isnan(same.p));
  CHECK_FALSE(ddl::pairedTTest({1}, {2}).defined);
}

TEST_CASE("t test functions refuse bad input, naming the function", "[stats]") {
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::pairedTTest({1, 2}, {1}); }),
                 "ddl::pairedTTest: a has 2 values but b has 1"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::pairedTTest({1, NAN}, {1, 2}); }), "pair 1 is not finite"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::studentTwoSidedP(1.0, 0); }),
                 "ddl::studentTwoSidedP: degrees of freedom must be > 0, got 0"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::incompleteBeta(1, 1, 1.5); }),
                 "ddl::incompleteBeta: x must be in [0, 1], got 1.5"));
}

}  // namespace test_stats
