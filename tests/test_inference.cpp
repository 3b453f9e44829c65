// Inference forwards (forwardInference of every nn module a net is built from): the same logits as
// forward bit for bit, no cache written (a forward + backward around an inference call gives the same
// gradients bit for bit), no allocation once the buffers have their shapes, and evaluate() using it.
#include "eigen_guard.hpp"  // first: live allocation checks even with NDEBUG

#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/data/dataset.hpp"
#include "ddl/nn/blocks/delta_residual.hpp"
#include "ddl/nn/models/conv_delta_net.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/nn/models/delta_net.hpp"
#include "ddl/train/train_step.hpp"

namespace test_inference {  // each test file in its own namespace: a group of files compiles as one unit

using ddl_test::convNetConfig;
using ddl_test::deltaNetConfig;
using ddl_test::kDefaultHidden;
using ddl::Index;
using ddl::MatX;

namespace {

template <class S>
struct Case {
  std::string name;
  ddl::DeltaResidualOptions residual;
  Index dv = 1;
};

// The residual options whose inference path differs: every residual kind, the aux MLP direction,
// the two-layer gate and every value kind.
template <class S>
std::vector<Case<S>> cases() {
  std::vector<Case<S>> out;
  for (Index dv : {Index(1), Index(3)}) {
    ddl::DeltaResidualOptions o;
    out.push_back({"code dv=" + std::to_string(dv), o, dv});
    o.residual = ddl::ResidualKind::Additive;
    out.push_back({"additive dv=" + std::to_string(dv), o, dv});
    o.residual = ddl::ResidualKind::WriteOnly;
    o.value = ddl::ValueKind::LinearOnC;
    out.push_back({"write_only linear_on_c dv=" + std::to_string(dv), o, dv});
    ddl::DeltaResidualOptions v1;
    v1.direction = ddl::DirectionSource::AuxiliaryMlp;
    v1.norm = ddl::DirectionNorm::AddEps;
    v1.gate = ddl::GateKind::TwoLayerTanh;
    v1.gateHidden = 5;
    v1.value = ddl::ValueKind::FromBranch;
    out.push_back({"v1 dv=" + std::to_string(dv), v1, dv});
    v1.value = ddl::ValueKind::Constant;
    out.push_back({"aux constant dv=" + std::to_string(dv), v1, dv});
  }
  return out;
}

template <class S, class Net>
std::vector<MatX<S>> gradients(Net& net) {
  std::vector<MatX<S>> g;
  net.visitParams("", [&](const std::string&, ddl::Param<S>& p) { g.push_back(p.grad); });
  return g;
}

template <class S, class Net>
void perturbParams(Net& net) {  // moves compressor / expansion / gain weights off their symmetric start
  net.visitParams("", [&](const std::string&, ddl::Param<S>& p) {
    p.value += S(0.05) * MatX<S>::Random(p.value.rows(), p.value.cols());
  });
}

// forward == forwardInference bit for bit; and forward(X1), forwardInference(X2), backward gives the
// gradients of forward(X1), backward exactly.
template <class S, class Net>
void checkNet(Net& net, const MatX<S>& X1, const MatX<S>& X2) {
  MatX<S> logits, logitsInf, dLogits;
  net.forward(X1, logits);
  net.forwardInference(X1, logitsInf);
  REQUIRE(logitsInf.rows() == logits.rows());
  REQUIRE(logitsInf.cols() == logits.cols());
  CHECK((logitsInf.array() == logits.array()).all());
  net.forwardInference(X1, logitsInf);  // second call: buffers reused, still identical
  CHECK((logitsInf.array() == logits.array()).all());

  dLogits = MatX<S>::Random(logits.rows(), logits.cols());
  ddl::zeroGrad(net);
  net.forward(X1, logits);
  net.backward(dLogits);
  const std::vector<MatX<S>> expected = gradients<S>(net);

  ddl::zeroGrad(net);
  net.forward(X1, logits);
  MatX<S> other;
  net.forwardInference(X2, other);  // another batch size, between forward and backward
  net.backward(dLogits);
  const std::vector<MatX<S>> got = gradients<S>(net);
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK((got[i].array() == expected[i].array()).all());
  }
}

}  // namespace

TEMPLATE_TEST_CASE("DeltaNet::forwardInference: forward's logits bit for bit, caches untouched", "[inference]",
                   float, double) {
  using S = TestType;
  std::srand(7);
  for (const Case<S>& c : cases<S>()) {
    CAPTURE(c.name);
    ddl::DeltaNetConfig cfg = deltaNetConfig(6, 3, 5, 2, /*hidden=*/7, c.dv);
    cfg.learnedExpansion = c.dv > 1;
    cfg.block.compressor = c.dv > 1 && c.residual.direction == ddl::DirectionSource::AuxiliaryMlp
                               ? ddl::CompressorKind::Free
                               : ddl::CompressorKind::Structured;
    cfg.block.residual = c.residual;
    ddl::DeltaNet<S> net(cfg, 11);
    perturbParams<S>(net);
    const MatX<S> X1 = MatX<S>::Random(6, 9), X2 = MatX<S>::Random(6, 4);
    checkNet<S>(net, X1, X2);
  }
}

