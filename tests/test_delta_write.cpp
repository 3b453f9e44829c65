// Batched Delta kernels (ops/delta_write.hpp): forward against a naive dense reference, backward
// against central differences in double, edge cases, in-place use, shape errors, no allocation.
#include "eigen_guard.hpp"  // first: live allocation checks even with NDEBUG
#include <cstdint>
#include <random>

#include "catch_compat.hpp"
#include "fd_check.hpp"
#include "ddl/ops/delta_write.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_delta_write {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl::RowX;
using ddl::testing::numericGrad;
using ddl::testing::relErr;

namespace {

struct Case {
  Index d, N, dv;
  MatX<double> K, V, X, W;  // W: the loss weights, L = <W, Y>
  RowX<double> beta;
};

// Random operands from std::mt19937(seed); beta drawn near 0, 1, 2 or anywhere in (0, 2) depending on
// `regime`; K unit or guarded.
Case makeCase(std::uint32_t seed, int regime) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dd(1, 9), nn(1, 5), vv(0, 2);
  const Index dvs[] = {1, 3, 4};
  Case c{dd(rng), nn(rng), dvs[vv(rng)], {}, {}, {}, {}, {}};
  std::srand(static_cast<unsigned>(rng()));
  c.K = MatX<double>::Random(c.d, c.N);
  for (Index n = 0; n < c.N; ++n) c.K.col(n) *= 0.95 / c.K.col(n).norm();  // rho < 1: the guarded case
  c.V = MatX<double>::Random(c.dv, c.N);
  c.X = MatX<double>::Random(c.d, c.dv * c.N);
  c.W = MatX<double>::Random(c.d, c.dv * c.N);
  // Near 0 means 1e-2: below that, dK and dV (which scale with beta) drown in the rounding of <W, Y>.
  const double centers[] = {1e-2, 1.0, 2.0 - 1e-4};
  c.beta = RowX<double>(1, c.N);
  for (Index n = 0; n < c.N; ++n)
    c.beta(0, n) = regime < 3 ? centers[regime] + 1e-5 * (n % 3) : std::uniform_real_distribution<double>(0.01, 1.99)(rng);
  return c;
}

// Y for token n, channel j by the dense formula A x + beta k v^T (write) or A x (apply).
MatX<double> denseReference(const Case& c, bool write) {
  MatX<double> Y(c.d, c.dv * c.N);
  for (Index n = 0; n < c.N; ++n) {
    const MatX<double> A = MatX<double>::Identity(c.d, c.d) - c.beta(0, n) * c.K.col(n) * c.K.col(n).transpose();
    for (Index j = 0; j < c.dv; ++j) {
      Y.col(j * c.N + n) = A * c.X.col(j * c.N + n);
      if (write) Y.col(j * c.N + n) += c.beta(0, n) * c.V(j, n) * c.K.col(n);
    }
  }
  return Y;
}

}  // namespace

TEST_CASE("deltaApply and deltaWrite match the dense per-token formulas", "[ops][delta_write]") {
  const auto seed = GENERATE(take(8, random(1u, 1000000u)));
  const int regime = static_cast<int>(seed % 4);
  Case c = makeCase(seed, regime);
  CAPTURE(seed, c.d, c.N, c.dv, regime);
  MatX<double> Y, Delta;
  ddl::deltaApply(c.K, c.beta, c.X, Y);
  CHECK(relErr(Y, denseReference(c, false)) < 1e-14);
  ddl::deltaWrite(c.K, c.beta, c.V, c.X, Y, Delta);
  CHECK(relErr(Y, denseReference(c, true)) < 1e-14);
  for (Index j = 0; j < c.dv; ++j)  // Delta is v - X^T k per channel
    CHECK(relErr(Delta.row(j), c.V.row(j) - (c.K.array() * c.X.middleCols(j * c.N, c.N).array()).colwise().sum().matrix()) < 1e-14);
  ddl::writeOnly(c.K, c.beta, c.V, c.X, Y);
  MatX<double> expected = c.X;
  for (Index n = 0; n < c.N; ++n)
    for (Index j = 0; j < c.dv; ++j) expected.col(j * c.N + n) += c.beta(0, n) * c.V(j, n) * c.K.col(n);
  CHECK(relErr(Y, expected) < 1e-14);
}

