// Steady-state training allocates nothing at all: a counting global operator new (every form:
// plain, array, nothrow, aligned) sees std::string and std::vector allocations that Eigen's
// EIGEN_RUNTIME_NO_MALLOC cannot. After warm-up steps, AdamW::step, Sgd::step, zeroGrad and
// clipGradNorm over a ParamList, and a whole trainStep (forward, loss, backward, finite guard,
// clipping, optimizer step, zeroGrad) must not allocate, for DeltaNet (dv 1 and 2, every
// residual kind) and ConvDeltaNet, at 1 thread and (with OpenMP) 2 threads. The OpenMP runtime
// allocates when a thread count first runs a parallel region, hence a warm-up per thread count.
// Eigen allocates through std::malloc, not operator new: its allocations are counted through
// EIGEN_RUNTIME_NO_MALLOC, whose check calls eigen_assert, here redefined to count (not to throw:
// an exception from inside DenseStorage::resize would leave a freed pointer behind).
// This file replaces the global operator new, so it is an executable of its own (tests/CMakeLists.txt).
#include "counting_alloc.hpp"  // first: counts operator new and Eigen allocations (allocationsDuring)

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/core/param_list.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/nn/models/conv_delta_net.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/nn/models/delta_net.hpp"
#include "ddl/ops/delta_write.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/finite_guard.hpp"
#include "ddl/train/grad_clip.hpp"
#include "ddl/train/next_token_task.hpp"
#include "ddl/train/sgd.hpp"
#include "ddl/train/text_windows.hpp"
#include "ddl/train/train_step.hpp"
#include "ddl/train/trainer.hpp"

