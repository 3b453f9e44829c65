// core/gemm.hpp: the persistent-workspace product agrees with Eigen's product for every transpose
// combination and for blocks, accumulates, rejects bad shapes, and allocates nothing on a repeat call.
// core/packed_sgemm.hpp: the float kernel agrees with a double product on every shape class (edge tiles,
// one row, one column, several depth panels), never reads C without accumulate, and gives the same bits
// however the product is cut into row or column ranges.
#include "eigen_guard.hpp"  // first: live allocation checks even with NDEBUG

#include <limits>
#include <random>
#include <tuple>

#include "catch_compat.hpp"
#include "ddl/core/gemm.hpp"
#include "ddl/core/packed_sgemm.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_gemm {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;

TEST_CASE("GemmWorkspace matches Eigen's product for op(A) op(B)", "[core][gemm]") {
  const auto seed = GENERATE(take(6, random(1u, 100000u)));
  std::mt19937 rng(seed);
  std::srand(seed);
  std::uniform_int_distribution<int> dim(1, 300);
  const Index m = dim(rng), n = dim(rng), k = dim(rng);
  const bool transA = seed % 2, transB = (seed / 2) % 2;
  CAPTURE(seed, m, n, k, transA, transB);
  MatX<double> A = transA ? MatX<double>::Random(k, m) : MatX<double>::Random(m, k);
  MatX<double> B = transB ? MatX<double>::Random(n, k) : MatX<double>::Random(k, n);
  MatX<double> expected(m, n), C(m, n);
  if (transA && transB) expected.noalias() = A.transpose() * B.transpose();
  else if (transA) expected.noalias() = A.transpose() * B;
  else if (transB) expected.noalias() = A * B.transpose();
  else expected.noalias() = A * B;
  ddl::GemmWorkspace<double> ws;
  ws.product(A, transA, B, transB, C, 1.0, false);
  CHECK(ddl::testing::relErr(C, expected) < 1e-13);
  ws.product(A, transA, B, transB, C, -0.5, true);  // C += -0.5 op(A) op(B)
  CHECK(ddl::testing::relErr(C, 0.5 * expected) < 1e-13);
}

TEST_CASE("GemmWorkspace works on blocks of larger matrices", "[core][gemm]") {
  std::srand(3);
  MatX<float> W = MatX<float>::Random(40, 30), X = MatX<float>::Random(30, 50), Y = MatX<float>::Zero(40, 50);
  ddl::GemmWorkspace<float> ws;
  ws.product(W.middleRows(5, 20), false, X.middleCols(10, 25), false, Y.block(0, 10, 20, 25), 1.0f, false);
  MatX<float> expected = W.middleRows(5, 20) * X.middleCols(10, 25);
  CHECK(ddl::testing::relErr(Y.block(0, 10, 20, 25), expected) < 1e-6);
  CHECK(Y.leftCols(10).isZero());
}

TEST_CASE("GemmWorkspace allocates nothing on a repeated shape", "[core][gemm][alloc]") {
  MatX<float> A = MatX<float>::Random(1024, 256), B = MatX<float>::Random(256, 128), C(1024, 128);
  ddl::GemmWorkspace<float> ws;
  ws.product(A, false, B, false, C, 1.0f, false);  // sizes the buffers (well above 128 KiB)
  Eigen::internal::set_is_malloc_allowed(false);
  ws.product(A, false, B, false, C, 1.0f, true);
  Eigen::internal::set_is_malloc_allowed(true);
  bool plainEigenAllocates = false;  // the reason this class exists: Eigen's own product allocates here
  Eigen::internal::set_is_malloc_allowed(false);
  try {
    C.noalias() = A * B;
  } catch (const ddl_test::EigenAssertFailure&) {
    plainEigenAllocates = true;
  }
  Eigen::internal::set_is_malloc_allowed(true);
  CHECK(plainEigenAllocates);
}

