// ConstView (core/view.hpp): a layer's cache points at the caller's matrix, except when the argument is
// an expression that Eigen::Ref had to evaluate into a temporary (X.cast<float>(), 2 * X): then the view
// keeps its own copy, so a forward on an expression followed by a backward reads live memory (the
// AddressSanitizer build of CI would report the use after free this guards against).
#include "catch_compat.hpp"
#include "fd_check.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/view.hpp"
#include "ddl/nn/layers/conv2d.hpp"
#include "ddl/nn/layers/linear.hpp"

namespace test_view {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;

TEST_CASE("ConstView points at matrices and blocks, and copies only evaluated expressions", "[core][view]") {
  MatX<double> M = MatX<double>::Random(4, 5);
  ddl::ConstView<double> v;
  v.bind(M);
  CHECK_FALSE(v.ownsCopy());
  CHECK(v.data() == M.data());
  v.bind(M.middleCols(1, 3));  // a block with the matrix's column stride: still a view
  CHECK_FALSE(v.ownsCopy());
  CHECK(v.data() == M.col(1).data());
  CHECK(v.outerStride() == 4);
  CHECK(v.map() == M.middleCols(1, 3));
  v.bind(2.0 * M);  // evaluated by Eigen::Ref into a temporary that dies with this statement
  CHECK(v.ownsCopy());
  CHECK(v.map() == 2.0 * M);
  v.bind(M.transpose());
  CHECK(v.ownsCopy());
  CHECK(v.map() == M.transpose());
  v.bind(M);  // back to a plain view
  CHECK_FALSE(v.ownsCopy());
  CHECK(v.data() == M.data());
}

TEST_CASE("a forward on an expression and its backward give the gradients of the evaluated input",
          "[core][view][nn]") {
  ddl::Rng rng(3);
  MatX<double> X = MatX<double>::Random(5, 7), dY = MatX<double>::Random(3, 7), Y, dX;
  SECTION("Linear") {
    ddl::Linear<double> a(5, 3), b(5, 3);
    a.init(rng);
    b.weight().value = a.weight().value;
    b.bias().value = a.bias().value;
    const MatX<double> X2 = 2.0 * X;
    a.forward(2.0 * X, Y);  // the temporary is gone before backward
    {
      MatX<double> reuse = MatX<double>::Constant(5, 7, 1e30);  // likely to land on the freed block
      CHECK(reuse.allFinite());
    }
    a.backward(dY, dX);
    b.forward(X2, Y);
    MatX<double> dX2;
    b.backward(dY, dX2);
    CHECK(a.weight().grad == b.weight().grad);
    CHECK(dX == dX2);
  }
  SECTION("Conv2d") {
    const ddl::TokenLayout layout = ddl::TokenLayout::image(1, 1, 7);
    ddl::Conv2d<double> a(5, 3, 3, 1, 1), b(5, 3, 3, 1, 1);
    a.init(rng);
    b.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
      a.visitParams("", [&](const std::string& other, ddl::Param<double>& q) {
        if (name == other) p.value = q.value;
      });
    });
    const MatX<double> X2 = 2.0 * X;
    a.forward(2.0 * X, layout, Y);
    a.backward(dY, dX);
    b.forward(X2, layout, Y);
    MatX<double> dX2;
    b.backward(dY, dX2);
    a.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
      b.visitParams("", [&](const std::string& other, ddl::Param<double>& q) {
        if (name == other) CHECK(p.grad == q.grad);
      });
    });
    CHECK(dX == dX2);
  }
}

}  // namespace test_view
