// 1 and 2 threads give bit-identical training (README): a DeltaNet large enough that every
// parallel threshold is crossed (Linear kLinearParallelMin = 2^20 multiply-adds, activations 2^16
// coefficients, delta writes kParallelMinWork = 2^15, AdamW kParallelMin = 2^16 entries per
// tensor) trains a few steps on 1 and on 2 threads; loss, parameters and gradients must match bit for bit.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/nn/models/delta_net.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/train_step.hpp"

namespace test_threads_identical {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;

namespace {
struct RunResult {
  std::vector<double> losses;
  std::vector<float> values, grads;
};

RunResult train(int threads, Index dv) {
  ddl::setNumThreads(threads);
#if DDL_WITH_OPENMP
  REQUIRE(ddl::numThreads() == threads);  // otherwise the comparison would be 1 thread vs 1 thread
#endif
  // hidden 512: fc1 is 128 x 512 = 2^16 entries (AdamW threshold); x 128 tokens = 2^23 MACs
  ddl::DeltaNetConfig c = ddl_test::deltaNetConfig(64, 10, 128, 2, 512, dv);
  ddl::applyPreset(c, "code");
  ddl::DeltaNet<float> net(c, 7);
  ddl::SoftmaxCrossEntropy<float> loss(0.1);
  ddl::AdamW<float> opt;
  ddl::StepBuffers<float> buf;
  const Index B = 128;
  ddl::Rng rng(11);
  MatX<float> X(c.inputDim, B);
  for (Index j = 0; j < X.cols(); ++j)
    for (Index i = 0; i < X.rows(); ++i) X(i, j) = static_cast<float>(rng.normal());
  std::vector<int> y(static_cast<std::size_t>(B));
  for (auto& l : y) l = static_cast<int>(rng.below(10));
  RunResult r;
  for (int step = 0; step < 3; ++step) r.losses.push_back(ddl::trainStep(net, loss, opt, X, y, buf, {}).loss);
  net.visitParams("", [&](const std::string&, ddl::Param<float>& p) {
    r.values.insert(r.values.end(), p.value.data(), p.value.data() + p.value.size());
    r.grads.insert(r.grads.end(), p.grad.data(), p.grad.data() + p.grad.size());
  });
  ddl::setNumThreads(0);
  return r;
}

template <class T>
bool bitIdentical(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}
}  // namespace

TEST_CASE("1 and 2 threads train a DeltaNet bit-identically above every parallel threshold", "[train][threads]") {
  const Index dv = GENERATE(1, 2);
  CAPTURE(dv);
  const RunResult one = train(1, dv), two = train(2, dv);
  CHECK(bitIdentical(one.losses, two.losses));
  CHECK(bitIdentical(one.values, two.values));
  CHECK(bitIdentical(one.grads, two.grads));
  CHECK(one.losses.back() != one.losses.front());  // the steps did train
}

}  // namespace test_threads_identical
