// Tests for incremental decoding of causal self-attention (nn/blocks/causal_self_attention.hpp: startDecode,
// forwardStep): positions decoded one by one, or a prefill block then single steps, give every column
// of forwardInference on the whole sequence; the errors of a full or unstarted cache and of a wrong c;
// a decode between forward and backward changes no gradient; a step allocates nothing at all.
// Eigen's allocations are counted through EIGEN_RUNTIME_NO_MALLOC with eigen_assert redefined to count
// (as tests/test_alloc.cpp), and operator new through tests/counting_new.hpp: this executable's own.
#define EIGEN_RUNTIME_NO_MALLOC
#include <atomic>
static std::atomic<long> g_eigenAsserts{0};  // Eigen heap allocations while forbidden (or failed Eigen checks)
#define eigen_assert(x) ((x) ? static_cast<void>(0) : static_cast<void>(g_eigenAsserts.fetch_add(1)))

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/nn/blocks/causal_self_attention.hpp"
#include "ddl/testing/grad_check.hpp"

#include "counting_new.hpp"  // counts every global operator new of this executable

namespace test_attention_decode {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl_test::contains;
using ddl_test::thrownMessage;

namespace {

template <class S>
ddl::CausalSelfAttention<S> makeAttention(Index H, Index dh, bool qkNorm, std::uint64_t seed) {
  ddl::CausalSelfAttentionConfig cfg;
  cfg.d = H * dh;
  cfg.heads = H;
  cfg.qkNorm = qkNorm;
  ddl::CausalSelfAttention<S> a(cfg);
  ddl::Rng rng(seed);
  a.init(rng);
  // Gains moved away from 1, so that a step which skipped or misapplied them would show.
  a.visitParams("", [&](const std::string& name, ddl::Param<S>& p) {
    if (contains(name, "norm"))
      for (Index i = 0; i < p.value.rows(); ++i) p.value(i, 0) += static_cast<S>(0.4 * rng.normal());
  });
  return a;
}

template <class S>
MatX<S> randomInput(Index d, Index N, std::uint64_t seed) {
  ddl::Rng rng(seed);
  MatX<S> c(d, N);
  for (Index j = 0; j < N; ++j)
    for (Index i = 0; i < d; ++i) c(i, j) = static_cast<S>(rng.normal());
  return c;
}

// The largest relative error over columns: each column against its own largest entry.
template <class S>
double worstColumnErr(const MatX<S>& got, const MatX<S>& want) {
  REQUIRE(got.rows() == want.rows());
  REQUIRE(got.cols() == want.cols());
  double worst = 0;
  for (Index j = 0; j < got.cols(); ++j)
    worst = std::max(worst, ddl::testing::relErr(got.col(j).template cast<double>(),
                                                 want.col(j).template cast<double>()));
  return worst;
}

// Decodes the columns of c (one sequence) in blocks of the given sizes (cycled), then single steps;
// returns the outputs side by side (d, T).
template <class S>
MatX<S> decode(ddl::CausalSelfAttention<S>& a, const MatX<S>& c, Index capacity, const std::vector<Index>& blocks) {
  typename ddl::CausalSelfAttention<S>::DecodeCache cache;
  a.startDecode(cache, capacity);
  const Index T = c.cols();
  MatX<S> all(c.rows(), T), out;
  Index t = 0;
  for (std::size_t b = 0; t < T; ++b) {
    const Index n = std::min(b < blocks.size() ? blocks[b] : Index(1), T - t);
    a.forwardStep(c.middleCols(t, n), cache, out);
    REQUIRE(out.rows() == c.rows());
    REQUIRE(out.cols() == n);
    all.middleCols(t, n) = out;
    t += n;
    REQUIRE(cache.length == t);
  }
  return all;
}

// operator new calls plus Eigen heap allocations (all threads) while f runs.
template <class F>
long allocationsDuring(F&& f) {
  const long before = ddl_test::operatorNewCount() + g_eigenAsserts.load();
  Eigen::internal::set_is_malloc_allowed(false);
  f();
  Eigen::internal::set_is_malloc_allowed(true);
  return ddl_test::operatorNewCount() + g_eigenAsserts.load() - before;
}

}  // namespace

TEST_CASE("decoding one position at a time, or a prefill then single steps, gives every column of "
          "forwardInference (double)", "[attention][decode]") {
  const long assertsBefore = g_eigenAsserts.load();
  for (Index H : {1, 3})
    for (Index dh : {2, 4, 6})
      for (bool qkNorm : {true, false})
        for (Index T : {1, 2, 5, 9}) {
          CAPTURE(H, dh, qkNorm, T);
          const Index d = H * dh;
          auto a = makeAttention<double>(H, dh, qkNorm, static_cast<std::uint64_t>(100 * H + 10 * dh + T));
          const MatX<double> c = 1.5 * randomInput<double>(d, T, static_cast<std::uint64_t>(7 + T + dh));
          MatX<double> full;
          a.forwardInference(c, ddl::TokenLayout::sequence(1, T), full);
          // One by one, in a cache that fits exactly and in a larger one.
          CHECK(worstColumnErr(decode(a, c, T, {}), full) < 1e-12);
          CHECK(worstColumnErr(decode(a, c, T + 4, {}), full) < 1e-12);
          // A prefill of p positions, then single steps; and blocks of mixed sizes.
          for (Index p = 2; p <= T; ++p) {
            CAPTURE(p);
            CHECK(worstColumnErr(decode(a, c, T, {p}), full) < 1e-12);
          }
          CHECK(worstColumnErr(decode(a, c, T, {2, 1, 3, 2}), full) < 1e-12);
          // Column t is also the last column of forwardInference over the prefix 0 .. t.
          if (T > 1) {
            MatX<double> prefix;
            a.forwardInference(c.leftCols(T - 1), ddl::TokenLayout::sequence(1, T - 1), prefix);
            CHECK(worstColumnErr(MatX<double>(decode(a, c, T, {}).leftCols(T - 1)), prefix) < 1e-12);
          }
        }
  CHECK(g_eigenAsserts.load() == assertsBefore);  // no Eigen check failed along the way
}

TEST_CASE("decoding reaches far positions: T = 64, and each of several sequences in its own cache",
          "[attention][decode]") {
  {
    auto a = makeAttention<double>(2, 8, true, 5);
    const MatX<double> c = randomInput<double>(16, 64, 6);
    MatX<double> full;
    a.forwardInference(c, ddl::TokenLayout::sequence(1, 64), full);
    CHECK(worstColumnErr(decode(a, c, 64, {}), full) < 1e-12);
    CHECK(worstColumnErr(decode(a, c, 64, {17, 1, 30}), full) < 1e-12);
  }
  {
    // B = 3 sequences of T = 6 in one forwardInference; three caches decoded in turns on one layer.
    const Index B = 3, T = 6, H = 3, dh = 4, d = H * dh;
    auto a = makeAttention<double>(H, dh, true, 8);
    const MatX<double> c = randomInput<double>(d, B * T, 9);
    MatX<double> full, out;
    a.forwardInference(c, ddl::TokenLayout::sequence(B, T), full);
    std::vector<ddl::CausalSelfAttention<double>::DecodeCache> caches(B);
    for (auto& cache : caches) a.startDecode(cache, T);
    MatX<double> got(d, B * T);
    for (Index t = 0; t < T; ++t)
      for (Index b = 0; b < B; ++b) {
        a.forwardStep(c.col(b * T + t), caches[static_cast<std::size_t>(b)], out);
        got.col(b * T + t) = out;
      }
    CHECK(worstColumnErr(got, full) < 1e-12);
  }
}

TEST_CASE("decoding in float gives forwardInference's columns within 1e-5", "[attention][decode][float]") {
  for (Index H : {1, 3})
    for (Index dh : {2, 4, 6})
      for (bool qkNorm : {true, false})
        for (Index T : {1, 5, 9}) {
          CAPTURE(H, dh, qkNorm, T);
          const Index d = H * dh;
          auto a = makeAttention<float>(H, dh, qkNorm, static_cast<std::uint64_t>(31 + H + dh + T));
          const MatX<float> c = randomInput<float>(d, T, static_cast<std::uint64_t>(3 + T));
          MatX<float> full;
          a.forwardInference(c, ddl::TokenLayout::sequence(1, T), full);
          CHECK(worstColumnErr(decode(a, c, T, {}), full) < 1e-5);
          CHECK(worstColumnErr(decode(a, c, T, {T > 1 ? T - 1 : 1}), full) < 1e-5);
        }
}

TEST_CASE("a restarted cache decodes the same bits again", "[attention][decode]") {
  auto a = makeAttention<double>(3, 2, true, 12);
  const MatX<double> c = randomInput<double>(6, 7, 13);
  ddl::CausalSelfAttention<double>::DecodeCache cache;
  MatX<double> first(6, 7), out;
  a.startDecode(cache, 7);
  for (Index t = 0; t < 7; ++t) {
    a.forwardStep(c.col(t), cache, out);
    first.col(t) = out;
  }
  a.startDecode(cache, 7);
  CHECK(cache.length == 0);
  for (Index t = 0; t < 7; ++t) {
    a.forwardStep(c.col(t), cache, out);
    CHECK(out == first.col(t));
  }
}

TEST_CASE("forwardStep rejects a full cache, a wrong c and an unstarted cache, and keeps the cache usable",
          "[attention][decode][errors]") {
  using Attention = ddl::CausalSelfAttention<double>;
  auto a = makeAttention<double>(2, 4, true, 3);
  const MatX<double> c = randomInput<double>(8, 4, 4);
  MatX<double> full, out;
  a.forwardInference(c.leftCols(3), ddl::TokenLayout::sequence(1, 3), full);
  Attention::DecodeCache cache;
  CHECK(contains(thrownMessage<ddl::Error>([&] { a.forwardStep(c.col(0), cache, out); }),
                 "ddl::CausalSelfAttention::forwardStep: the cache was not started for this layer (K has shape "
                 "(0, 0), expected (8, capacity)); call startDecode first"));
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { a.startDecode(cache, 0); }),
                 "ddl::CausalSelfAttention::startDecode: capacity must be >= 1, got 0"));
  a.startDecode(cache, 3);
  CHECK(cache.capacity() == 3);
  a.forwardStep(c.col(0), cache, out);
  CHECK(worstColumnErr(out, MatX<double>(full.col(0))) < 1e-12);

  // A wrong c: named by its shape, and the cache stays as it was.
  CHECK(contains(thrownMessage<ddl::ShapeError>([&] { a.forwardStep(MatX<double>::Zero(7, 1), cache, out); }),
                 "ddl::CausalSelfAttention::forwardStep: c has shape (7, 1), expected (8, any)"));
  CHECK(contains(thrownMessage<ddl::ShapeError>([&] { a.forwardStep(MatX<double>::Zero(8, 0), cache, out); }),
                 "c has shape (8, 0), expected (8, n) with n >= 1"));
  // A block that does not fit: named by the capacity, and the cache stays as it was.
  CHECK(contains(thrownMessage<ddl::Error>([&] { a.forwardStep(c.middleCols(1, 3), cache, out); }),
                 "the cache holds 1 of its capacity of 3 positions; c brings 3 more, which do not fit"));
  MatX<double> same = c.col(1);
  CHECK(contains(thrownMessage<ddl::Error>([&] { a.forwardStep(same, cache, same); }), "out must not alias c"));
  CHECK(contains(thrownMessage<ddl::Error>([&] { a.forwardStep(c.col(1), cache, cache.K); }),
                 "out must not alias cache.K"));
  CHECK(cache.length == 1);
  a.forwardStep(c.middleCols(1, 2), cache, out);
  CHECK(worstColumnErr(out, MatX<double>(full.middleCols(1, 2))) < 1e-12);
  CHECK(cache.length == 3);

  // Full: the next position throws, naming the capacity.
  const std::string msg = thrownMessage<ddl::Error>([&] { a.forwardStep(c.col(3), cache, out); });
  CHECK(contains(msg, "ddl::CausalSelfAttention::forwardStep: the cache holds 3 of its capacity of 3 positions; "
                      "c brings 1 more, which do not fit (startDecode with a larger capacity)"));
  CHECK(cache.length == 3);

  // A cache of another layer's width.
  auto other = makeAttention<double>(1, 4, true, 3);
  Attention::DecodeCache small;
  other.startDecode(small, 3);
  CHECK(contains(thrownMessage<ddl::Error>([&] { a.forwardStep(c.col(0), small, out); }),
                 "the cache was not started for this layer (K has shape (4, 3), expected (8, capacity))"));
}

