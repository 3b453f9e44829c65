// Tests of ddl/ops/delta_operator.hpp: the spectral facts of docs/spec.md §1 against Eigen's dense solvers,
// the operator API (A*X, X*A, applyOnTheLeft/Right, evalTo), allocation-freedom and shape errors.
//
#include "eigen_guard.hpp"  // first: live allocation checks and throwing eigen_assert

#include <Eigen/Eigenvalues>
#include <Eigen/Householder>
#include <Eigen/LU>
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "catch_compat.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/ops/delta_operator.hpp"

namespace test_delta_operator {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using MatD = ddl::MatX<double>;
using VecD = ddl::VecX<double>;
using RowMajorD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace {

template <class S = double>
ddl::MatX<S> randomMat(ddl::Rng& rng, Index r, Index c) {
  ddl::MatX<S> M(r, c);
  for (Index j = 0; j < c; ++j)
    for (Index i = 0; i < r; ++i) M(i, j) = static_cast<S>(rng.normal());
  return M;
}

// A unit vector whose first entry is not tiny (the Householder comparison divides by it).
template <class S = double>
ddl::VecX<S> randomUnit(ddl::Rng& rng, Index d) {
  for (;;) {
    ddl::VecX<S> k = randomMat<S>(rng, d, 1);
    const S n = k.norm();
    if (n > S(1e-3) && std::abs(k(0)) / n > S(0.05)) return k / n;
  }
}

double relErr(const MatD& a, const MatD& b) {
  const double scale = std::max({a.cwiseAbs().maxCoeff(), b.cwiseAbs().maxCoeff(), 1e-300});
  return (a - b).cwiseAbs().maxCoeff() / scale;
}

// |a - b| <= tol * max(1, |a|, |b|)
bool close(double a, double b, double tol = 1e-12) {
  return std::abs(a - b) <= tol * std::max({1.0, std::abs(a), std::abs(b)});
}

MatD denseOf(const VecD& k, double beta) {
  return MatD::Identity(k.size(), k.size()) - beta * k * k.transpose();
}

// Betas that cover the regimes: identity, contraction, projection, reflection, beyond the gate range.
const std::vector<double> kBetas = {0.0, 0.03, 0.5, 0.97, 1.0, 1.03, 1.5, 1.97, 2.0, -0.7, 2.6};

}  // namespace

TEST_CASE("DeltaOperator eigenvalues match SelfAdjointEigenSolver on the dense matrix", "[delta_operator][spectrum]") {
  const Index d = GENERATE(1, 2, 3, 8, 17);
  const std::uint64_t seed = 1000 + static_cast<std::uint64_t>(d);
  CAPTURE(d, seed);
  ddl::Rng rng(seed);
  for (const double beta : kBetas) {
    CAPTURE(beta);
    const VecD k = randomUnit(rng, d);
    const auto A = ddl::deltaOperator(k, beta);
    const MatD M = A;
    Eigen::SelfAdjointEigenSolver<MatD> es(M);
    REQUIRE(es.info() == Eigen::Success);
    VecD mine = A.eigenvalues();
    std::sort(mine.data(), mine.data() + mine.size());
    CHECK((mine - es.eigenvalues()).cwiseAbs().maxCoeff() < 1e-12);  // solver returns them sorted
    // the documented index: the last entry belongs to k, with eigenvalue 1 - beta
    CHECK(close(A.eigenvalues()(d - 1), 1.0 - beta, 1e-14));
    CHECK(close(A.kEigenvalue(), 1.0 - beta, 1e-14));
    CHECK((M * k - (1.0 - beta) * k).norm() < 1e-13);
    if (d > 1) {  // any vector orthogonal to k is left alone
      VecD u = randomMat(rng, d, 1);
      u -= k * k.dot(u);
      CHECK((M * u - u).norm() < 1e-13 * std::max(1.0, u.norm()));
    }
  }
}

TEST_CASE("det of the lifted operator I_dv (x) A is (1-beta)^dv", "[delta_operator][spectrum]") {
  const Index d = GENERATE(1, 3, 6);
  const Index dv = GENERATE(1, 3, 4);
  const std::uint64_t seed = 2000 + static_cast<std::uint64_t>(10 * d + dv);
  CAPTURE(d, dv, seed);
  ddl::Rng rng(seed);
  for (const double beta : kBetas) {
    CAPTURE(beta);
    const VecD k = randomUnit(rng, d);
    const auto A = ddl::deltaOperator(k, beta);
    const MatD M = A;
    MatD L = MatD::Zero(d * dv, d * dv);  // kron(I_dv, A): acts on vec X column by column
    for (Index j = 0; j < dv; ++j) L.block(j * d, j * d, d, d) = M;
    const double expected = std::pow(1.0 - beta, static_cast<double>(dv));
    CHECK(close(L.determinant(), expected, 1e-12));
    CHECK(close(A.determinantOnState(dv), expected, 1e-12));
    CHECK(close(A.determinant(), M.determinant(), 1e-12));
    // the lifted matrix is what A * X does to vec X
    const MatD X = randomMat(rng, d, dv);
    const MatD Y = A * X;
    const VecD vecX = Eigen::Map<const VecD>(X.data(), X.size());
    const VecD vecY = Eigen::Map<const VecD>(Y.data(), Y.size());
    CHECK((L * vecX - vecY).norm() < 1e-12 * std::max(1.0, vecX.norm()));
  }
}

TEST_CASE("inverse is Sherman-Morrison and a singular operator throws MathError", "[delta_operator][inverse]") {
  const Index d = GENERATE(1, 4, 9);
  const std::uint64_t seed = 3000 + static_cast<std::uint64_t>(d);
  CAPTURE(d, seed);
  ddl::Rng rng(seed);
  for (const double beta : kBetas) {
    if (beta == 1.0) continue;
    CAPTURE(beta);
    const VecD k = randomUnit(rng, d);
    const auto A = ddl::deltaOperator(k, beta);
    const MatD M = A;
    const auto Ainv = A.inverse();
    CHECK(relErr(Ainv.toDense(), M.inverse()) < 1e-10);
    CHECK(close(Ainv.beta(), -beta / (1.0 - beta)));
    CHECK(&Ainv.k() == &k);  // same k, nothing copied
    const MatD X = randomMat(rng, d, 3);
    CHECK(relErr(Ainv * (A * X), X) < 1e-10);
  }
  // beta = 1: the projector onto k-perp has no inverse
  const VecD k = randomUnit(rng, d);
  const std::string msg = ddl_test::thrownMessage<ddl::MathError>([&] { (void)ddl::deltaOperator(k, 1.0).inverse(); });
  CAPTURE(msg);
  CHECK(ddl_test::contains(msg, "DeltaOperator::inverse"));
  CHECK(ddl_test::contains(msg, "beta = 1"));
  CHECK(ddl_test::contains(msg, "rho"));
  CHECK(ddl::deltaOperator(k, 1.0).isSingular());
  CHECK(!ddl::deltaOperator(k, 1.0 - 1e-6).isSingular());
  // a guarded k is singular at beta = 1/rho instead, and invertible at beta = 1
  const VecD kg = 0.8 * k;
  CHECK(ddl_test::thrownMessage<ddl::MathError>([&] { (void)ddl::deltaOperator(kg, 1.0 / 0.64).inverse(); }) !=
        "<no exception>");
  const MatD Mg = ddl::deltaOperator(kg, 1.0).toDense();
  CHECK(relErr(ddl::deltaOperator(kg, 1.0).inverse().toDense(), Mg.inverse()) < 1e-10);
}

TEST_CASE("A is orthogonal exactly at beta 0 and 2 and beta = 2 is Eigen's Householder reflection",
          "[delta_operator][orthogonal]") {
  const Index d = GENERATE(1, 2, 5, 12);
  const Index dv = GENERATE(1, 3, 4);
  const std::uint64_t seed = 4000 + static_cast<std::uint64_t>(10 * d + dv);
  CAPTURE(d, dv, seed);
  ddl::Rng rng(seed);
  const VecD k = randomUnit(rng, d);
  for (int i = 0; i <= 16; ++i) {
    const double beta = 0.125 * i;
    CAPTURE(beta);
    const auto A = ddl::deltaOperator(k, beta);
    const MatD M = A;
    const bool denseOrthogonal = (M.transpose() * M - MatD::Identity(d, d)).cwiseAbs().maxCoeff() < 1e-12;
    const bool expected = (i == 0 || i == 16);
    CHECK(A.isOrthogonal() == expected);
    CHECK(denseOrthogonal == expected);
  }
  // beta = 2 against applyHouseholderOnTheLeft(essential = k.tail(d-1)/k0, tau = 2 k0^2)
  const MatD X = randomMat(rng, d, dv);
  MatD H = X;
  const VecD essential = k.tail(d - 1) / k(0);
  VecD ws(dv);
  H.applyHouseholderOnTheLeft(essential, 2.0 * k(0) * k(0), ws.data());
  const auto R = ddl::deltaOperator(k, 2.0);
  CHECK(relErr(R * X, H) < 1e-12);
  MatD twice = X;
  twice.applyOnTheLeft(R);
  twice.applyOnTheLeft(R);
  CHECK(relErr(twice, X) < 1e-12);
  CHECK(R.regime() == ddl::DeltaRegime::Reflection);
}

TEST_CASE("rank-1 write gives e_post = (1-beta) e_pre and an exact overwrite at beta = 1", "[delta_operator][write]") {
  const Index d = GENERATE(1, 3, 10);
  const Index dv = GENERATE(1, 3, 4);
  const std::uint64_t seed = 5000 + static_cast<std::uint64_t>(10 * d + dv);
  CAPTURE(d, dv, seed);
  ddl::Rng rng(seed);
  for (const double beta : kBetas) {
    CAPTURE(beta);
    const VecD k = randomUnit(rng, d);
    const VecD v = randomMat(rng, dv, 1);
    const MatD X = randomMat(rng, d, dv);
    MatD Xw = X;
    ddl::deltaWriteToken(k, beta, v, Xw);
    // the write is A X + beta k v^T
    const MatD ref = denseOf(k, beta) * X + beta * k * v.transpose();
    CHECK(relErr(Xw, ref) < 1e-12);
    const ddl::RowX<double> ePre = k.transpose() * X - v.transpose();
    const ddl::RowX<double> ePost = k.transpose() * Xw - v.transpose();
    CHECK((ePost - (1.0 - beta) * ePre).cwiseAbs().maxCoeff() < 1e-12 * std::max(1.0, ePre.cwiseAbs().maxCoeff()));
    if (beta == 1.0) {
      const VecD readout = Xw.transpose() * k;  // p = X'^T k
      CHECK((readout - v).cwiseAbs().maxCoeff() < 1e-13 * std::max(1.0, v.cwiseAbs().maxCoeff()));
    }
  }
  // exactly representable unit k (rho == 1 in floating point) and small-integer data: every step is
  // exact, so the overwrite is exact to the bit
  if (d == 3) {
    const VecD k = VecD::Constant(4, 0.5);
    VecD v(dv);
    ddl::RowX<double> c(dv);
    for (Index j = 0; j < dv; ++j) {
      v(j) = 2.0 * double(j) + 1.0;
      c(j) = double(j) - 3.0;
    }
    MatD X = k * c;
    ddl::deltaWriteToken(k, 1.0, v, X);
    CHECK((X.transpose() * k - v).cwiseAbs().maxCoeff() == 0.0);
  }
}

TEST_CASE("guarded k (rho < 1) reports 1 - beta rho and not 1 - beta", "[delta_operator][guarded]") {
  const Index d = GENERATE(1, 5);
  const Index dv = GENERATE(1, 3);
  const std::uint64_t seed = 6000 + static_cast<std::uint64_t>(10 * d + dv);
  CAPTURE(d, dv, seed);
  ddl::Rng rng(seed);
  const double scale = 0.9;  // as a guard k~/sqrt(|k~|^2 + eps^2) would give for small k~
  const VecD k = scale * randomUnit(rng, d);
  const double rho = scale * scale;
  for (const double beta : {0.5, 1.0, 2.0}) {
    CAPTURE(beta);
    const auto A = ddl::deltaOperator(k, beta);
    CHECK(close(A.rho(), rho));
    CHECK(close(A.kEigenvalue(), 1.0 - beta * rho));
    CHECK(close(A.determinant(), 1.0 - beta * rho));
    CHECK(close(A.determinantOnState(dv), std::pow(1.0 - beta * rho, double(dv))));
    Eigen::SelfAdjointEigenSolver<MatD> es(A.toDense());
    CHECK(close(es.eigenvalues().minCoeff(), std::min(1.0, 1.0 - beta * rho)));
    CHECK(!A.isOrthogonal());  // 1 - 2*0.81 = -0.62: no longer a reflection
    const VecD v = randomMat(rng, dv, 1);
    const MatD X = randomMat(rng, d, dv);
    MatD Xw = X;
    ddl::deltaWriteToken(k, beta, v, Xw);
    const ddl::RowX<double> ePre = k.transpose() * X - v.transpose();
    const ddl::RowX<double> ePost = k.transpose() * Xw - v.transpose();
    CHECK((ePost - (1.0 - beta * rho) * ePre).cwiseAbs().maxCoeff() < 1e-12 * std::max(1.0, ePre.cwiseAbs().maxCoeff()));
  }
  CHECK(ddl::deltaOperator(k, 2.0 / rho).isOrthogonal(1e-12));  // the reflection moved to beta = 2/rho
}

TEST_CASE("evalTo and A X and X A and applyOnTheLeft/Right agree with the dense product", "[delta_operator][apply]") {
  const Index d = GENERATE(1, 2, 7, 33);
  const Index n = GENERATE(1, 3, 4);
  const std::uint64_t seed = 7000 + static_cast<std::uint64_t>(10 * d + n);
  CAPTURE(d, n, seed);
  ddl::Rng rng(seed);
  const VecD k = randomUnit(rng, d);
  const double beta = 2.0 * rng.uniform();
  CAPTURE(beta);
  const auto A = ddl::deltaOperator(k, beta);
  const MatD M = A;
  CHECK(relErr(M, denseOf(k, beta)) < 1e-15);
  CHECK(relErr(A.toDense(), M) == 0.0);
  const MatD T = A.transpose();
  CHECK(relErr(T, M) == 0.0);

  const MatD X = randomMat(rng, d, n);   // A X
  const MatD Z = randomMat(rng, n, d);   // Z A
  CHECK(relErr(A * X, M * X) < 1e-13);
  CHECK(relErr(Z * A, Z * M) < 1e-13);
  MatD Xl = X;
  Xl.applyOnTheLeft(A);
  CHECK(relErr(Xl, M * X) < 1e-13);
  MatD Zr = Z;
  Zr.applyOnTheRight(A);
  CHECK(relErr(Zr, Z * M) < 1e-13);
  MatD Zs = Z;
  Zs *= A;
  CHECK(relErr(Zs, Z * M) < 1e-13);
  // row-major storage takes the other kernel
  RowMajorD Xrm = X;
  Xrm.applyOnTheLeft(A);
  CHECK(relErr(MatD(Xrm), M * X) < 1e-13);
  RowMajorD Zrm = Z;
  Zrm.applyOnTheRight(A);
  CHECK(relErr(MatD(Zrm), Z * M) < 1e-13);
  // blocks of a larger state (one token's channels inside a batch) and k taken as a column of K
  MatD big = randomMat(rng, d, 3 * n);
  const MatD bigRef = big;
  big.middleCols(n, n).applyOnTheLeft(A);
  CHECK(relErr(big.middleCols(n, n), M * bigRef.middleCols(n, n)) < 1e-13);
  CHECK(relErr(big.leftCols(n), bigRef.leftCols(n)) == 0.0);
  const MatD K = randomMat(rng, d, 2);
  const auto Acol = ddl::deltaOperator(K.col(1), beta);
  CHECK(relErr(Acol * X, denseOf(K.col(1), beta) * X) < 1e-13);
  // float works as well
  const ddl::VecX<float> kf = k.cast<float>();
  const ddl::MatX<float> Xf = X.cast<float>();
  const ddl::MatX<float> Yf = ddl::deltaOperator(kf, static_cast<float>(beta)) * Xf;
  CHECK(relErr(Yf.cast<double>(), M * X) < 1e-5);
}

TEST_CASE("workspace overloads and the in-place verbs allocate nothing", "[delta_operator][alloc]") {
  const Index d = 64, n = 4;
  ddl::Rng rng(8000);
  const VecD k = randomUnit(rng, d);
  const auto A = ddl::deltaOperator(k, 0.7);
  const MatD M = A;
  const MatD X = randomMat(rng, d, n), Z = randomMat(rng, n, d);
  const VecD v = randomMat(rng, n, 1);
  MatD Xl = X, Xw = X, Xt = X, Zr = Z;
  RowMajorD Xrm = X;
  ddl::RowX<double> wsLeft(n), wsRm(n);
  VecD wsRight(n);
  Eigen::internal::set_is_malloc_allowed(false);
  A.applyThisOnTheLeft(Xl, wsLeft);
  A.applyThisOnTheRight(Zr, wsRight);
  A.applyThisOnTheLeft(Xrm, wsRm);
  Xw.applyOnTheLeft(A);
  ddl::deltaWriteToken(k, 0.7, v, Xt);
  Eigen::internal::set_is_malloc_allowed(true);
  CHECK(relErr(Xl, M * X) < 1e-13);
  CHECK(relErr(Xw, M * X) < 1e-13);
  CHECK(relErr(MatD(Xrm), M * X) < 1e-13);
  CHECK(relErr(Zr, Z * M) < 1e-13);
  CHECK(relErr(Xt, M * X + 0.7 * k * v.transpose()) < 1e-13);
  CHECK(relErr(wsLeft, k.transpose() * X) < 1e-13);  // the workspace holds the readouts
  CHECK(relErr(wsRm, k.transpose() * X) < 1e-13);
  CHECK(relErr(wsRight, Z * k) < 1e-13);
  // the check is live: an allocation under the ban is reported
  Eigen::internal::set_is_malloc_allowed(false);
  bool caught = false;
  try {
    MatD tmp = A * X;
    (void)tmp;
  } catch (const ddl_test::EigenAssertFailure&) {
    caught = true;
  }
  Eigen::internal::set_is_malloc_allowed(true);
  CHECK(caught);
}

TEST_CASE("shape errors name the function and both shapes", "[delta_operator][errors]") {
  ddl::Rng rng(9000);
  const VecD k = randomUnit(rng, 5);
  const auto A = ddl::deltaOperator(k, 0.5);
  MatD X = randomMat(rng, 4, 3);
  auto expectShapeError = [](const std::string& msg, const char* fn, const char* s1, const char* s2) {
    CAPTURE(msg);
    CHECK(ddl_test::contains(msg, fn));
    CHECK(ddl_test::contains(msg, s1));
    CHECK(ddl_test::contains(msg, s2));
  };
  expectShapeError(ddl_test::thrownMessage<ddl::ShapeError>([&] { (void)(A * X); }), "DeltaOperator::operator*",
                   "(5, 5)", "(4, 3)");
  expectShapeError(ddl_test::thrownMessage<ddl::ShapeError>([&] { X.applyOnTheLeft(A); }),
                   "DeltaOperator::applyThisOnTheLeft", "(5, 5)", "(4, 3)");
  ddl::RowX<double> ws(3);
  expectShapeError(ddl_test::thrownMessage<ddl::ShapeError>([&] { A.applyThisOnTheLeft(X, ws); }),
                   "DeltaOperator::applyThisOnTheLeft", "(5, 5)", "(4, 3)");
  MatD Z = randomMat(rng, 3, 4);
  expectShapeError(ddl_test::thrownMessage<ddl::ShapeError>([&] { (void)(Z * A); }), "DeltaOperator::operator*",
                   "(5, 5)", "(3, 4)");
  expectShapeError(ddl_test::thrownMessage<ddl::ShapeError>([&] { Z.applyOnTheRight(A); }),
                   "DeltaOperator::applyThisOnTheRight", "(5, 5)", "(3, 4)");
  expectShapeError(ddl_test::thrownMessage<ddl::ShapeError>([&] { Z *= A; }), "DeltaOperator::applyThisOnTheRight",
                   "(5, 5)", "(3, 4)");
  VecD v(2);
  MatD Xok = randomMat(rng, 5, 3);
  expectShapeError(ddl_test::thrownMessage<ddl::ShapeError>([&] { ddl::deltaWriteToken(k, 0.5, v, Xok); }),
                   "ddl::deltaWriteToken", "(5, 3)", "(2, 1)");
  expectShapeError(ddl_test::thrownMessage<ddl::ShapeError>([&] { ddl::deltaWriteToken(k, 0.5, VecD(3), X); }),
                   "ddl::deltaWriteToken", "(4, 3)", "(5, 1)");
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([&] { (void)A.determinantOnState(-1); }),
                           "DeltaOperator::determinantOnState"));
}

