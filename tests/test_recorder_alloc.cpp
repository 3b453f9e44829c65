// The recorder costs nothing when it is not used: a net trained with a recorder observing every forward
// gives bit-identical logits and parameters to one without, and its forward and backward make exactly
// the same number of heap allocations, step by step. Allocations are counted by interposing malloc,
// calloc and realloc for this executable (glibc: they forward to __libc_*), which sees Eigen's
// aligned_malloc and operator new alike. A separate executable, so no other test sees the counter.
#include <atomic>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
}

namespace {
std::atomic<long long> g_allocations{0};
}

extern "C" {
void* malloc(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(n, size);
}
void* realloc(void* p, std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, n);
}
}

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/diag/recorder.hpp"
#include "ddl/nn/models/conv_delta_net.hpp"
#include "ddl/nn/models/delta_net.hpp"

namespace test_recorder_alloc {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;

namespace {

template <class F>
long long allocationsOf(F&& f) {
  const long long before = g_allocations.load();
  f();
  return g_allocations.load() - before;
}

template <class Net>
void sgdStep(Net& net) {
  net.visitParams("", [](const std::string&, ddl::Param<float>& p) {
    p.value -= 0.05f * p.grad;
    p.grad.setZero();
  });
}

bool bitwiseEqual(const MatX<float>& a, const MatX<float>& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<std::size_t>(a.size())) == 0;
}

template <class Net>
std::vector<MatX<float>> paramsOf(Net& net) {
  std::vector<MatX<float>> out;
  net.visitParams("", [&](const std::string&, ddl::Param<float>& p) { out.push_back(p.value); });
  return out;
}

// Trains `plain` and `observed` (same configuration and seed) side by side for `steps` steps; the
// recorder observes `observed` after every forward and closes an epoch every 3 steps.
template <class Net>
void checkZeroCost(Net& plain, Net& observed, const MatX<float>& X) {
  ddl::AuditRecorder rec;
  MatX<float> logitsA, logitsB;
  {  // process-wide first-use allocations (thread pool, statics) happen here, not in net A's first step
    Net warm = plain;
    MatX<float> l;
    warm.forward(X, l);
    warm.backward(l);
    ddl::AuditRecorder r;
    r.observe(warm);
    r.endEpoch(1, warm);
  }
  const int steps = 7;
  std::vector<long long> countA, countB, countObserve;
  for (int s = 0; s < steps; ++s) {
    CAPTURE(s);
    countA.push_back(allocationsOf([&] { plain.forward(X, logitsA); }));
    countB.push_back(allocationsOf([&] { observed.forward(X, logitsB); }));
    countObserve.push_back(allocationsOf([&] { rec.observe(observed); }));
    REQUIRE(bitwiseEqual(logitsA, logitsB));
    const MatX<float> dLogits = 0.1f * logitsA;
    countA.back() += allocationsOf([&] { plain.backward(dLogits); });
    countB.back() += allocationsOf([&] { observed.backward(dLogits); });
    sgdStep(plain);
    sgdStep(observed);
    if (s % 3 == 2) rec.endEpoch(s / 3 + 1, observed);
  }
  CHECK(countA == countB);
  const std::vector<MatX<float>> pa = paramsOf(plain), pb = paramsOf(observed);
  REQUIRE(pa.size() == pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) CHECK(bitwiseEqual(pa[i], pb[i]));
  CHECK(rec.rows().size() == 2 * plain.blocks().size());
  // the recorder itself, once its per-block sums exist, allocates nothing per observed batch either
  for (std::size_t s = 1; s < countObserve.size(); ++s) {
    CAPTURE(s);
    CHECK(countObserve[s] == 0);
  }
}

}  // namespace

TEST_CASE("the allocation counter sees Eigen and the standard library", "[recorder][alloc]") {
  CHECK(allocationsOf([] { MatX<float> m(7, 9); m.setZero(); }) >= 1);
  CHECK(allocationsOf([] { std::vector<int> v(100); v[3] = 1; }) >= 1);
  CHECK(allocationsOf([] {}) == 0);
}

TEST_CASE("DeltaNet: a recorder observing every forward changes no output and no allocation", "[recorder][alloc]") {
  ddl::setNumThreads(1);
  const Index dv = GENERATE(1, 3);
  CAPTURE(dv);
  const ddl::DeltaNetConfig cfg = ddl_test::deltaNetConfig(12, 4, 16, 3, 24, dv);
  ddl::DeltaNet<float> plain(cfg, 11), observed(cfg, 11);
  std::srand(3);
  checkZeroCost(plain, observed, MatX<float>::Random(cfg.inputDim, 20));
}

TEST_CASE("ConvDeltaNet: a recorder observing every forward changes no output and no allocation", "[recorder][alloc]") {
  ddl::setNumThreads(1);
  const ddl::ConvDeltaNetConfig cfg = ddl_test::convNetConfig(2, 6, 6, 3, {4, 6}, {1, 1}, 2);
  ddl::ConvDeltaNet<float> plain(cfg, 5), observed(cfg, 5);
  std::srand(4);
  checkZeroCost(plain, observed, MatX<float>::Random(cfg.inputDim(), 3));
}

}  // namespace test_recorder_alloc
