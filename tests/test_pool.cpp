// Tests for nn/layers/pool2d.hpp (MaxPool2d, AvgPool2d) and nn/layers/global_avg_pool.hpp: central differences in
// double, naive per-pixel reference loops, hand-computed PyTorch cases (padding, count_include_pad,
// ties, NaN), one and two threads above the threading threshold, and the error messages.
#include "eigen_guard.hpp"  // first: live allocation checks even with NDEBUG

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/nn/layers/global_avg_pool.hpp"
#include "ddl/nn/layers/pool2d.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_pool {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl::TokenLayout;
using ddl::Window2d;
using ddl_test::contains;
using ddl_test::randInt;
using ddl_test::thrownMessage;

namespace {

// Calls f(outColumn, c-independent list of the window's input columns) for every output pixel, from the
// definition: window (oy, ox) covers input pixels (oy*sh - ph + i, ox*sw - pw + j) inside the image,
// visited in row-major (i, j) order.
template <class F>
void naiveWindows(const Window2d& w, const TokenLayout& l, F&& f) {
  const Index Ho = (l.height + 2 * w.padH - w.kernelH) / w.strideH + 1;
  const Index Wo = (l.width + 2 * w.padW - w.kernelW) / w.strideW + 1;
  for (Index b = 0; b < l.batch; ++b)
    for (Index oy = 0; oy < Ho; ++oy)
      for (Index ox = 0; ox < Wo; ++ox) {
        std::vector<Index> cols;
        for (Index i = 0; i < w.kernelH; ++i)
          for (Index j = 0; j < w.kernelW; ++j) {
            const Index y = oy * w.strideH - w.padH + i, x = ox * w.strideW - w.padW + j;
            if (y >= 0 && y < l.height && x >= 0 && x < l.width) cols.push_back((b * l.height + y) * l.width + x);
          }
        f((b * Ho + oy) * Wo + ox, cols);
      }
}

// Naive max pool: strict > keeps the first maximum. Fills Y and the gradient dX of <dY, Y>.
void naiveMaxPool(const Window2d& w, const TokenLayout& l, const MatX<double>& X, const MatX<double>& dY,
                  MatX<double>& Y, MatX<double>& dX) {
  Y.resize(X.rows(), dY.cols());
  dX = MatX<double>::Zero(X.rows(), X.cols());
  naiveWindows(w, l, [&](Index o, const std::vector<Index>& cols) {
    for (Index c = 0; c < X.rows(); ++c) {
      Index best = cols[0];
      for (Index p : cols)
        if (X(c, p) > X(c, best)) best = p;
      Y(c, o) = X(c, best);
      dX(c, best) += dY(c, o);
    }
  });
}

// Naive average pool with divisor kh*kw (includePad) or the number of input pixels in the window.
void naiveAvgPool(const Window2d& w, bool includePad, const TokenLayout& l, const MatX<double>& X,
                  const MatX<double>& dY, MatX<double>& Y, MatX<double>& dX) {
  Y.resize(X.rows(), dY.cols());
  dX = MatX<double>::Zero(X.rows(), X.cols());
  naiveWindows(w, l, [&](Index o, const std::vector<Index>& cols) {
    const double div = includePad ? static_cast<double>(w.taps()) : static_cast<double>(cols.size());
    for (Index c = 0; c < X.rows(); ++c) {
      double s = 0;
      for (Index p : cols) s += X(c, p);
      Y(c, o) = s / div;
      for (Index p : cols) dX(c, p) += dY(c, o) / div;
    }
  });
}

// Random pooling geometry: kernel 1..3 per axis, stride 1..3, padding <= kernel/2, images 1..7 a side.
struct PoolCase {
  Index C;
  Window2d w;
  TokenLayout layout;
};
PoolCase randomPoolCase(std::mt19937& gen) {
  const Index kh = randInt(gen, 1, 3), kw = randInt(gen, 1, 3);
  PoolCase pc;
  pc.C = randInt(gen, 1, 4);
  pc.w = Window2d::make(kh, kw, randInt(gen, 1, 3), randInt(gen, 1, 3), randInt(gen, 0, static_cast<int>(kh / 2)),
                        randInt(gen, 0, static_cast<int>(kw / 2)));
  pc.layout = TokenLayout::image(randInt(gen, 1, 3), std::max<Index>(randInt(gen, 1, 7), kh),
                                 std::max<Index>(randInt(gen, 1, 7), kw));
  return pc;
}

// Distinct values 1e-3 apart in random order, centred on 0: no ties, a 1e-6 step never reorders them,
// and |loss| stays small, so the central difference's rounding (~1e-10 |loss|) stays below entryRelErr's floor.
MatX<double> distinctValues(std::mt19937& gen, Index rows, Index cols) {
  std::vector<double> v(static_cast<std::size_t>(rows * cols));
  std::iota(v.begin(), v.end(), 0.0);
  std::shuffle(v.begin(), v.end(), gen);
  MatX<double> X(rows, cols);
  for (Index i = 0; i < X.size(); ++i) X(i) = 1e-3 * (v[static_cast<std::size_t>(i)] - 0.5 * static_cast<double>(X.size()));
  return X;
}

// Central-difference check of dX for loss = <R, Y>, relErr and entryRelErr.
template <class Pool>
void checkPoolGrad(Pool& pool, MatX<double>& X, const TokenLayout& layout) {
  MatX<double> Y, dX;
  pool.forward(X, layout, Y);
  const MatX<double> R = MatX<double>::Random(Y.rows(), Y.cols());
  auto loss = [&] {
    MatX<double> Yl;
    pool.forward(X, layout, Yl);
    return (R.array() * Yl.array()).sum();
  };
  pool.backward(R, dX);
  const MatX<double> num = ddl::testing::numericGrad(X, loss);
  CHECK(ddl::testing::relErr(dX, num) < 1e-6);
  CHECK(ddl::testing::entryRelErr(dX, num) < 1e-6);
}

struct ThreadGuard {
  int saved = ddl::numThreads();
  ~ThreadGuard() { ddl::setNumThreads(saved); }
};

}  // namespace

