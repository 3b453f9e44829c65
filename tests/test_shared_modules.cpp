// Modules applied more than once per step (nn/layers/linear.hpp and nn/blocks/compressor.hpp, Cache): one Linear
// and one Compressor each applied twice in a step, back-propagated in reverse order with one Cache per
// application, against central differences in double; the parameter gradients are the sums over both
// applications.
#include <cstdlib>
#include <random>
#include <string>

#include "catch_compat.hpp"
#include "fd_check.hpp"
#include "fixtures.hpp"
#include "layer_grad_check.hpp"
#include "ddl/nn/blocks/compressor.hpp"
#include "ddl/nn/layers/linear.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_shared_modules {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl::testing::numericGrad;

TEST_CASE("Linear applied twice in one step: per-application caches match central differences",
          "[linear][shared][grad]") {
  const unsigned seed = GENERATE(1u, 2u, 3u, 4u);
  std::mt19937 rng(seed);
  std::srand(seed);
  const Index d = ddl_test::randInt(rng, 1, 6), B = ddl_test::randInt(rng, 1, 4);
  CAPTURE(seed, d, B);
  ddl::Linear<double> lin(d, d);
  ddl::Rng init(seed);
  lin.init(init);
  lin.bias().value.setRandom();
  MatX<double> X = MatX<double>::Random(d, B);
  const MatX<double> A = MatX<double>::Random(d, B), C = MatX<double>::Random(d, B);
  // loss = <A, Y1> + <C, tanh(Y2)>, Y1 = lin(X), Y2 = lin(Y1): the weight is used on two inputs
  auto loss = [&] {
    MatX<double> Y1, Y2;
    lin.forward(X, Y1);
    lin.forward(Y1, Y2);
    return (A.array() * Y1.array()).sum() + (C.array() * Y2.array().tanh()).sum();
  };
  ddl::Linear<double>::Cache first, second;
  MatX<double> Y1, Y2, dY1, dX;
  lin.forward(X, Y1, first);
  lin.forward(Y1, Y2, second);
  ddl::zeroGrad(lin);
  const MatX<double> dY2 = (C.array() * (1 - Y2.array().tanh().square())).matrix();
  lin.backward(dY2, dY1, second);  // reverse order of the applications
  dY1 += A;
  lin.backward(dY1, dX, first);
  FD_CHECK(dX, numericGrad(X, loss));
  lin.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    CAPTURE(name);
    FD_CHECK(p.grad, numericGrad(p.value, loss));
  });
}

TEST_CASE("Linear::Cache: backward needs a forward of that cache", "[linear][shared][errors]") {
  ddl::Linear<double> lin(3, 2);
  ddl::Linear<double>::Cache unused, used;
  const MatX<double> X = MatX<double>::Random(3, 4);
  MatX<double> Y, dX;
  lin.forward(X, Y, used);
  const MatX<double> dY = MatX<double>::Zero(2, 4);
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::Error>([&] { lin.backward(dY, dX, unused); }),
                           "ddl::Linear::backward: called before forward"));
  // the layer's own cache saw no forward either
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::Error>([&] { lin.backward(dY, dX); }), "before forward"));
  lin.backward(dY, dX, used);
  CHECK(dX.cols() == 4);
}

TEST_CASE("Compressor shared by two sublayers: per-application caches match central differences",
          "[compressor][shared][grad]") {
  const unsigned seed = GENERATE(5u, 6u, 7u);
  std::mt19937 rng(seed);
  std::srand(seed);
  const Index d = ddl_test::randInt(rng, 1, 5), dv = ddl_test::randInt(rng, 2, 4);
  const Index N = ddl_test::randInt(rng, 1, 4);
  for (ddl::CompressorKind kind : {ddl::CompressorKind::Free, ddl::CompressorKind::Structured}) {
    CAPTURE(seed, d, dv, N, ddl::toString(kind));
    ddl::Compressor<double> cc(d, dv, kind, 3);
    cc.visitParams("", [](const std::string&, ddl::Param<double>& p) { p.value.setRandom(); });
    MatX<double> X1 = MatX<double>::Random(d, dv * N), X2 = MatX<double>::Random(d, dv * N);
    const MatX<double> A = MatX<double>::Random(d, N), B = MatX<double>::Random(d, N);
    ddl_test::checkTwoApplications(
        cc, X1, X2, A, B,
        [&](const MatX<double>& X, MatX<double>& x, ddl::Compressor<double>::Cache& c) { cc.forward(X, x, c); },
        [&](const MatX<double>& X, MatX<double>& x) { cc.forward(X, x); });
  }
}

}  // namespace test_shared_modules