TEST_CASE("the write erases the old readout: e_post = (1 - beta rho) e_pre and exact overwrite at beta = 1",
          "[ops][delta_write]") {
  Case c = makeCase(7, 3);
  for (Index n = 0; n < c.N; ++n) c.K.col(n).normalize();  // unit k: rho = 1
  c.beta(0, 0) = 1.0;
  MatX<double> Y, Delta;
  ddl::deltaWrite(c.K, c.beta, c.V, c.X, Y, Delta);
  for (Index n = 0; n < c.N; ++n)
    for (Index j = 0; j < c.dv; ++j) {
      const double ePre = c.K.col(n).dot(c.X.col(j * c.N + n)) - c.V(j, n);
      const double ePost = c.K.col(n).dot(Y.col(j * c.N + n)) - c.V(j, n);
      CHECK(ePost == Approx((1 - c.beta(0, n)) * ePre).margin(1e-13));
    }
  for (Index j = 0; j < c.dv; ++j) CHECK(c.K.col(0).dot(Y.col(j * c.N)) == Approx(c.V(j, 0)).margin(1e-14));
}

TEST_CASE("delta kernels work in place (Y is X) and backward with dX aliasing G", "[ops][delta_write]") {
  Case c = makeCase(11, 3);
  MatX<double> Y, Delta, Z = c.X;
  ddl::deltaWrite(c.K, c.beta, c.V, c.X, Y, Delta);
  ddl::deltaWrite(c.K, c.beta, c.V, Z, Z, Delta);
  CHECK(Z == Y);
  MatX<double> dX, dK, dV, G = c.W;
  RowX<double> dBeta;
  ddl::deltaWriteBackward(c.K, c.beta, c.X, Delta, c.W, dX, dK, dBeta, dV);
  MatX<double> dK2, dV2;
  RowX<double> dBeta2;
  ddl::deltaWriteBackward(c.K, c.beta, c.X, Delta, G, G, dK2, dBeta2, dV2);
  CHECK(G == dX);
  CHECK(dK2 == dK);
}

TEST_CASE("batched backward passes match central differences", "[ops][delta_write][grad]") {
  const auto seed = GENERATE(take(24, random(1u, 1000000u)));
  const int regime = static_cast<int>(seed % 4);
  Case c = makeCase(seed, regime);
  CAPTURE(seed, c.d, c.N, c.dv, regime);
  MatX<double> Y, Delta, dX, dK, dV, dH;
  RowX<double> dBeta;

  SECTION("rank-1 write") {
    auto loss = [&] { MatX<double> Yl, Dl; ddl::deltaWrite(c.K, c.beta, c.V, c.X, Yl, Dl); return (c.W.array() * Yl.array()).sum(); };
    ddl::deltaWrite(c.K, c.beta, c.V, c.X, Y, Delta);
    ddl::deltaWriteBackward(c.K, c.beta, c.X, Delta, c.W, dX, dK, dBeta, dV);
    FD_CHECK(dX, numericGrad(c.X, loss));
    FD_CHECK(dK, numericGrad(c.K, loss));
    FD_CHECK(dBeta, numericGrad(c.beta, loss));
    FD_CHECK(dV, numericGrad(c.V, loss));
  }
  SECTION("Delta Operator apply") {
    auto loss = [&] { MatX<double> Yl; ddl::deltaApply(c.K, c.beta, c.X, Yl); return (c.W.array() * Yl.array()).sum(); };
    ddl::deltaApplyBackward(c.K, c.beta, c.X, c.W, dX, dK, dBeta);
    FD_CHECK(dX, numericGrad(c.X, loss));
    FD_CHECK(dK, numericGrad(c.K, loss));
    FD_CHECK(dBeta, numericGrad(c.beta, loss));
  }
  SECTION("write-only control") {
    auto loss = [&] { MatX<double> Yl; ddl::writeOnly(c.K, c.beta, c.V, c.X, Yl); return (c.W.array() * Yl.array()).sum(); };
    ddl::writeOnlyBackward(c.K, c.beta, c.V, c.W, dX, dK, dBeta, dV);
    FD_CHECK(dX, numericGrad(c.X, loss));
    FD_CHECK(dK, numericGrad(c.K, loss));
    FD_CHECK(dBeta, numericGrad(c.beta, loss));
    FD_CHECK(dV, numericGrad(c.V, loss));
  }
  SECTION("additive baseline, broadcast branch output") {
    MatX<double> H = MatX<double>::Random(c.d, c.N);
    auto loss = [&] { MatX<double> Yl; ddl::additiveResidual(H, c.X, Yl); return (c.W.array() * Yl.array()).sum(); };
    ddl::additiveResidualBackward(c.W, c.N, dX, dH);
    FD_CHECK(dX, numericGrad(c.X, loss));
    FD_CHECK(dH, numericGrad(H, loss));
  }
}

