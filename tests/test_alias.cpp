// Layers documented "must not alias" refuse an output that shares memory with the input
// (core/alias.hpp) instead of resizing it and reading freed memory.
#include <string>

#include "catch_compat.hpp"
#include "ddl/core/alias.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/nn/layers/conv2d.hpp"
#include "ddl/nn/blocks/delta_block.hpp"
#include "ddl/nn/blocks/delta_residual.hpp"
#include "ddl/nn/layers/linear.hpp"

namespace test_alias {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;

namespace {
template <class F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const ddl::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("sharesStorage sees overlap of blocks, not of disjoint ones", "[core][alias]") {
  MatX<double> A(4, 6), B(4, 6), E;
  CHECK(ddl::detail::sharesStorage(A, A));
  CHECK_FALSE(ddl::detail::sharesStorage(A, B));
  CHECK_FALSE(ddl::detail::sharesStorage(A, E));
  CHECK(ddl::detail::sharesStorage(A.middleCols(2, 2), A.middleCols(3, 3)));
  CHECK_FALSE(ddl::detail::sharesStorage(A.middleCols(0, 2), A.middleCols(2, 4)));
  CHECK(ddl::detail::sharesStorage(A.block(1, 1, 2, 2), A.col(2)));
}

TEST_CASE("Linear refuses Y aliasing X and dX aliasing dY", "[nn][linear][alias][errors]") {
  ddl::Linear<double> lin(5, 3);
  ddl::Rng rng(3);
  lin.init(rng);
  MatX<double> X = MatX<double>::Random(5, 4), Y;
  CHECK(errorOf([&] { lin.forward(X, X); }).find("ddl::Linear::forward: Y must not alias X") != std::string::npos);
  lin.forward(X, Y);  // separate output still works
  MatX<double> dY = MatX<double>::Random(3, 4);
  CHECK(errorOf([&] { lin.backward(dY, dY); }).find("ddl::Linear::backward: dX must not alias dY") != std::string::npos);
  MatX<double> square(5, 5);
  ddl::Linear<double> sq(5, 5);
  sq.init(rng);
  CHECK(errorOf([&] { sq.forward(square.leftCols(4), square); }).find("must not alias") != std::string::npos);
}

TEST_CASE("Conv2d refuses aliased outputs", "[nn][conv2d][alias][errors]") {
  ddl::Conv2d<double> conv(2, 2, 3, 1, 1);
  ddl::Rng rng(5);
  conv.init(rng);
  const ddl::TokenLayout layout = ddl::TokenLayout::image(1, 3, 3);
  MatX<double> X = MatX<double>::Random(2, 9), Y;
  CHECK(errorOf([&] { conv.forward(X, layout, X); }).find("ddl::Conv2d::forward: Y must not alias X") != std::string::npos);
  CHECK(errorOf([&] { conv.forwardInference(X, layout, X); }).find("must not alias") != std::string::npos);
  conv.forward(X, layout, Y);
  MatX<double> dY = MatX<double>::Random(2, 9);
  CHECK(errorOf([&] { conv.backward(dY, dY); }).find("ddl::Conv2d::backward: dX must not alias dY") != std::string::npos);
}

TEST_CASE("DeltaBlock and DeltaResidual refuse Y aliasing X", "[nn][delta_block][alias][errors]") {
  ddl::DeltaBlockOptions opt;
  opt.hidden = 4;
  ddl::DeltaBlock<double> blk(3, 1, opt);
  ddl::Rng rng(9);
  blk.init(rng);
  MatX<double> X = MatX<double>::Random(3, 5), Y;
  CHECK(errorOf([&] { blk.forward(X, X); }).find("ddl::DeltaBlock::forward: Y must not alias X") != std::string::npos);
  blk.forward(X, Y);
  CHECK(Y.allFinite());

  ddl::DeltaResidual<double> res(3, 1, ddl::DeltaResidualOptions{});
  res.init(rng);
  MatX<double> C = MatX<double>::Random(3, 5), H = MatX<double>::Random(3, 5);
  CHECK(errorOf([&] { res.forward(X, X, C, H, X); }).find("ddl::DeltaResidual::forward: Y must not alias X") !=
        std::string::npos);
}

}  // namespace test_alias