namespace test_alloc {  // each test file in its own namespace: a group of files compiles as one unit


using ddl::Index;
using ddl::MatX;
using ddl_test::allocationsDuring;

namespace {

// Keeps a new/delete pair from being elided (C++14 allows merging or omitting them).
template <class T>
T* escape(T* p) {
  asm volatile("" : : "g"(p) : "memory");
  return p;
}

// The thread counts to test: 1, and 2 when the build has OpenMP.
std::vector<int> threadCounts() {
  std::vector<int> t{1};
  if (DDL_WITH_OPENMP) t.push_back(2);
  return t;
}

void fillNormal(MatX<float>& M, std::uint64_t seed) {
  ddl::Rng rng(seed);
  for (Index j = 0; j < M.cols(); ++j)
    for (Index i = 0; i < M.rows(); ++i) M(i, j) = static_cast<float>(rng.normal());
}

std::vector<int> labelsFor(Index n, Index classes, int shift) {
  std::vector<int> y(static_cast<std::size_t>(n));
  for (Index j = 0; j < n; ++j) y[static_cast<std::size_t>(j)] = static_cast<int>((j * 7 + shift) % classes);
  return y;
}

ddl::DeltaNetConfig mlpConfig(ddl::ResidualKind kind, Index dv, Index d = 12, Index hidden = 24) {
  return ddl_test::withPreset(ddl_test::deltaNetConfig(10, 3, d, 2, hidden, dv), "code", kind);
}

ddl::ConvDeltaNetConfig convConfig(ddl::ResidualKind kind, Index dv) {
  // two stages of different width and resolution
  const ddl::ConvDeltaNetConfig shape = ddl_test::convNetConfig(2, 6, 6, 3, {4, 6}, {1, 2}, dv);
  ddl::ConvDeltaNetConfig c = ddl_test::withPreset(shape, "code", kind);
  c.learnedExpansion = dv > 1;
  return c;
}

// What a steady-state step allocated, per piece; every count must be 0.
struct StepAllocations {
  long trainStep = 0, trainStepClipped = 0, adamw = 0, sgd = 0, zeroGrad = 0, clip = 0, guard = 0;
};

// Two warm-up steps at the thread count (buffers, caches, optimizer state, the OpenMP pool), then
// the pieces of a step one by one and whole trainSteps, the last one with clipping active.
template <class Net>
StepAllocations steadyState(Net& net, const MatX<float>& X1, const MatX<float>& X2, int threads) {
  ddl::setNumThreads(threads);
  ddl::SoftmaxCrossEntropy<float> loss(0.1);
  ddl::AdamW<float> adamw;
  ddl::SgdOptions so;
  so.momentum = 0.9;
  so.nesterov = true;
  ddl::Sgd<float> sgd(so);
  ddl::StepBuffers<float> buf;
  const ddl::FiniteGuard<float> guard(net);
  const std::vector<int> y1 = labelsFor(X1.cols(), 3, 0), y2 = labelsFor(X2.cols(), 3, 1);
  std::int64_t stepNo = 0;
  auto checked = [&](const ddl::StepStats& s) { guard.check(s.loss, ++stepNo); };
  ddl::ParamList<float> params(net);
  for (int i = 0; i < 2; ++i) {  // warm-up
    ddl::trainStep(net, loss, adamw, X1, y1, buf, {1.0}, checked);
    ddl::trainStep(net, loss, adamw, X2, y2, buf, {1e-3}, checked);
    sgd.step(params);
    ddl::clipGradNorm(params, 1e-3);
  }
  StepAllocations a;
  a.zeroGrad = allocationsDuring([&] { ddl::zeroGrad(params); });
  net.forward(X1, buf.logits);
  loss.forward(buf.logits, y1);
  loss.backward(buf.logits);  // as the step does: the gradient in the logits' place
  net.backward(buf.logits);
  a.guard = allocationsDuring([&] { guard.check(0.5, 1); });
  a.clip = allocationsDuring([&] { ddl::clipGradNorm(params, 1e-3); });
  a.adamw = allocationsDuring([&] { adamw.step(params); });
  a.sgd = allocationsDuring([&] { sgd.step(params); });
  a.trainStep = allocationsDuring([&] {
    ddl::trainStep(net, loss, adamw, X1, y1, buf, {0.0}, checked);
    ddl::trainStep(net, loss, adamw, X2, y2, buf, {1.0}, checked);
  });
  a.trainStepClipped = allocationsDuring([&] { ddl::trainStep(net, loss, adamw, X1, y1, buf, {1e-3}, checked); });
  return a;
}

void checkNone(const StepAllocations& a) {
  CHECK(a.zeroGrad == 0);
  CHECK(a.guard == 0);
  CHECK(a.clip == 0);
  CHECK(a.adamw == 0);
  CHECK(a.sgd == 0);
  CHECK(a.trainStep == 0);
  CHECK(a.trainStepClipped == 0);
}

const ddl::ResidualKind kKinds[] = {ddl::ResidualKind::Delta, ddl::ResidualKind::Additive,
                                    ddl::ResidualKind::WriteOnly};

// Runs a Trainer or TrainingLoop of six batches and checks that from the fourth on a batch makes no
// operator new call (the counter is read at the end of every batch).
template <class Runner>
void runSixBatchesSteadyAfterThird(Runner& runner) {
  std::vector<long> counts;
  counts.reserve(8);
  runner.onBatch = [&](const ddl::BatchProgress&) { counts.push_back(ddl_test::operatorNewCount()); };
  runner.run();
  REQUIRE(counts.size() == 6);
  for (std::size_t i = 3; i < counts.size(); ++i) {
    CAPTURE(i);
    CHECK(counts[i] - counts[i - 1] == 0);
  }
}

}  // namespace

TEST_CASE("the counting operator new sees every form of allocation", "[alloc]") {
  struct alignas(64) Wide {
    float v[16];
  };
  CHECK(allocationsDuring([] { delete escape(new int(1)); }) == 1);
  CHECK(allocationsDuring([] { delete[] escape(new int[3]); }) == 1);
  CHECK(allocationsDuring([] { delete escape(new (std::nothrow) int(1)); }) == 1);
  CHECK(allocationsDuring([] { delete escape(new Wide()); }) == 1);
  CHECK(allocationsDuring([] { delete[] escape(new Wide[2]); }) == 1);
  CHECK(allocationsDuring([] { delete escape(new (std::nothrow) Wide()); }) == 1);
  CHECK(allocationsDuring([] { delete[] escape(new (std::nothrow) Wide[2]); }) == 1);
  CHECK(allocationsDuring([] {
          MatX<float> m(100, 100);
          escape(m.data());
        }) == 1);  // Eigen's std::malloc, seen through EIGEN_RUNTIME_NO_MALLOC
  CHECK(allocationsDuring([] {
          std::string s(100, 'x');
          escape(s.data());
        }) == 1);
  CHECK(allocationsDuring([] {
          std::vector<double> v(5);
          escape(v.data());
        }) == 1);
  // A module's own walk builds dotted names: the reason for ParamList.
  ddl::DeltaNet<float> net(mlpConfig(ddl::ResidualKind::Delta, 1), 1);
  CHECK(allocationsDuring([&] { ddl::zeroGrad(net); }) > 0);
}

TEST_CASE("ParamList keeps the walk's names and order and refreshes when the model changes", "[alloc][param_list]") {
  ddl::DeltaNet<float> net(mlpConfig(ddl::ResidualKind::Delta, 2), 1);
  std::vector<std::string> names;
  std::vector<ddl::Param<float>*> ptrs;
  net.visitParams("", [&](const std::string& n, ddl::Param<float>& p) {
    names.push_back(n);
    ptrs.push_back(&p);
  });
  ddl::ParamList<float> list(net);
  REQUIRE(list.size() == names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    CHECK(list[i].name == names[i]);
    CHECK(list[i].param == ptrs[i]);
  }
  std::vector<std::string> prefixed;
  list.visitParams("m", [&](const std::string& n, ddl::Param<float>&) { prefixed.push_back(n); });
  CHECK(prefixed.front() == "m." + names.front());
  CHECK(ddl::numParams(list) == ddl::numParams(net));
  CHECK_FALSE(list.refresh(net));  // current: nothing to do
  CHECK(list.model() == &net);
  ddl::ParamList<float> copy = list;  // a copy, not a list built by walking the list
  CHECK(copy.model() == &net);

  // A reassigned model moves new storage into every parameter: the list notices and rebuilds.
  const Index oldSize = ptrs[0]->value.size();
  net = ddl::DeltaNet<float>(mlpConfig(ddl::ResidualKind::Delta, 2, 8, 16), 2);
  CHECK_FALSE(list.unchanged());
  CHECK(list.refresh(net));
  CHECK(list.unchanged());
  CHECK(list[0].param->value.rows() == 8);  // the new net's shapes, read anew
  CHECK(list[0].param->value.size() != oldSize);
  // Another object: rebuilt as well.
  ddl::DeltaNet<float> other(mlpConfig(ddl::ResidualKind::Delta, 1), 1);
  CHECK(list.refresh(other));
  CHECK(list.model() == &other);
}

TEST_CASE("AdamW over a ParamList still refuses another model's parameters by name and shape", "[alloc][param_list]") {
  ddl::DeltaNet<float> a(mlpConfig(ddl::ResidualKind::Delta, 1), 1), b(mlpConfig(ddl::ResidualKind::Additive, 1), 1),
      c(mlpConfig(ddl::ResidualKind::Delta, 1, 12, 20), 1);
  ddl::ParamList<float> la(a), lb(b), lc(c);
  ddl::AdamW<float> opt;
  opt.step(la);
  opt.step(a);  // the model's own walk and the list agree
  const std::vector<MatX<float>> before = [&] {
    std::vector<MatX<float>> v;
    for (const auto& e : lb) v.push_back(e.param->value);
    return v;
  }();
  CHECK_THROWS_AS(opt.step(lb), ddl::ValueError);  // other names (no gate, no value head)
  CHECK_THROWS_AS(opt.step(lc), ddl::ShapeError);  // same names, other hidden width
  std::size_t i = 0;
  for (const auto& e : lb) CHECK(e.param->value == before[i++]);  // nothing was updated
  CHECK(opt.stepCount() == 2);
}

TEST_CASE("DeltaNet: a steady-state training step allocates nothing", "[alloc][train]") {
  MatX<float> X1(10, 12), X2(10, 12);
  fillNormal(X1, 1);
  fillNormal(X2, 2);
  for (const Index dv : {1, 2})
    for (const ddl::ResidualKind kind : kKinds)
      for (const int threads : threadCounts()) {
        CAPTURE(dv, ddl::toString(kind), threads);
        ddl::DeltaNet<float> net(mlpConfig(kind, dv), 3);
        checkNone(steadyState(net, X1, X2, threads));
      }
  ddl::setNumThreads(1);
}

TEST_CASE("DeltaNet above the threading thresholds: a steady-state step allocates nothing", "[alloc][train]") {
  // fc1 and fc2 hold 64 * 1024 = 65536 weights, AdamW's threshold for splitting a tensor over threads.
  MatX<float> X1(10, 16), X2(10, 16);
  fillNormal(X1, 3);
  fillNormal(X2, 4);
  for (const int threads : threadCounts()) {
    CAPTURE(threads);
    ddl::DeltaNet<float> net(mlpConfig(ddl::ResidualKind::Delta, 2, 64, 1024), 4);
    checkNone(steadyState(net, X1, X2, threads));
  }
  ddl::setNumThreads(1);
}

TEST_CASE("ConvDeltaNet: a steady-state training step allocates nothing", "[alloc][train][conv]") {
  for (const Index dv : {1, 2})
    for (const ddl::ResidualKind kind : kKinds)
      for (const int threads : threadCounts()) {
        CAPTURE(dv, ddl::toString(kind), threads);
        const ddl::ConvDeltaNetConfig cfg = convConfig(kind, dv);
        MatX<float> X1(cfg.inputDim(), 3), X2(cfg.inputDim(), 3);
        fillNormal(X1, 5);
        fillNormal(X2, 6);
        ddl::ConvDeltaNet<float> net(cfg, 5);
        checkNone(steadyState(net, X1, X2, threads));
      }
  ddl::setNumThreads(1);
}

TEST_CASE("Trainer: a steady-state step of the loop, with a step hook and the guard, allocates nothing", "[alloc][train][trainer]") {
  // 96 samples in batches of 16: every batch is full, so X and the labels keep their size. The
  // allocations between two onBatch calls are one whole step of the loop: next batch, schedule,
  // forward, task loss, backward, the hook, the NaN/Inf guard, clipping, AdamW, the running sums.
  ddl::Dataset<float> train;
  train.numClasses = 3;
  train.shape = ddl::ImageShape{1, 1, 10};
  train.images.resize(10, 96);
  fillNormal(train.images, 7);
  train.labels = labelsFor(96, 3, 0);
  for (const int threads : threadCounts()) {
    CAPTURE(threads);
    ddl::TrainerOptions opt;
    opt.epochs = 1;
    opt.batchSize = 16;
    opt.clipNorm = 1.0;
    opt.threads = threads;
    ddl::DeltaNet<float> net(mlpConfig(ddl::ResidualKind::Delta, 2), 3);
    ddl::Trainer<float> trainer(net, train, opt);
    trainer.addStepHook([](ddl::StepContext<float>& c) {
      for (const auto& p : c.params) p.param->grad *= 0.5f;  // an allreduce's averaging, in place
    });
    runSixBatchesSteadyAfterThird(trainer);
  }
  ddl::setNumThreads(1);
}

TEST_CASE("the delta kernels evaluate expression operands once, before their parallel loop", "[alloc][ops]") {
  // X = A * B is a product expression: indexing its columns inside the token loop would evaluate
  // the whole product (and allocate) per access, inside an OpenMP region where a bad_alloc ends
  // the process. d * N * dv = 32768 is the kernels' threading threshold.
  const Index d = 64, N = 256, dv = 2;
  MatX<float> K(d, N), beta(1, N), V(dv, N), A(d, 4), B(4, dv * N), G(d, dv * N);
  fillNormal(K, 7);
  K.colwise().normalize();
  fillNormal(beta, 8);
  beta = beta.cwiseAbs();
  fillNormal(V, 9);
  fillNormal(A, 10);
  fillNormal(B, 11);
  fillNormal(G, 12);
  const MatX<float> X = A * B;
  for (const int threads : threadCounts()) {
    CAPTURE(threads);
    ddl::setNumThreads(threads);
    MatX<float> Y, Delta, Y2, Delta2, dX, dK, dV, dX2, dK2, dV2;
    ddl::RowX<float> dBeta, dBeta2;
    ddl::deltaWrite(K, beta, V, X, Y, Delta);  // sizes the outputs, warms the threads up
    ddl::deltaWriteBackward(K, beta, X, Delta, G, dX, dK, dBeta, dV);
    ddl::deltaWrite(K, beta, V, X, Y2, Delta2);
    ddl::deltaWriteBackward(K, beta, X, Delta, G, dX2, dK2, dBeta2, dV2);
    CHECK(allocationsDuring([&] { ddl::deltaWrite(K, beta, V, X, Y, Delta); }) == 0);
    // One evaluation of the product (and Eigen's GEMM blocking), however many tokens.
    CHECK(allocationsDuring([&] { ddl::deltaWrite(K, beta, V, A * B, Y2, Delta2); }) <= 3);
    CHECK(allocationsDuring([&] { ddl::deltaWriteBackward(K, beta, A * B, Delta, G, dX2, dK2, dBeta2, dV2); }) <= 3);
    CHECK(allocationsDuring([&] { ddl::deltaApply(K, beta, A * B, Y2); }) <= 3);
    CHECK(allocationsDuring([&] { ddl::deltaApplyBackward(K, beta, A * B, G, dX2, dK2, dBeta2); }) <= 3);
    CHECK(allocationsDuring([&] { ddl::writeOnly(K, beta, V, A * B, Y2); }) <= 3);
    ddl::deltaWrite(K, beta, V, A * B, Y2, Delta2);
    CHECK(Y2.isApprox(Y));
    CHECK(Delta2.isApprox(Delta));
  }
  ddl::setNumThreads(1);
}

TEST_CASE("DeltaLM through the training loop: a steady-state step allocates nothing", "[alloc][train][lm]") {
  // Random windows of a byte text: every batch has the same shape, so the allocations between two
  // onBatch calls are one whole step: windows, schedule, forward, next-token loss, backward, guard,
  // clipping, AdamW.
  std::vector<std::uint8_t> text(400);
  for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<std::uint8_t>((i * 7 + i / 5) % 251);
  for (const char* variant : {"dv1", "cc", "tc-ec"})
    for (const int threads : threadCounts()) {
      CAPTURE(variant, threads);
      const ddl::DeltaLMConfig cfg = ddl_test::deltaLMConfig(16, 2, 2, 8, 24, variant);
      ddl::TrainerOptions opt;
      opt.epochs = 1;
      opt.batchSize = 3;
      opt.clipNorm = 1.0;
      opt.threads = threads;
      ddl::DeltaLM<float> lm(cfg, 3);
      ddl::NextTokenTask<float> task;
      ddl::TextWindows<float> windows(text, 3, 8, 6, 1);
      ddl::AdamW<float> adam(opt.adam);
      ddl::TrainingLoop<ddl::DeltaLM<float>, ddl::NextTokenTask<float>, ddl::TextWindows<float>, ddl::AdamW<float>> loop(
          lm, task, windows, adam, opt);
      runSixBatchesSteadyAfterThird(loop);
    }
  ddl::setNumThreads(1);
}

}  // namespace test_alloc
