// Tests of ddl/diag/t_test.hpp against closed forms of Student's t (nu = 1, 2), a quadrature of its
// density, and hand-computed paired tests; of the exact tests (exact_tests.hpp), the intervals
// (confidence_intervals.hpp) and R² (r_squared.hpp) against exact values: the hypergeometric and binomial
// sums computed with Python's fractions (exact rationals), Newcombe's published table, R's binom.test.
#include <cmath>
#include <limits>
#include <vector>

#include "catch_compat.hpp"
#include "ddl/core/types.hpp"
#include "ddl/diag/confidence_intervals.hpp"
#include "ddl/diag/exact_tests.hpp"
#include "ddl/diag/r_squared.hpp"
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

TEST_CASE("fisherExact matches the exact hypergeometric sums", "[stats]") {
  struct Case {
    int a, b, c, d;
    double p;  // two-sided, from Python's fractions (the exact rational in the comment)
  };
  for (const Case& k : {Case{3, 1, 1, 3, 17.0 / 35},                // Fisher's tea tasting; R: 0.4857
                        Case{8, 2, 1, 5, 5.0 / 143},                // R and scipy: 0.03497
                        Case{2, 8, 8, 2, 1063.0 / 46189},           // symmetric: the mirror table ties exactly
                        Case{10, 0, 0, 10, 1.0 / 92378},
                        Case{10, 0, 5, 5, 21.0 / 646},
                        Case{7, 3, 2, 8, 293.0 / 4199},
                        Case{9, 1, 4, 6, 37.0 / 646},
                        Case{1, 9, 11, 3, 41.0 / 14858},
                        Case{0, 10, 0, 10, 1.0}}) {                 // one column empty: every table is the observed
    CAPTURE(k.a, k.b, k.c, k.d);
    const ddl::FisherExact f = ddl::fisherExact(k.a, k.b, k.c, k.d);
    CHECK(std::fabs(f.p - k.p) <= 1e-12 * k.p);
    // Swapping the rows or the columns is the same test.
    CHECK(std::fabs(ddl::fisherExact(k.c, k.d, k.a, k.b).p - k.p) <= 1e-12 * k.p);
    CHECK(std::fabs(ddl::fisherExact(k.b, k.a, k.d, k.c).p - k.p) <= 1e-12 * k.p);
  }
  const ddl::FisherExact f = ddl::fisherExact(9, 1, 3, 7);
  CHECK(f.rate1 == 0.9);
  CHECK(f.rate2 == 0.3);
  // P(a = 3 | margins 4, 4 of 8) = C(4,3) C(4,1) / C(8,4) = 16/70.
  CHECK(std::fabs(ddl::fisherExact(3, 1, 1, 3).pObserved - 16.0 / 70) < 1e-14);
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::fisherExact(1, -1, 2, 2); }),
                 "ddl::fisherExact: counts must be >= 0, got a = 1, b = -1"));
}

TEST_CASE("signTest drops ties and doubles the exact binomial tail", "[stats]") {
  // b - a signs: 8 greater, 1 less, 1 tie: n = 9, p = 2 (1 + 9) / 512 = 5/128.
  const std::vector<double> a{1, 1, 1, 1, 1, 1, 1, 1, 5, 3};
  const std::vector<double> b{2, 3, 4, 5, 6, 7, 8, 9, 4, 3};
  const ddl::SignTest s = ddl::signTest(a, b);
  CHECK(s.pairs == 10);
  CHECK(s.greater == 8);
  CHECK(s.less == 1);
  CHECK(s.ties == 1);
  CHECK(s.p == 5.0 / 128);
  CHECK(ddl::signTest(b, a).p == 5.0 / 128);  // two-sided
  const double inf = std::numeric_limits<double>::infinity();
  // A run that never reached the threshold (+inf) loses to every finite one; two such runs tie.
  const ddl::SignTest censored = ddl::signTest({inf, inf, 3, 4, 5, 6, 7, 8, 9, 10}, {inf, 2, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(censored.ties == 1);
  CHECK(censored.less == 9);
  CHECK(censored.p == 2.0 / 512);
  CHECK(ddl::signTest({1, 2, 3}, {1, 2, 3}).p == 1.0);  // all tied
  CHECK(ddl::signTest({}, {}).p == 1.0);
  // 7 against 2: 2 (1 + 9 + 36) / 512 = 23/128; 5 against 5: 1.
  CHECK(ddl::signTest({0, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1, 1, -1, -1}).p == 23.0 / 128);
  CHECK(ddl::signTest({0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, -1, -1, -1, -1, -1}).p == 1.0);
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::signTest({1, NAN}, {1, 2}); }),
                 "ddl::signTest: pair 1 holds a NaN"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::signTest({1, 2}, {1}); }), "a has 2 values but b has 1"));
}

