// Tests for include/ddl/data/orientation_histograms.hpp: the histograms of oriented gradients of
// docs/spec.md §9 on images whose histograms are computed by hand (edges, a ramp, a flat image), their
// layout and independence per sample, the errors, and the flat data set of pixels and features.
#include <cmath>
#include <limits>
#include <vector>

#include "catch_compat.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/data/orientation_histograms.hpp"

namespace test_orientation_histograms {  // each test file in its own namespace: a group of files compiles as one unit

namespace {

using ddl::Index;
using ddl_test::contains;
using ddl_test::thrownMessage;

// n one-channel images of H x W, pixel (y, c) of image k = f(k, y, c).
template <class F>
ddl::Dataset<double> images(Index n, Index H, Index W, F&& f) {
  ddl::Dataset<double> d;
  d.shape = ddl::ImageShape{1, H, W};
  d.numClasses = 2;
  d.images.resize(H * W, n);
  for (Index k = 0; k < n; ++k) {
    d.labels.push_back(static_cast<int>(k % 2));
    for (Index y = 0; y < H; ++y)
      for (Index c = 0; c < W; ++c) d.images(y * W + c, k) = f(k, y, c);
  }
  return d;
}

// Row of (cell row r, cell column q, bin b) for cellsX cells per row and 8 bins.
Index row(Index r, Index q, Index b, Index cellsX = 2) { return (r * cellsX + q) * 8 + b; }

// h / sqrt(|h|^2 + 0.01) for one cell's raw histogram.
std::vector<double> normalised(std::vector<double> h) {
  double sq = 0;
  for (double v : h) sq += v * v;
  for (double& v : h) v /= std::sqrt(sq + 0.01);
  return h;
}

}  // namespace

TEST_CASE("a vertical step puts its gradient in bin 0 of the cells it crosses, whichever way it steps") {
  for (double sign : {1.0, -1.0}) {
    const auto d = images(1, 8, 8, [&](Index, Index, Index c) { return c >= 4 ? sign : 0.0; });
    const ddl::MatX<double> h = ddl::orientationHistograms(d);
    REQUIRE(h.rows() == 2 * 2 * 8);
    REQUIRE(h.cols() == 1);
    // Columns 3 and 4 have |gx| = |sign| (x(c+1) - x(c-1) across the step), four rows per cell; gy = 0.
    const double expect = 4.0 / std::sqrt(16.0 + 0.01);
    for (Index r = 0; r < 2; ++r)
      for (Index q = 0; q < 2; ++q)
        for (Index b = 0; b < 8; ++b) CHECK(h(row(r, q, b), 0) == Approx(b == 0 ? expect : 0.0).margin(1e-15));
  }
}

TEST_CASE("a horizontal step puts its gradient in the middle bin (theta = pi/2)") {
  const auto d = images(1, 8, 8, [](Index, Index y, Index) { return y >= 4 ? 1.0 : 0.0; });
  const ddl::MatX<double> h = ddl::orientationHistograms(d);
  const double expect = 4.0 / std::sqrt(16.0 + 0.01);
  for (Index r = 0; r < 2; ++r)
    for (Index q = 0; q < 2; ++q)
      for (Index b = 0; b < 8; ++b) CHECK(h(row(r, q, b), 0) == Approx(b == 4 ? expect : 0.0).margin(1e-15));
}

TEST_CASE("a ramp: interior pixels along its gradient, border pixels along the one they have, corners nowhere") {
  // x(y, c) = 2c + y: inside gx = 4, gy = 2 (theta = atan(1/2), bin 1, m = sqrt(20)); on the top and bottom
  // rows gy = 0 (bin 0, m = 4), on the left and right columns gx = 0 (theta = pi/2, bin 4, m = 2); the
  // corners have no gradient. Every 4 x 4 cell of the 8 x 8 image touches one corner, so each holds three
  // border-row pixels, three border-column pixels and nine inside.
  const auto d = images(1, 8, 8, [](Index, Index y, Index c) { return static_cast<double>(2 * c + y); });
  const ddl::MatX<double> h = ddl::orientationHistograms(d);
  const std::vector<double> cell = normalised({12, 9 * std::sqrt(20.0), 0, 0, 6, 0, 0, 0});
  for (Index r = 0; r < 2; ++r)
    for (Index q = 0; q < 2; ++q)
      for (Index b = 0; b < 8; ++b)
        CHECK(h(row(r, q, b), 0) == Approx(cell[static_cast<std::size_t>(b)]).margin(1e-14));
}

TEST_CASE("a flat image has no gradient, and cell, bins and eps set the layout and the normalisation") {
  const auto flat = images(2, 8, 12, [](Index k, Index, Index) { return 0.3 * static_cast<double>(k); });
  const ddl::MatX<double> h = ddl::orientationHistograms(flat);
  REQUIRE(h.rows() == 2 * 3 * 8);
  CHECK(h.isZero(0.0));

  // Cell 2 with 4 bins over the vertical step: cells (r, 1) hold column 3 (two pixels, |gx| = 1) and
  // cells (r, 2) column 4; eps 1 gives 2 / sqrt(4 + 1).
  ddl::OrientationHistogramOptions opt;
  opt.cell = 2;
  opt.bins = 4;
  opt.eps = 1.0;
  const auto step = images(1, 8, 8, [](Index, Index, Index c) { return c >= 4 ? 1.0 : 0.0; });
  REQUIRE(ddl::orientationHistogramSize(step.shape, opt) == 4 * 4 * 4);
  const ddl::MatX<double> g = ddl::orientationHistograms(step, opt);
  REQUIRE(g.rows() == 64);
  for (Index r = 0; r < 4; ++r)
    for (Index q = 0; q < 4; ++q)
      for (Index b = 0; b < 4; ++b)
        CHECK(g((r * 4 + q) * 4 + b, 0) == Approx(b == 0 && (q == 1 || q == 2) ? 2.0 / std::sqrt(5.0) : 0.0).margin(1e-15));
}

TEST_CASE("the histograms of an image depend on it alone, have a norm below 1 per cell, and float agrees") {
  ddl::Rng rng(7);
  const auto d = images(5, 12, 8, [&](Index, Index, Index) { return rng.uniform(); });
  const ddl::MatX<double> all = ddl::orientationHistograms(d);
  REQUIRE(all.rows() == 3 * 2 * 8);
  for (Index k = 0; k < d.size(); ++k) {
    const ddl::MatX<double> one = ddl::orientationHistograms(ddl::select(d, {k}));
    CHECK(one.col(0) == all.col(k));
    for (Index cell = 0; cell < 6; ++cell) {
      const auto hc = all.col(k).segment(cell * 8, 8);
      CHECK(hc.minCoeff() >= 0.0);
      CHECK(hc.norm() < 1.0);
      CHECK(hc.norm() > 0.9);  // random pixels: |h| >> eps
    }
  }
  ddl::Dataset<float> f;
  f.shape = d.shape;
  f.numClasses = d.numClasses;
  f.labels = d.labels;
  f.images = d.images.cast<float>();
  const ddl::MatX<float> hf = ddl::orientationHistograms(f);
  // Float pixels round the gradients, which may move a pixel across a bin edge: compare by cell norm.
  for (Index k = 0; k < d.size(); ++k)
    for (Index cell = 0; cell < 6; ++cell)
      CHECK(hf.col(k).segment(cell * 8, 8).cast<double>().norm() == Approx(all.col(k).segment(cell * 8, 8).norm()).epsilon(1e-5));
}

TEST_CASE("orientationHistograms refuses images it cannot split, bad options and non-finite pixels, naming them") {
  const auto rgb = [] {
    auto d = images(1, 8, 8, [](Index, Index, Index) { return 0.0; });
    d.shape = ddl::ImageShape{2, 8, 4};
    return d;
  }();
  std::string msg = thrownMessage<ddl::ShapeError>([&] { ddl::orientationHistograms(rgb); });
  CHECK(contains(msg, "ddl::orientationHistograms"));
  CHECK(contains(msg, "2 x 8 x 4"));

  const auto odd = images(1, 10, 8, [](Index, Index, Index) { return 0.0; });
  msg = thrownMessage<ddl::ShapeError>([&] { ddl::orientationHistograms(odd); });
  CHECK(contains(msg, "1 x 10 x 8"));
  CHECK(contains(msg, "multiples of the cell (4)"));

  const auto ok = images(2, 8, 8, [](Index, Index, Index) { return 0.5; });
  ddl::OrientationHistogramOptions bad;
  bad.bins = 0;
  CHECK_THROWS_AS(ddl::orientationHistograms(ok, bad), ddl::ValueError);
  bad = {};
  bad.cell = 0;
  CHECK_THROWS_AS(ddl::orientationHistograms(ok, bad), ddl::ValueError);
  bad = {};
  bad.eps = 0;
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::orientationHistograms(ok, bad); }), "eps = 0"));

  auto nan = ok;
  nan.images(13, 1) = std::numeric_limits<double>::quiet_NaN();
  msg = thrownMessage<ddl::ValueError>([&] { ddl::orientationHistograms(nan); });
  CHECK(contains(msg, "sample 1"));
  CHECK(contains(msg, "row 13"));

  auto wrongRows = ok;
  wrongRows.images.conservativeResize(60, 2);
  CHECK_THROWS_AS(ddl::orientationHistograms(wrongRows), ddl::ShapeError);
}