TEST_CASE("GemmWorkspace rejects shapes that do not chain", "[core][gemm][errors]") {
  MatX<double> A(3, 4), B(5, 2), C(3, 2);
  ddl::GemmWorkspace<double> ws;
  const std::string msg = ddl_test::thrownMessage<ddl::ShapeError>([&] { ws.product(A, false, B, false, C, 1.0, false); });
  CHECK(ddl_test::contains(msg, "ddl::GemmWorkspace::product: op(A) is (3, 4), op(B) is (5, 2) and C is (3, 2)"));
}

// The rows of A packed at once are cut for a tall product (core/gemm.hpp, packedRows); every bit must be
// the one of Eigen's kernel with its own blocking, which packs all rows.
template <class S>
void checkTallProductBits(Index m, Index n, Index k, bool transA, bool transB) {
  CAPTURE(m, n, k, transA, transB);
  REQUIRE(ddl::GemmWorkspace<S>::packedRows(m, n, k) < m);
  MatX<S> A = transA ? MatX<S>::Random(k, m) : MatX<S>::Random(m, k);
  MatX<S> B = transB ? MatX<S>::Random(n, k) : MatX<S>::Random(k, n);
  MatX<S> C(m, n), expected = MatX<S>::Zero(m, n);
  Eigen::internal::gemm_blocking_space<Eigen::ColMajor, S, S, Eigen::Dynamic, Eigen::Dynamic, Eigen::Dynamic> all(
      m, n, k, 1, true);
  REQUIRE(all.mc() == m);
  const auto run = [&](auto lhsOrder, auto rhsOrder) {
    Eigen::internal::general_matrix_matrix_product<Index, S, decltype(lhsOrder)::value, false, S,
                                                   decltype(rhsOrder)::value, false, Eigen::ColMajor, 1>::
        run(m, n, k, A.data(), A.outerStride(), B.data(), B.outerStride(), expected.data(), 1, expected.outerStride(),
            S(0.75), all, nullptr);
  };
  using Col = std::integral_constant<int, Eigen::ColMajor>;
  using Row = std::integral_constant<int, Eigen::RowMajor>;
  if (transA && transB) run(Row(), Row());
  else if (transA) run(Row(), Col());
  else if (transB) run(Col(), Row());
  else run(Col(), Col());
  ddl::GemmWorkspace<S> ws;
  ws.product(A, transA, B, transB, C, S(0.75), false);
  CHECK(C.cwiseEqual(expected).all());
}

// Eigen's product for float too while alive (the packed kernel's own bits are checked below).
struct EigenProductsOnly {
  bool previous = ddl::setPackedSgemmEnabled(false);
  ~EigenProductsOnly() { ddl::setPackedSgemmEnabled(previous); }
};

// Eigen's blocking follows the cache sizes it reads from the CPU: with a 48 KiB L1 (Zen 4) it packs few rows
// for these shapes by itself and the cut never applies. The cache sizes of the AVX2 EPYCs (32 KiB, 512 KiB
// and Eigen's 256 MiB L3 estimate) are set while alive, so the cut is exercised on every CPU.
struct FixedCacheSizes {
  std::ptrdiff_t l1 = Eigen::l1CacheSize(), l2 = Eigen::l2CacheSize(), l3 = Eigen::l3CacheSize();
  FixedCacheSizes() { Eigen::setCpuCacheSizes(32 << 10, 512 << 10, 256 << 20); }
  ~FixedCacheSizes() { Eigen::setCpuCacheSizes(l1, l2, l3); }
};

TEST_CASE("GemmWorkspace cuts the packed rows of a tall product without changing a bit", "[core][gemm]") {
  std::srand(5);
  const EigenProductsOnly eigen;
  const FixedCacheSizes caches;
  checkTallProductBits<float>(5003, 40, 1000, false, false);  // k > kc: two panels, as the LM head's 768
  checkTallProductBits<float>(5016, 33, 1000, true, false);
  checkTallProductBits<float>(4999, 41, 1000, false, true);
  checkTallProductBits<double>(3001, 29, 600, true, true);
}