TEST_CASE("normalQuantile inverts the normal distribution", "[stats]") {
  CHECK(std::fabs(ddl::normalQuantile(0.975) - 1.959963984540054) < 1e-14);
  CHECK(std::fabs(ddl::normalQuantile(0.5)) < 1e-15);
  CHECK(std::fabs(ddl::normalQuantile(0.025) + 1.959963984540054) < 1e-14);
  CHECK(std::fabs(ddl::normalQuantile(0.995) - 2.5758293035489004) < 1e-13);
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::normalQuantile(1.0); }), "ddl::normalQuantile"));
}

TEST_CASE("Wilson and Clopper-Pearson intervals of a solve rate", "[stats]") {
  struct Case {
    int x, n;
    double wl, wu, cl, cu;  // Wilson (z = 1.959963984540054) and exact bounds, from Python
  };
  for (const Case& k : {Case{0, 10, 0.0, 0.277532799862889, 0.0, 0.308497107818761},
                        Case{5, 10, 0.236593090512564, 0.763406909487436, 0.187086028447399, 0.812913971552601},
                        Case{10, 10, 0.722467200137111, 1.0, 0.691502892181239, 1.0},
                        Case{9, 10, 0.595849973204762, 0.982123786904927, 0.554983882971805, 0.997471421455538},
                        Case{3, 7, 0.158219855251470, 0.749541635472343, 0.098988278442508, 0.815948432359917}}) {
    CAPTURE(k.x, k.n);
    const ddl::Interval w = ddl::wilsonInterval(k.x, k.n);
    CHECK(std::fabs(w.lower - k.wl) < 1e-12);
    CHECK(std::fabs(w.upper - k.wu) < 1e-12);
    const ddl::Interval c = ddl::clopperPearsonInterval(k.x, k.n);
    CHECK(std::fabs(c.lower - k.cl) < 1e-10);
    CHECK(std::fabs(c.upper - k.cu) < 1e-10);
  }
  // 0 of n: the exact upper bound is 1 - (alpha/2)^(1/n) in closed form.
  CHECK(std::fabs(ddl::clopperPearsonInterval(0, 20, 0.9).upper - (1 - std::pow(0.05, 1.0 / 20))) < 1e-12);
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::wilsonInterval(11, 10); }),
                 "ddl::wilsonInterval: successes x = 11 expected in [0, n]"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::clopperPearsonInterval(1, 10, 1.0); }),
                 "confidence expected in (0, 1)"));
}

TEST_CASE("newcombeDifference reproduces Newcombe's method 10", "[stats]") {
  struct Case {
    int x1, n1, x2, n2;
    double lower, upper;  // from Python (Newcombe 1998, Table II, prints them to 4 places)
  };
  for (const Case& k : {Case{56, 70, 48, 80, 0.052431472402365, 0.333872654036906},   // 0.0524, 0.3339
                        Case{9, 10, 3, 10, 0.170522723934503, 0.809017973535488},     // 0.1705, 0.8090
                        Case{6, 7, 2, 7, 0.058227927482312, 0.806249637524228},       // 0.0582, 0.8062
                        Case{5, 56, 0, 29, -0.038137147903537, 0.192560013855112},    // -0.0381, 0.1926
                        Case{10, 10, 5, 10, 0.117367467450222, 0.763406909487436}}) {
    CAPTURE(k.x1, k.n1, k.x2, k.n2);
    const ddl::Interval d = ddl::newcombeDifference(k.x1, k.n1, k.x2, k.n2);
    CHECK(std::fabs(d.lower - k.lower) < 1e-12);
    CHECK(std::fabs(d.upper - k.upper) < 1e-12);
    const ddl::Interval flipped = ddl::newcombeDifference(k.x2, k.n2, k.x1, k.n1);
    CHECK(std::fabs(flipped.lower + k.upper) < 1e-12);
    CHECK(std::fabs(flipped.upper + k.lower) < 1e-12);
  }
}