TEST_CASE("decode steps between forward and backward change neither dc nor any gradient",
          "[attention][decode]") {
  for (bool qkNorm : {true, false}) {
    CAPTURE(qkNorm);
    auto a = makeAttention<double>(3, 4, qkNorm, 17);
    const auto layout = ddl::TokenLayout::sequence(2, 5);
    const MatX<double> c = randomInput<double>(12, 10, 18), dOut = randomInput<double>(12, 10, 19);
    const MatX<double> prompt = randomInput<double>(12, 9, 20);
    MatX<double> out, outRef, dc, dcRef, step;
    a.forward(c, layout, outRef);
    ddl::zeroGrad(a);
    a.backward(dOut, dcRef);
    const std::vector<MatX<double>> gradsRef = ddl_test::paramGrads(a);

    a.forward(c, layout, out);
    ddl::CausalSelfAttention<double>::DecodeCache cache;
    a.startDecode(cache, 9);
    a.forwardStep(prompt.leftCols(4), cache, step);  // a block (the step's own product workspace)
    for (Index t = 4; t < 9; ++t) a.forwardStep(prompt.col(t), cache, step);
    ddl::zeroGrad(a);
    a.backward(dOut, dc);
    CHECK(out == outRef);
    CHECK(dc == dcRef);
    CHECK(ddl_test::checkGradsEqual(a, gradsRef) == gradsRef.size());
  }
}