// ---------------------------------------------------------------- MaxPool2d

TEST_CASE("MaxPool2d backward matches central differences away from ties", "[grad][pool]") {
  const auto seed = GENERATE(take(12, random(1u, 1000000u)));
  std::mt19937 gen(seed);
  std::srand(seed);
  const PoolCase pc = randomPoolCase(gen);
  CAPTURE(seed, pc.C, ddl::toString(pc.w), ddl::toString(pc.layout));
  ddl::MaxPool2d<double> pool(pc.w);
  MatX<double> X = distinctValues(gen, pc.C, pc.layout.tokens());
  checkPoolGrad(pool, X, pc.layout);
}

TEST_CASE("MaxPool2d equals the naive loop, ties included (first maximum wins)", "[pool]") {
  const auto seed = GENERATE(take(8, random(1u, 1000000u)));
  std::mt19937 gen(seed);
  std::srand(seed);
  const PoolCase pc = randomPoolCase(gen);
  CAPTURE(seed, pc.C, ddl::toString(pc.w), ddl::toString(pc.layout));
  // Small integers: many ties inside windows.
  const MatX<double> X = MatX<double>::Random(pc.C, pc.layout.tokens()).array().round();
  ddl::MaxPool2d<double> pool(pc.w);
  MatX<double> Y, dX, Yref, dXref;
  const TokenLayout outL = pool.forward(X, pc.layout, Y);
  const MatX<double> dY = MatX<double>::Random(pc.C, outL.tokens());
  naiveMaxPool(pc.w, pc.layout, X, dY, Yref, dXref);
  pool.backward(dY, dX);
  CHECK(Y == Yref);
  CHECK(dX == dXref);
}

TEST_CASE("MaxPool2d hand cases: PyTorch default stride, padding never wins, ties, NaN", "[pool]") {
  // 1 channel, 2x4 image [[1, 7, 5, 5], [7, 2, 5, 5]], MaxPool2d(2): windows [[1,7],[7,2]] and [[5,5],[5,5]].
  ddl::MaxPool2d<double> pool(2);
  MatX<double> X(1, 8), Y, dX;
  X << 1, 7, 5, 5, 7, 2, 5, 5;
  CHECK(pool.forward(X, TokenLayout::image(1, 2, 4), Y) == TokenLayout::image(1, 1, 2));
  MatX<double> expected(1, 2);
  expected << 7, 5;
  CHECK(Y == expected);
  pool.backward(MatX<double>::Constant(1, 2, 3.0), dX);
  MatX<double> dXexpected(1, 8);  // the first 7 (pixel 1) and the first 5 (pixel 2) take the gradient
  dXexpected << 0, 3, 3, 0, 0, 0, 0, 0;
  CHECK(dX == dXexpected);

  // Negative inputs with padding 1: the zero padding must not win (PyTorch pads max pooling with -inf).
  ddl::MaxPool2d<double> padded(3, 1, 1);
  MatX<double> N = MatX<double>::Constant(2, 4, -5.0);
  N(1, 3) = -1.0;
  padded.forward(N, TokenLayout::image(1, 2, 2), Y);
  CHECK(Y.row(0).maxCoeff() == -5.0);
  CHECK(Y.row(1).minCoeff() == -1.0);

  // A NaN propagates, as in PyTorch.
  MatX<double> Xn(1, 4), Yn;
  Xn << 1, std::numeric_limits<double>::quiet_NaN(), 3, 4;
  ddl::MaxPool2d<double> whole(2);
  whole.forward(Xn, TokenLayout::image(1, 2, 2), Yn);
  CHECK(std::isnan(Yn(0, 0)));
}