TEST_CASE("withFeatures stacks features under the pixels of a flat data set, featureMeanStd summarises a block") {
  const auto d = images(3, 4, 4, [](Index k, Index y, Index c) { return static_cast<double>(100 * k + 4 * y + c); });
  ddl::MatX<double> F(2, 3);
  F << 1, 2, 3, 4, 5, 6;
  const ddl::Dataset<double> out = ddl::withFeatures(d, F);
  REQUIRE(out.features() == 18);
  CHECK(out.shape.channels == 1);
  CHECK(out.shape.height == 1);
  CHECK(out.shape.width == 18);
  CHECK(out.labels == d.labels);
  CHECK(out.numClasses == d.numClasses);
  CHECK(out.images.topRows(16) == d.images);
  CHECK(out.images.bottomRows(2) == F);
  ddl::validate(out);

  CHECK_THROWS_AS(ddl::withFeatures(d, ddl::MatX<double>(2, 4)), ddl::ShapeError);

  double mean = 0, stddev = 0;
  ddl::featureMeanStd(F, mean, stddev);
  CHECK(mean == Approx(3.5));
  CHECK(stddev == Approx(std::sqrt(35.0 / 12.0)));
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::featureMeanStd(ddl::MatX<double>(0, 3), mean, stddev); }),
                 "ddl::featureMeanStd"));
}

}  // namespace test_orientation_histograms