TEST_CASE("pairedMedianDifference: the median and its sign-test interval", "[stats]") {
  // Differences b - a: 5, -1, 3, 2, 8, 0, 4, 7, 1, 6 -> sorted -1 0 1 2 3 4 5 6 7 8.
  const std::vector<double> a{0, 1, 0, 0, 0, 2, 0, 0, 0, 0};
  const std::vector<double> b{5, 0, 3, 2, 8, 2, 4, 7, 1, 6};
  const ddl::MedianDifference m = ddl::pairedMedianDifference(a, b);
  CHECK(m.n == 10);
  CHECK(m.median == 3.5);
  CHECK(m.attained);
  CHECK(m.lower == 0);  // d_(2)
  CHECK(m.upper == 7);  // d_(9)
  CHECK(m.coverage == 1 - 2 * 11.0 / 1024);
  // 90 %: P(B <= 1) = 11/1024 <= 0.05 < P(B <= 2) = 56/1024: the same k = 2.
  CHECK(ddl::pairedMedianDifference(a, b, 0.9).lower == 0);
  // 50 %: P(B <= 3) = 176/1024 <= 0.25 < P(B <= 4) = 386/1024: k = 4, [d_(4), d_(7)].
  const ddl::MedianDifference half = ddl::pairedMedianDifference(a, b, 0.5);
  CHECK(half.lower == 2);
  CHECK(half.upper == 5);
  CHECK(half.coverage == 1 - 2 * 176.0 / 1024);
  // Five pairs cannot reach 95 % (P(B <= 0) = 1/32 > 0.025): the whole line.
  const ddl::MedianDifference five = ddl::pairedMedianDifference({0, 0, 0, 0, 0}, {3, 1, 2, 5, 4});
  CHECK(five.median == 3);
  CHECK_FALSE(five.attained);
  CHECK(std::isinf(five.lower));
  CHECK(std::isinf(five.upper));
  CHECK(five.coverage == 1);
  CHECK(ddl::binomialHalfLowerTail(1, 10) == 11.0 / 1024);
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::pairedMedianDifference({1, INFINITY}, {1, 2}); }),
                 "ddl::pairedMedianDifference: pair 1 is not finite"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::pairedMedianDifference({}, {}); }), "at least one pair"));
}

TEST_CASE("rSquared pools the outputs' residuals against their variance", "[stats]") {
  ddl::MatX<double> y(2, 4), yhat(2, 4);
  y << 1, 2, 3, 4,  //
      0, 0, 2, 2;
  CHECK(ddl::rSquared(y, y) == 1.0);
  yhat << 2.5, 2.5, 2.5, 2.5,  //
      1, 1, 1, 1;  // each output's mean
  CHECK(std::fabs(ddl::rSquared(yhat, y)) < 1e-15);
  // Residual 0.25 * 4 = 1 on output 0 and 0 on output 1; total 5 + 4 = 9.
  yhat << 1.5, 2.5, 3.5, 4.5,  //
      0, 0, 2, 2;
  CHECK(std::fabs(ddl::rSquared(yhat, y) - (1 - 1.0 / 9)) < 1e-15);
  const ddl::MatX<float> yf = y.cast<float>();
  CHECK(ddl::rSquared<float>(yf, yf) == 1.0);
  const ddl::MatX<double> flat = ddl::MatX<double>::Ones(2, 3);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::rSquared(flat, flat); }), "no variance"));
  CHECK(contains(thrownMessage<ddl::ShapeError>([&] { ddl::rSquared(flat, y); }), "ddl::rSquared: prediction"));
}

}  // namespace test_stats