TEST_CASE("delta kernels reject mismatched shapes with a message naming function and shapes", "[ops][errors]") {
  MatX<double> K = MatX<double>::Random(4, 3), V = MatX<double>::Random(2, 3), X = MatX<double>::Random(4, 5), Y, D;
  RowX<double> beta = RowX<double>::Constant(1, 3, 1.0);
  std::string msg = ddl_test::thrownMessage<ddl::ShapeError>([&] { ddl::deltaWrite(K, beta, V, X, Y, D); });
  CHECK(ddl_test::contains(msg, "ddl::deltaWrite"));
  CHECK(ddl_test::contains(msg, "(4, 5)"));
  CHECK(ddl_test::contains(msg, "(4, 3)"));
  X = MatX<double>::Random(4, 6);
  V = MatX<double>::Random(3, 3);
  msg = ddl_test::thrownMessage<ddl::ShapeError>([&] { ddl::deltaWrite(K, beta, V, X, Y, D); });
  CHECK(ddl_test::contains(msg, "V has shape (3, 3), expected (2, 3)"));
  RowX<double> shortBeta = RowX<double>::Constant(1, 2, 1.0);
  msg = ddl_test::thrownMessage<ddl::ShapeError>([&] { ddl::deltaApply(K, shortBeta, X, Y); });
  CHECK(ddl_test::contains(msg, "ddl::deltaApply: beta has shape (1, 2), expected (1, 3)"));
  MatX<double> H = MatX<double>::Random(3, 3);
  msg = ddl_test::thrownMessage<ddl::ShapeError>([&] { ddl::additiveResidual(H, X, Y); });
  CHECK(ddl_test::contains(msg, "ddl::additiveResidual: H has shape (3, 3)"));
}

TEST_CASE("steady-state kernels allocate nothing", "[ops][alloc]") {
  Case c = makeCase(3, 3);
  MatX<double> Y, Delta, dX, dK, dV;
  RowX<double> dBeta;
  ddl::deltaWrite(c.K, c.beta, c.V, c.X, Y, Delta);  // first call sizes the outputs
  ddl::deltaWriteBackward(c.K, c.beta, c.X, Delta, c.W, dX, dK, dBeta, dV);
  Eigen::internal::set_is_malloc_allowed(false);
  ddl::deltaWrite(c.K, c.beta, c.V, c.X, Y, Delta);
  ddl::deltaWriteBackward(c.K, c.beta, c.X, Delta, c.W, dX, dK, dBeta, dV);
  ddl::deltaApply(c.K, c.beta, c.X, Y);
  ddl::deltaApplyBackward(c.K, c.beta, c.X, c.W, dX, dK, dBeta);
  ddl::writeOnly(c.K, c.beta, c.V, c.X, Y);
  Eigen::internal::set_is_malloc_allowed(true);
  SUCCEED("no Eigen allocation in steady state");
}

TEST_CASE("the allocation guard trips on an allocation in this binary", "[ops][alloc]") {
  // Proves the no-allocation test above can fail: an allocation under the guard must throw.
  Eigen::internal::set_is_malloc_allowed(false);
  bool tripped = false;
  try {
    MatX<double> m(64, 64);
    m.setZero();
  } catch (const ddl_test::EigenAssertFailure&) {
    tripped = true;
  }
  Eigen::internal::set_is_malloc_allowed(true);
  CHECK(tripped);
}

}  // namespace test_delta_write