// op(A) op(B) with the four transpose combinations, in double: the reference of the float kernel.
MatX<double> referenceProduct(const MatX<float>& A, bool transA, const MatX<float>& B, bool transB) {
  const MatX<double> a = A.cast<double>(), b = B.cast<double>();
  if (transA && transB) return a.transpose() * b.transpose();
  if (transA) return a.transpose() * b;
  if (transB) return a * b.transpose();
  return a * b;
}

MatX<float> operand(Index rows, Index cols, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  MatX<float> M(rows, cols);
  for (Index j = 0; j < cols; ++j)
    for (Index i = 0; i < rows; ++i) M(i, j) = u(rng);
  return M;
}

TEST_CASE("The packed float kernel agrees with a double product on every shape class", "[core][gemm][packed]") {
  if (!ddl::packedSgemmSupported()) {
    WARN("this CPU or build has no packed float kernel (AVX2 + FMA, no AVX-512 build): Eigen's product is used");
    return;
  }
  // m, n, k around the tile (16 x 6), the in-place B limit (64 rows), the depth panel (256) and the
  // row block (192).
  const auto shape = GENERATE(table<Index, Index, Index>({{1, 1, 1},     {16, 6, 1},     {15, 5, 7},
                                                          {17, 7, 256},  {64, 13, 257},  {65, 12, 300},
                                                          {193, 37, 513}, {1, 200, 40},  {300, 1, 40},
                                                          {40, 31, 1},   {128, 256, 128}}));
  const Index m = std::get<0>(shape), n = std::get<1>(shape), k = std::get<2>(shape);
  std::mt19937 rng(static_cast<unsigned>(m * 1000003 + n * 1009 + k));
  for (const bool transA : {false, true})
    for (const bool transB : {false, true}) {
      CAPTURE(m, n, k, transA, transB);
      const MatX<float> A = transA ? operand(k, m, rng) : operand(m, k, rng);
      const MatX<float> B = transB ? operand(n, k, rng) : operand(k, n, rng);
      const MatX<double> expected = referenceProduct(A, transA, B, transB);
      // C is a block of a larger matrix (outer stride > m) and starts as NaN: without accumulate the
      // kernel must not read it.
      MatX<float> big = MatX<float>::Constant(m + 3, n + 2, std::numeric_limits<float>::quiet_NaN());
      ddl::GemmWorkspace<float> ws;
      ws.product(A, transA, B, transB, big.block(1, 1, m, n), -1.5f, false);
      CHECK(big.block(1, 1, m, n).allFinite());
      CHECK(ddl::testing::relErr(MatX<double>(big.block(1, 1, m, n).cast<double>()), -1.5 * expected) < 2e-6);
      CHECK(big.row(0).hasNaN());  // nothing outside the block written
      ws.product(A, transA, B, transB, big.block(1, 1, m, n), 0.5f, true);  // C += 0.5 op(A) op(B)
      CHECK(ddl::testing::relErr(MatX<double>(big.block(1, 1, m, n).cast<double>()), -1.0 * expected) < 2e-6);
      // Operands that are blocks of larger matrices (strides other than their rows).
      const MatX<float> Abig = operand(A.rows() + 5, A.cols() + 1, rng), Bbig = operand(B.rows() + 2, B.cols() + 3, rng);
      MatX<float> C(m, n);
      ws.product(Abig.block(2, 1, A.rows(), A.cols()), transA, Bbig.block(1, 2, B.rows(), B.cols()), transB, C, 1.0f,
                 false);
      CHECK(ddl::testing::relErr(MatX<double>(C.cast<double>()),
                                 referenceProduct(Abig.block(2, 1, A.rows(), A.cols()), transA,
                                                  Bbig.block(1, 2, B.rows(), B.cols()), transB)) < 2e-6);
    }
}