TEMPLATE_TEST_CASE("DeltaResidual's const forwardInference: forward's output bit for bit into the caller's workspace",
                   "[inference][const]", float, double) {
  using S = TestType;
  std::srand(5);
  const Index d = 6, N = 7;
  for (const Case<S>& c : cases<S>()) {
    CAPTURE(c.name);
    ddl::DeltaResidual<S> r(d, c.dv, c.residual);
    ddl::Rng rng(3);
    r.init(rng);
    const MatX<S> X = MatX<S>::Random(d, c.dv * N), Xin = MatX<S>::Random(d, N), C = MatX<S>::Random(d, N),
                  H = MatX<S>::Random(d, N), X2 = MatX<S>::Random(d, c.dv * 2);
    MatX<S> Y, Yc, Y2;
    r.forward(X, Xin, C, H, Y);
    const MatX<S> beta = r.beta();
    const ddl::DeltaResidual<S>& shared = r;
    typename ddl::DeltaResidual<S>::Workspace ws, other;
    shared.forwardInference(X, Xin, C, H, Yc, ws);
    CHECK((Yc.array() == Y.array()).all());
    // another caller with another batch leaves the first workspace's result alone
    shared.forwardInference(X2, Xin.leftCols(2), C.leftCols(2), H.leftCols(2), Y2, other);
    shared.forwardInference(X, Xin, C, H, Yc, ws);
    CHECK((Yc.array() == Y.array()).all());
    // the diagnostics still describe the last forward
    CHECK((r.beta().array() == beta.array()).all());
  }
}

TEMPLATE_TEST_CASE("ConvDeltaNet::forwardInference: forward's logits bit for bit, caches untouched", "[inference]",
                   float, double) {
  using S = TestType;
  std::srand(8);
  for (Index dv : {Index(1), Index(2)}) {
    for (ddl::ResidualKind kind : {ddl::ResidualKind::Delta, ddl::ResidualKind::Additive}) {
      CAPTURE(dv, ddl::toString(kind));
      ddl::ConvDeltaNetConfig cfg = convNetConfig(2, 6, 6, 3, {3, 4}, {2, 1}, dv);
      cfg.learnedExpansion = dv > 1;
      cfg.block.residual.residual = kind;
      ddl::ConvDeltaNet<S> net(cfg, 5);
      perturbParams<S>(net);
      const MatX<S> X1 = MatX<S>::Random(cfg.inputDim(), 3), X2 = MatX<S>::Random(cfg.inputDim(), 2);
      checkNet<S>(net, X1, X2);
    }
  }
}

TEST_CASE("forwardInference allocates nothing once its buffers have their shapes", "[inference][alloc]") {
  std::srand(9);
  ddl::DeltaNetConfig cfg = deltaNetConfig(6, 3, 5, 2, kDefaultHidden, 2);
  cfg.learnedExpansion = true;
  ddl::DeltaNet<float> net(cfg, 3);
  const ddl::ConvDeltaNetConfig ccfg = convNetConfig(2, 4, 4, 3, {3, 4}, {1, 1});
  ddl::ConvDeltaNet<float> cnet(ccfg, 3);
  const MatX<float> X = MatX<float>::Random(6, 8), XI = MatX<float>::Random(ccfg.inputDim(), 2);
  MatX<float> logits, clogits;
  net.forwardInference(X, logits);
  cnet.forwardInference(XI, clogits);
  Eigen::internal::set_is_malloc_allowed(false);
  net.forwardInference(X, logits);
  cnet.forwardInference(XI, clogits);
  Eigen::internal::set_is_malloc_allowed(true);
  CHECK(logits.cols() == 8);
  CHECK(clogits.cols() == 2);
}

TEST_CASE("evaluate uses forwardInference: the training caches survive it", "[inference][train]") {
  std::srand(10);
  ddl::DeltaNet<double> net(deltaNetConfig(4, 3, 4, 1, kDefaultHidden), 2);
  ddl::Dataset<double> data;
  data.images = MatX<double>::Random(4, 10);
  data.labels = {0, 1, 2, 0, 1, 2, 0, 1, 2, 0};
  data.numClasses = 3;
  ddl::SoftmaxCrossEntropy<double> loss;
  const MatX<double> X = MatX<double>::Random(4, 5), dLogits = MatX<double>::Random(3, 5);
  MatX<double> logits;
  net.forward(X, logits);
  net.backward(dLogits);
  const std::vector<MatX<double>> expected = gradients<double>(net);
  ddl::zeroGrad(net);
  net.forward(X, logits);
  const ddl::EvalResult r = ddl::evaluate(net, loss, data, 3);  // batches of 3 columns: other shapes
  CHECK(r.count == 10);
  REQUIRE(net.states()[0].cols() == 5);  // the states still describe the training forward
  net.backward(dLogits);
  const std::vector<MatX<double>> got = gradients<double>(net);
  for (std::size_t i = 0; i < got.size(); ++i) CHECK((got[i].array() == expected[i].array()).all());
}

}  // namespace test_inference