TEST_CASE("regime bands and condition number", "[delta_operator][regime]") {
  ddl::Rng rng(10000);
  const VecD k = randomUnit(rng, 6);
  using R = ddl::DeltaRegime;
  const std::vector<std::pair<double, R>> cases = {
      {0.0, R::Identity},           {0.09, R::Identity},     {0.1, R::Contraction}, {0.5, R::Contraction},
      {0.95, R::Projection},        {1.0, R::Projection},    {1.05, R::Projection}, {1.5, R::PartialReflection},
      {1.95, R::Reflection},        {2.0, R::Reflection},    {2.5, R::Expansion},   {-0.5, R::Expansion}};
  for (const auto& c : cases) {
    CAPTURE(c.first, ddl::regimeName(c.second));
    // unit k: b = beta (up to rounding of rho, which is why no case sits exactly on a band edge
    // except 0.1, which is unambiguous: the Identity band is open)
    CHECK(ddl::classifyRegime(c.first) == c.second);
    if (std::abs(c.first - 0.1) > 1e-9) CHECK(ddl::deltaOperator(k, c.first).regime() == c.second);
  }
  // guarded k: the effective gate beta*rho decides (rho = 0.5, beta = 2 -> projection-like)
  const VecD kg = std::sqrt(0.5) * k;
  CHECK(ddl::deltaOperator(kg, 2.0).regime() == R::Projection);
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([] { (void)ddl::classifyRegime(std::nan("")); }),
                           "ddl::classifyRegime"));

  for (const double beta : kBetas) {
    CAPTURE(beta);
    const auto A = ddl::deltaOperator(k, beta);
    if (beta == 1.0) {
      CHECK(std::isinf(A.conditionNumber()));
      continue;
    }
    Eigen::SelfAdjointEigenSolver<MatD> es(A.toDense());
    const VecD a = es.eigenvalues().cwiseAbs();
    CHECK(close(A.conditionNumber(), a.maxCoeff() / a.minCoeff(), 1e-10));
  }
  const VecD k1 = VecD::Constant(1, 1.0);
  CHECK(ddl::deltaOperator(k1, 0.5).conditionNumber() == 1.0);
}

TEST_CASE("regime bands inside the gate's range are docs/spec.md §6's thresholds on beta*rho", "[delta_operator][regime]") {
  // One taxonomy for the operator and the audit: on b in [0, 2] the named bands are identity-like
  // b < 0.1, projection-like |b - 1| < 0.1 and reflection-like b > 1.9; the rest splits by the side of 1.
  using R = ddl::DeltaRegime;
  for (int i = 0; i <= 2000; ++i) {
    const double b = 0.001 * i + 0.0004;  // off the band edges
    if (b > 2) break;
    CAPTURE(b);
    const R expected = b < 0.1                 ? R::Identity
                       : std::abs(b - 1) < 0.1 ? R::Projection
                       : b > 1.9               ? R::Reflection
                       : b < 1                 ? R::Contraction
                                               : R::PartialReflection;
    CHECK(ddl::classifyRegime(b) == expected);
  }
  CHECK(ddl::kDeltaRegimeCount == static_cast<int>(R::Expansion) + 1);
}

}  // namespace test_delta_operator