TEST_CASE("a decode step allocates nothing, from the first step after startDecode on, so does a restart",
          "[attention][decode][malloc]") {
  // The counters see allocations at all: one Eigen matrix, one std::vector.
  CHECK(allocationsDuring([] { MatX<double> m(10, 10); }) >= 1);
  CHECK(allocationsDuring([] {
          std::vector<int> v(100);
          asm volatile("" : : "g"(v.data()) : "memory");
        }) >= 1);
  for (bool qkNorm : {true, false})
    for (Index H : {1, 3}) {
      CAPTURE(qkNorm, H);
      auto a = makeAttention<double>(H, 4, qkNorm, 23);
      const Index d = H * 4, T = 12;
      const MatX<double> c = randomInput<double>(d, T, 24);
      ddl::CausalSelfAttention<double>::DecodeCache cache;
      MatX<double> out(d, 1);  // the output's shape is the caller's
      a.startDecode(cache, T);
      const long steps = allocationsDuring([&] {
        for (Index t = 0; t < T; ++t) a.forwardStep(c.col(t), cache, out);
      });
      CHECK(steps == 0);
      CHECK(cache.length == T);
      CHECK(allocationsDuring([&] { a.startDecode(cache, T); }) == 0);
      CHECK(cache.length == 0);
      // The float layer likewise.
      auto f = makeAttention<float>(H, 4, qkNorm, 25);
      const MatX<float> cf = randomInput<float>(d, T, 26);
      ddl::CausalSelfAttention<float>::DecodeCache cacheF;
      MatX<float> outF(d, 1);
      f.startDecode(cacheF, T);
      CHECK(allocationsDuring([&] {
              for (Index t = 0; t < T; ++t) f.forwardStep(cf.col(t), cacheF, outF);
            }) == 0);
    }
}

