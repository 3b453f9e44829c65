#pragma once
// checkLayerGradients: a layer's backward against central differences in double, for a layer with
// forward(X, layout, Y), forwardInference, backward(dY, dX) and visitParams.
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fd_check.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/testing/grad_check.hpp"

namespace ddl_test {

// Checks dX and every parameter's gradient (FD_CHECK) for loss = <W, Y>, so dY = W, with W drawn by
// Eigen's Random (std::rand) after one forward; every parameter must get a nonzero gradient.
// Returns the visited parameter names.
template <class Layer>
std::vector<std::string> checkLayerGradients(Layer& layer, ddl::MatX<double>& X, const ddl::TokenLayout& layout) {
  ddl::MatX<double> Y;
  layer.forward(X, layout, Y);
  const ddl::MatX<double> W = ddl::MatX<double>::Random(Y.rows(), Y.cols());
  auto loss = [&] {
    ddl::MatX<double> Yl;
    layer.forwardInference(X, layout, Yl);
    return (W.array() * Yl.array()).sum();
  };
  ddl::zeroGrad(layer);
  ddl::MatX<double> dX;
  layer.backward(W, dX);
  FD_CHECK(dX, ddl::testing::numericGrad(X, loss));
  std::vector<std::string> names;
  layer.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    CAPTURE(name);
    names.push_back(name);
    CHECK(p.grad.norm() > 0);  // every parameter takes part
    FD_CHECK(p.grad, ddl::testing::numericGrad(p.value, loss));
  });
  return names;
}

}  // namespace ddl_test
