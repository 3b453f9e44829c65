// core/gemm.hpp: the persistent-workspace product agrees with Eigen's product for every transpose
// combination and for blocks, accumulates, rejects bad shapes, and allocates nothing on a repeat call.
#include "eigen_guard.hpp"  // first: live allocation checks even with NDEBUG

#include <random>

#include "catch_compat.hpp"
#include "ddl/core/gemm.hpp"
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

TEST_CASE("GemmWorkspace cuts the packed rows of a tall product without changing a bit", "[core][gemm]") {
  std::srand(5);
  checkTallProductBits<float>(5003, 40, 1000, false, false);  // k > kc: two panels, as the LM head's 768
  checkTallProductBits<float>(5016, 33, 1000, true, false);
  checkTallProductBits<float>(4999, 41, 1000, false, true);
  checkTallProductBits<double>(3001, 29, 600, true, true);
}

}  // namespace test_gemm