TEST_CASE("The packed float kernel gives the same bits for any cut of a product into row or column ranges",
          "[core][gemm][packed]") {
  if (!ddl::packedSgemmSupported()) {
    WARN("this CPU or build has no packed float kernel: nothing to check");
    return;
  }
  std::mt19937 rng(11);
  const Index m = 211, n = 53, k = 600;  // three depth panels, two row blocks, an edge tile each way
  for (const bool transA : {false, true})
    for (const bool transB : {false, true}) {
      CAPTURE(transA, transB);
      const MatX<float> A = transA ? operand(k, m, rng) : operand(m, k, rng);
      const MatX<float> B = transB ? operand(n, k, rng) : operand(k, n, rng);
      MatX<float> whole(m, n), cut(m, n);
      ddl::GemmWorkspace<float> ws;
      ws.product(A, transA, B, transB, whole, 0.75f, false);
      // Column ranges, as Linear's forward gives each thread (cuts inside a 6-column panel).
      for (const Index j0 : {Index(0), Index(7), Index(31)}) {
        const Index j1 = j0 == 0 ? 7 : j0 == 7 ? 31 : n;
        const MatX<float> Bj = transB ? MatX<float>(B.middleRows(j0, j1 - j0)) : MatX<float>(B.middleCols(j0, j1 - j0));
        ws.product(A, transA, Bj, transB, cut.middleCols(j0, j1 - j0), 0.75f, false);
      }
      CHECK(cut.cwiseEqual(whole).all());
      // Row ranges, as Linear's weight gradient gives each thread (one of them below the in-place limit).
      for (const Index i0 : {Index(0), Index(40), Index(101)}) {
        const Index i1 = i0 == 0 ? 40 : i0 == 40 ? 101 : m;
        const MatX<float> Ai = transA ? MatX<float>(A.middleCols(i0, i1 - i0)) : MatX<float>(A.middleRows(i0, i1 - i0));
        ws.product(Ai, transA, B, transB, cut.middleRows(i0, i1 - i0), 0.75f, false);
      }
      CHECK(cut.cwiseEqual(whole).all());
    }
}

TEST_CASE("The packed float kernel is no less accurate than Eigen's float product", "[core][gemm][packed]") {
  if (!ddl::packedSgemmSupported()) {
    WARN("this CPU or build has no packed float kernel: nothing to compare");
    return;
  }
  std::mt19937 rng(23);
  for (const Index k : {Index(64), Index(200), Index(1024)}) {  // one depth panel, and four
    CAPTURE(k);
    const MatX<float> A = operand(96, k, rng), B = operand(k, 96, rng);
    const MatX<double> exact = referenceProduct(A, false, B, false);
    MatX<float> packed(96, 96), eigen(96, 96);
    ddl::GemmWorkspace<float> ws;
    ws.product(A, false, B, false, packed, 1.0f, false);
    {
      const EigenProductsOnly only;
      ws.product(A, false, B, false, eigen, 1.0f, false);
    }
    // Root-mean-square errors over 9216 entries: one draw's noise averages out.
    const double errPacked = (packed.cast<double>() - exact).norm(), errEigen = (eigen.cast<double>() - exact).norm();
    CAPTURE(errPacked, errEigen);
    CHECK(errPacked <= 1.05 * errEigen);
  }
}

TEST_CASE("The packed float kernel can be switched off for Eigen's product", "[core][gemm][packed]") {
  std::mt19937 rng(5);
  const MatX<float> A = operand(70, 90, rng), B = operand(90, 33, rng);
  MatX<float> packed(70, 33), eigen(70, 33);
  ddl::GemmWorkspace<float> ws;
  ws.product(A, false, B, false, packed, 1.0f, false);
  {
    const EigenProductsOnly only;
    CHECK_FALSE(ddl::packedSgemmEnabled());
    ws.product(A, false, B, false, eigen, 1.0f, false);
  }
  CHECK(ddl::packedSgemmEnabled() == ddl::packedSgemmSupported());
  const MatX<float> plain = A * B;
  CHECK(ddl::testing::relErr(eigen, plain) < 1e-6);
  CHECK(ddl::testing::relErr(packed, plain) < 1e-5);
}

}  // namespace test_gemm
