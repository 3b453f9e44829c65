#pragma once
// checkLayerGradients: a layer's backward against central differences in double, for a layer with
// forward(X, layout, Y), forwardInference, backward(dY, dX) and visitParams; checkGradientsThrough for
// layers with other forwards.
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
// Eigen's Random (std::rand) after one forward(X, Y); the loss is evaluated through lossForward(X, Y).
// paramCheck(p) runs on each parameter before its FD_CHECK. Returns the visited parameter names.
template <class Layer, class Forward, class LossForward, class ParamCheck>
std::vector<std::string> checkGradientsThrough(Layer& layer, ddl::MatX<double>& X, Forward forward,
                                               LossForward lossForward, ParamCheck paramCheck) {
  ddl::MatX<double> Y;
  forward(X, Y);
  const ddl::MatX<double> W = ddl::MatX<double>::Random(Y.rows(), Y.cols());
  auto loss = [&] {
    ddl::MatX<double> Yl;
    lossForward(X, Yl);
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
    paramCheck(p);
    FD_CHECK(p.grad, ddl::testing::numericGrad(p.value, loss));
  });
  return names;
}

// checkGradientsThrough for a layer with forward(X, layout, Y) and forwardInference (the loss's forward).
template <class Layer, class ParamCheck>
std::vector<std::string> checkLayerGradients(Layer& layer, ddl::MatX<double>& X, const ddl::TokenLayout& layout,
                                             ParamCheck paramCheck) {
  return checkGradientsThrough(
      layer, X, [&](const ddl::MatX<double>& in, ddl::MatX<double>& Y) { layer.forward(in, layout, Y); },
      [&](const ddl::MatX<double>& in, ddl::MatX<double>& Y) { layer.forwardInference(in, layout, Y); }, paramCheck);
}

// The same, where every parameter must get a nonzero gradient (every parameter takes part).
template <class Layer>
std::vector<std::string> checkLayerGradients(Layer& layer, ddl::MatX<double>& X, const ddl::TokenLayout& layout) {
  return checkLayerGradients(layer, X, layout, [](const ddl::Param<double>& p) { CHECK(p.grad.norm() > 0); });
}

// One module applied twice, a cache each, both applications feeding loss = <A, x1> + <B, x1 ⊙ x2> (as
// two sublayers of a block would): forward(X, x, cache) the cached forward, lossForward(X, x) the loss's;
// backward(dx, dX, cache) in reverse order. Both input gradients and every parameter's gradient against
// central differences (FD_CHECK).
template <class Module, class Forward, class LossForward>
void checkTwoApplications(Module& m, ddl::MatX<double>& X1, ddl::MatX<double>& X2, const ddl::MatX<double>& A,
                          const ddl::MatX<double>& B, Forward forward, LossForward lossForward) {
  auto loss = [&] {
    ddl::MatX<double> x1, x2;
    lossForward(X1, x1);
    lossForward(X2, x2);
    return (A.array() * x1.array()).sum() + (B.array() * x1.array() * x2.array()).sum();
  };
  typename Module::Cache c1, c2;
  ddl::MatX<double> x1, x2, dX1, dX2;
  forward(X1, x1, c1);
  forward(X2, x2, c2);
  ddl::zeroGrad(m);
  m.backward((B.array() * x1.array()).matrix(), dX2, c2);
  m.backward((A.array() + B.array() * x2.array()).matrix(), dX1, c1);
  FD_CHECK(dX1, ddl::testing::numericGrad(X1, loss));
  FD_CHECK(dX2, ddl::testing::numericGrad(X2, loss));
  m.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    CAPTURE(name);
    FD_CHECK(p.grad, ddl::testing::numericGrad(p.value, loss));
  });
}

}  // namespace ddl_test