// ---------------------------------------------------------------- AvgPool2d

TEST_CASE("AvgPool2d backward matches central differences (both divisors)", "[grad][pool]") {
  const auto seed = GENERATE(take(10, random(1u, 1000000u)));
  std::mt19937 gen(seed);
  std::srand(seed);
  const PoolCase pc = randomPoolCase(gen);
  const bool includePad = seed % 2 == 0;
  CAPTURE(seed, pc.C, includePad, ddl::toString(pc.w), ddl::toString(pc.layout));
  ddl::AvgPool2d<double> pool(pc.w, includePad);
  MatX<double> X = MatX<double>::Random(pc.C, pc.layout.tokens());
  checkPoolGrad(pool, X, pc.layout);

  MatX<double> Y, dX, Yref, dXref;
  const MatX<double> dY = MatX<double>::Random(pc.C, pool.outputLayout(pc.layout).tokens());
  pool.forward(X, pc.layout, Y);
  pool.backward(dY, dX);
  naiveAvgPool(pc.w, includePad, pc.layout, X, dY, Yref, dXref);
  CHECK(ddl::testing::relErr(Y, Yref) < 1e-14);
  CHECK(ddl::testing::relErr(dX, dXref) < 1e-14);
}

TEST_CASE("AvgPool2d hand case with padding: count_include_pad true and false", "[pool]") {
  // F.avg_pool2d([[1, 2], [3, 4]], kernel_size=2, stride=1, padding=1, count_include_pad=True / False)
  MatX<double> X(1, 4), Y;
  X << 1, 2, 3, 4;
  const TokenLayout layout = TokenLayout::image(1, 2, 2);
  ddl::AvgPool2d<double> incl(2, 1, 1, true), excl(2, 1, 1, false);
  CHECK(incl.forward(X, layout, Y) == TokenLayout::image(1, 3, 3));
  MatX<double> expected(1, 9);
  expected << 0.25, 0.75, 0.5, 1.0, 2.5, 1.5, 0.75, 1.75, 1.0;
  CHECK(Y.isApprox(expected, 1e-15));
  excl.forward(X, layout, Y);
  expected << 1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4;
  CHECK(Y.isApprox(expected, 1e-15));
  CHECK(incl.countIncludePad());
  CHECK_FALSE(excl.countIncludePad());
}

// ---------------------------------------------------------------- threads

TEST_CASE("pooling on two threads above the threshold equals one thread and the naive loops", "[pool][threads]") {
  ThreadGuard guard;
  std::mt19937 gen(77);
  std::srand(77);
  const Index C = 16;
  const TokenLayout layout = TokenLayout::image(8, 24, 24);
  const Window2d w = Window2d::square(3, 2, 1);
  REQUIRE(C * ddl::MaxPool2d<double>(w).outputLayout(layout).tokens() * 9 >= ddl::detail::kPoolParallelMin);
  const MatX<double> X = distinctValues(gen, C, layout.tokens());
  const Index No = ddl::MaxPool2d<double>(w).outputLayout(layout).tokens();
  const MatX<double> dY = MatX<double>::Random(C, No);
  MatX<double> Ymax, dXmax, Yavg, dXavg;
  naiveMaxPool(w, layout, X, dY, Ymax, dXmax);
  naiveAvgPool(w, true, layout, X, dY, Yavg, dXavg);
  std::vector<MatX<double>> avg;
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    ddl::setNumThreads(threads);
    ddl::MaxPool2d<double> mp(w);
    ddl::AvgPool2d<double> ap(w);
    MatX<double> Y, dX;
    mp.forward(X, layout, Y);
    mp.backward(dY, dX);
    CHECK(Y == Ymax);
    CHECK(dX == dXmax);
    ap.forward(X, layout, Y);
    ap.backward(dY, dX);
    CHECK(ddl::testing::relErr(Y, Yavg) < 1e-14);
    CHECK(ddl::testing::relErr(dX, dXavg) < 1e-14);
    avg.push_back(Y);
    avg.push_back(dX);
  }
  // Each output and each input gradient is summed in the same order whatever the thread count.
  CHECK(avg[0] == avg[2]);
  CHECK(avg[1] == avg[3]);
}