TEST_CASE("decoding with the authors' attention options (head_dim, partial RoPE, k/v shift, activations, output "
          "norm and gate) gives every column of forwardInference, and a step allocates nothing",
          "[attention][decode][options]") {
  using ddl::QkvActivation;
  for (int variant = 0; variant < 4; ++variant)
    for (Index H : {1, 2})
      for (Index T : {1, 2, 7}) {
        CAPTURE(variant, H, T);
        ddl::CausalSelfAttentionConfig cfg;
        cfg.d = 5;
        cfg.heads = H;
        cfg.qkNorm = variant != 1;
        ddl::AttentionOptions& o = cfg.options;
        o.headDim = variant == 3 ? 1 : 4;
        o.ropeRatio = variant == 0 ? 0.5 : 1.0;
        o.kShift = variant != 2;
        o.vShift = variant != 1;
        o.outputGate = variant != 3;
        o.groupNorm = variant >= 2;
        o.qActivation = variant == 0 ? QkvActivation::SiLU : QkvActivation::Identity;
        o.kActivation = variant == 1 ? QkvActivation::EluPlus1 : QkvActivation::ReLU;
        o.vActivation = variant == 2 ? QkvActivation::SiLU : QkvActivation::Identity;
        ddl::CausalSelfAttention<double> a(cfg);
        ddl::Rng rng(static_cast<std::uint64_t>(31 + variant));
        a.init(rng);
        a.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
          if (contains(name, "norm") || contains(name, "subln"))
            for (Index i = 0; i < p.value.rows(); ++i) p.value(i, 0) += 0.4 * rng.normal();
        });
        const MatX<double> c = 1.5 * randomInput<double>(5, T, static_cast<std::uint64_t>(50 + T));
        MatX<double> full;
        a.forwardInference(c, ddl::TokenLayout::sequence(1, T), full);
        CHECK(worstColumnErr(decode(a, c, T, {}), full) < 1e-12);
        CHECK(worstColumnErr(decode(a, c, T + 2, {2, 3}), full) < 1e-12);
        CHECK(worstColumnErr(decode(a, c, T, {T}), full) < 1e-12);
        ddl::CausalSelfAttention<double>::DecodeCache cache;
        MatX<double> out(5, 1);
        a.startDecode(cache, T);
        CHECK(allocationsDuring([&] {
                for (Index t = 0; t < T; ++t) a.forwardStep(c.col(t), cache, out);
              }) == 0);
        CHECK(allocationsDuring([&] { a.startDecode(cache, T); }) == 0);
        // float: the same within float's rounding, and no allocation either
        ddl::CausalSelfAttention<float> f(cfg);
        ddl::Rng rngF(static_cast<std::uint64_t>(31 + variant));
        f.init(rngF);
        const MatX<float> cf = c.cast<float>();
        MatX<float> fullF;
        f.forwardInference(cf, ddl::TokenLayout::sequence(1, T), fullF);
        CHECK(worstColumnErr(decode(f, cf, T, {2}), fullF) < 1e-5);
        ddl::CausalSelfAttention<float>::DecodeCache cacheF;
        MatX<float> outF(5, 1);
        f.startDecode(cacheF, T);
        CHECK(allocationsDuring([&] {
                for (Index t = 0; t < T; ++t) f.forwardStep(cf.col(t), cacheF, outF);
              }) == 0);
      }
}

}  // namespace test_attention_decode