// ---------------------------------------------------------------- GlobalAvgPool

TEST_CASE("GlobalAvgPool backward matches central differences and averages each image", "[grad][pool]") {
  const auto seed = GENERATE(take(6, random(1u, 1000000u)));
  std::mt19937 gen(seed);
  std::srand(seed);
  const Index C = randInt(gen, 1, 4);
  const TokenLayout layout = TokenLayout::image(randInt(gen, 1, 3), randInt(gen, 1, 5), randInt(gen, 1, 5));
  CAPTURE(seed, C, ddl::toString(layout));
  ddl::GlobalAvgPool<double> gap;
  MatX<double> X = MatX<double>::Random(C, layout.tokens()), Y;
  CHECK(gap.forward(X, layout, Y) == TokenLayout::vectors(layout.batch));
  const Index T = layout.height * layout.width;
  for (Index b = 0; b < layout.batch; ++b)
    for (Index c = 0; c < C; ++c) {
      double s = 0;
      for (Index y = 0; y < layout.height; ++y)
        for (Index x = 0; x < layout.width; ++x) s += X(c, (b * layout.height + y) * layout.width + x);
      CHECK(std::abs(Y(c, b) - s / static_cast<double>(T)) < 1e-14);
    }
  checkPoolGrad(gap, X, layout);
}

TEST_CASE("pooling layers reject bad windows, shapes and calls with clear messages", "[pool][errors]") {
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::MaxPool2d<double>(2, 1, 2); }), "at most half the kernel"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::AvgPool2d<double>(3, 0); }), "stride >= 1"));
  ddl::MaxPool2d<double> mp(2);
  ddl::AvgPool2d<double> ap(2);
  ddl::GlobalAvgPool<double> gap;
  MatX<double> Y, dX;
  CHECK(contains(thrownMessage<ddl::Error>([&] { mp.backward(MatX<double>::Zero(1, 1), dX); }), "before forward"));
  CHECK(contains(thrownMessage<ddl::Error>([&] { ap.backward(MatX<double>::Zero(1, 1), dX); }), "before forward"));
  CHECK(contains(thrownMessage<ddl::Error>([&] { gap.backward(MatX<double>::Zero(1, 1), dX); }), "before forward"));
  const std::string cols =
      thrownMessage<ddl::ShapeError>([&] { mp.forward(MatX<double>::Zero(2, 15), TokenLayout::image(1, 4, 4), Y); });
  CHECK(contains(cols, "ddl::MaxPool2d::forward"));
  CHECK(contains(cols, "(2, 15)"));
  CHECK(contains(thrownMessage<ddl::ShapeError>(
                     [&] { ap.forward(MatX<double>::Zero(2, 1), TokenLayout::image(1, 1, 1), Y); }),
                 "does not fit"));
  CHECK(contains(thrownMessage<ddl::ShapeError>(
                     [&] { mp.forward(MatX<double>::Zero(2, 8), TokenLayout::sequence(2, 4), Y); }),
                 "image layout"));
  CHECK(contains(thrownMessage<ddl::ShapeError>(
                     [&] { gap.forward(MatX<double>::Zero(2, 7), TokenLayout::image(2, 2, 2), Y); }),
                 "ddl::GlobalAvgPool::forward"));
  mp.forward(MatX<double>::Zero(2, 16), TokenLayout::image(1, 4, 4), Y);
  CHECK(contains(thrownMessage<ddl::ShapeError>([&] { mp.backward(MatX<double>::Zero(2, 16), dX); }),
                 "ddl::MaxPool2d::backward: dY has shape (2, 16), expected (2, 4)"));
  gap.forward(MatX<double>::Zero(2, 8), TokenLayout::image(2, 2, 2), Y);
  CHECK(contains(thrownMessage<ddl::ShapeError>([&] { gap.backward(MatX<double>::Zero(3, 2), dX); }),
                 "expected (2, 2)"));
}

}  // namespace test_pool
