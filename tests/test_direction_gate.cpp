// Direction normalization and the gate (ops/direction.hpp, ops/gate.hpp): values, central-difference
// checks in double including |k~| near eps, stable sigmoid at extreme logits, bias from beta0, errors.
#include <cmath>
#include <limits>
#include <random>

#include "catch_compat.hpp"
#include "fd_check.hpp"
#include "ddl/ops/direction.hpp"
#include "ddl/ops/gate.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_direction_gate {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::DirectionNorm;
using ddl::Index;
using ddl::MatX;
using ddl::RowX;
using ddl::testing::numericGrad;
using ddl::testing::relErr;

TEST_CASE("normalized directions have the documented length", "[ops][direction]") {
  MatX<double> Kt(3, 3), K;
  Kt << 3, 0, 1e-5,  //
      4, 0, 0,       //
      0, 0, 0;
  RowX<double> norm;
  ddl::normalizeDirections(Kt, DirectionNorm::SqrtEps, 1e-5, K, norm);
  CHECK(K.col(0).norm() == Approx(5.0 / std::sqrt(25.0 + 1e-10)).epsilon(1e-15));
  CHECK(K.col(1).norm() == 0.0);  // zero direction stays zero: A = I, no NaN
  CHECK(K.col(2).squaredNorm() == Approx(0.5).epsilon(1e-12));  // |k~| = eps: rho = 1/2
  ddl::normalizeDirections(Kt, DirectionNorm::AddEps, 1e-5, K, norm);
  CHECK(K.col(0).norm() == Approx(5.0 / (5.0 + 1e-5)).epsilon(1e-15));
  CHECK(K.col(2).norm() == Approx(0.5).epsilon(1e-12));
  CHECK(K.col(1).norm() == 0.0);
}

TEST_CASE("direction normalization backward matches central differences", "[ops][direction][grad]") {
  const auto seed = GENERATE(take(10, random(1u, 1000000u)));
  std::mt19937 rng(seed);
  std::srand(seed);
  const Index d = std::uniform_int_distribution<int>(1, 9)(rng), N = std::uniform_int_distribution<int>(1, 5)(rng);
  const auto kind = seed % 2 ? DirectionNorm::SqrtEps : DirectionNorm::AddEps;
  const bool tiny = seed % 3 == 0;  // |k~| within a few eps: the guard dominates
  const double eps = 1e-5;
  CAPTURE(seed, d, N, ddl::toString(kind), tiny);
  MatX<double> Kt = MatX<double>::Random(d, N), W = MatX<double>::Random(d, N), K, dKt;
  if (tiny)
    for (Index n = 0; n < N; ++n) Kt.col(n) *= (0.5 + 2.5 * double(n) / N) * eps / Kt.col(n).norm();
  RowX<double> norm;
  auto loss = [&] { MatX<double> Kl; RowX<double> nl; ddl::normalizeDirections(Kt, kind, eps, Kl, nl); return (W.array() * Kl.array()).sum(); };
  ddl::normalizeDirections(Kt, kind, eps, K, norm);
  ddl::normalizeDirectionsBackward(K, norm, kind, eps, W, dKt);
  // The step must be small against |k~|: 1e-6 for O(1) directions, 1e-11 near eps.
  FD_CHECK(dKt, numericGrad(Kt, loss, tiny ? 1e-11 : 1e-6));
}

TEST_CASE("direction normalization validates eps and refuses 0/0", "[ops][direction][errors]") {
  MatX<double> Kt = MatX<double>::Zero(2, 2), K;
  RowX<double> norm;
  std::string msg = ddl_test::thrownMessage<ddl::ValueError>(
      [&] { ddl::normalizeDirections(Kt, DirectionNorm::SqrtEps, -1.0, K, norm); });
  CHECK(ddl_test::contains(msg, "ddl::normalizeDirections: eps must be finite and >= 0, got -1"));
  msg = ddl_test::thrownMessage<ddl::MathError>([&] { ddl::normalizeDirections(Kt, DirectionNorm::AddEps, 0.0, K, norm); });
  CHECK(ddl_test::contains(msg, "direction of token 0 has norm 0 and eps = 0"));
  // A NaN or Inf direction is named as such, not as a zero norm (it used to read "has norm 0").
  Kt << 1, 2, std::numeric_limits<double>::quiet_NaN(), 3;
  for (auto kind : {DirectionNorm::SqrtEps, DirectionNorm::AddEps}) {
    msg = ddl_test::thrownMessage<ddl::MathError>([&] { ddl::normalizeDirections(Kt, kind, 1e-5, K, norm); });
    CHECK(ddl_test::contains(msg, "direction of token 0 is not finite: entry 1 of 2 is nan"));
  }
  Kt(1, 0) = 2;
  Kt(1, 1) = -std::numeric_limits<double>::infinity();
  msg = ddl_test::thrownMessage<ddl::MathError>([&] { ddl::normalizeDirections(Kt, DirectionNorm::SqrtEps, 0.0, K, norm); });
  CHECK(ddl_test::contains(msg, "direction of token 1 is not finite: entry 1 of 2 is -inf"));
  msg = ddl_test::thrownMessage<ddl::ValueError>([] { ddl::parseDirectionNorm("l2"); });
  CHECK(ddl_test::contains(msg, "unknown normalization 'l2'"));
  CHECK(ddl::parseDirectionNorm("add_eps") == DirectionNorm::AddEps);
}

TEST_CASE("a finite direction whose squared norm overflows float still normalizes to a unit vector",
          "[ops][direction]") {
  MatX<float> Kt(3, 2), K, dKt;
  Kt << 3e20f, 1.0f, -4e20f, 2.0f, 0.0f, 2.0f;  // |k~|^2 = 2.5e41 overflows float; |k~| = 5e20 does not
  RowX<float> norm;
  for (auto kind : {DirectionNorm::SqrtEps, DirectionNorm::AddEps}) {
    CAPTURE(ddl::toString(kind));
    ddl::normalizeDirections(Kt, kind, 1e-5f, K, norm);
    REQUIRE(K.allFinite());
    CHECK(norm(0, 0) == Approx(5e20).epsilon(1e-6));
    CHECK(K(0, 0) == Approx(0.6).epsilon(1e-6));
    CHECK(K(1, 0) == Approx(-0.8).epsilon(1e-6));
    CHECK(K.col(1).norm() == Approx(1.0).epsilon(1e-5));
    MatX<float> dK = MatX<float>::Ones(3, 2);
    ddl::normalizeDirectionsBackward(K, norm, kind, 1e-5f, dK, dKt);
    CHECK(dKt.allFinite());
  }
}

TEST_CASE("gate beta = 2 sigma(z) is stable and its bias reproduces beta0", "[ops][gate]") {
  MatX<double> z(1, 5);
  z << -800, -30, 0, 30, 800;
  RowX<double> beta;
  ddl::gateFromLogits(z, beta);
  CHECK(beta.allFinite());
  CHECK(beta(0, 0) == 0.0);
  CHECK(beta(0, 1) == Approx(2 * std::exp(-30.0)).epsilon(1e-12));
  CHECK(beta(0, 2) == 1.0);
  CHECK(beta(0, 4) == 2.0);
  for (double beta0 : {0.1, 0.5, 1.0, 1.5, 1.9}) {
    MatX<double> b = MatX<double>::Constant(1, 1, ddl::gateBiasFromBeta0(beta0));
    ddl::gateFromLogits(b, beta);
    CHECK(beta(0, 0) == Approx(beta0).epsilon(1e-12));
  }
  CHECK(ddl::gateBiasFromBeta0(1.0) == 0.0);
  CHECK(std::isfinite(ddl::gateBiasFromBeta0(0.0)));
  CHECK(ddl::gateBiasFromBeta0(0.0) == Approx(std::log(1e-6 / (1 - 1e-6))));
  CHECK(ddl::gateBiasFromBeta0(5.0) == ddl::gateBiasFromBeta0(2.0));  // clamped as docs/spec.md §2 says
  std::string msg = ddl_test::thrownMessage<ddl::ValueError>(
      [] { ddl::gateBiasFromBeta0(std::numeric_limits<double>::quiet_NaN()); });
  CHECK(ddl_test::contains(msg, "ddl::gateBiasFromBeta0"));
}

TEST_CASE("gate heads backward match central differences", "[ops][gate][grad]") {
  const auto seed = GENERATE(take(8, random(1u, 1000000u)));
  std::mt19937 rng(seed);
  std::srand(seed);
  const Index d = std::uniform_int_distribution<int>(1, 8)(rng), N = std::uniform_int_distribution<int>(1, 5)(rng);
  const Index h = std::uniform_int_distribution<int>(1, 6)(rng);
  CAPTURE(seed, d, N, h);
  MatX<double> C = MatX<double>::Random(d, N), w = MatX<double>::Random(1, d), b = MatX<double>::Random(1, 1);
  MatX<double> W1 = MatX<double>::Random(h, d), w2 = MatX<double>::Random(1, h);
  RowX<double> Wl = RowX<double>::Random(1, N);  // L = <Wl, beta>
  MatX<double> dC, dw = MatX<double>::Zero(1, d), db = MatX<double>::Zero(1, 1);
  MatX<double> dW1 = MatX<double>::Zero(h, d), dw2 = MatX<double>::Zero(1, h), Hid, dPre;
  RowX<double> Z, beta, dZ;

  SECTION("linear gate: beta = 2 sigma(w c + b)") {
    auto loss = [&] {
      RowX<double> zl, bl;
      ddl::linearGateLogits(w, b(0, 0), C, zl);
      ddl::gateFromLogits(zl, bl);
      return (Wl.array() * bl.array()).sum();
    };
    ddl::linearGateLogits(w, b(0, 0), C, Z);
    ddl::gateFromLogits(Z, beta);
    ddl::gateFromLogitsBackward(Z, Wl, dZ);
    ddl::linearGateLogitsBackward(w, C, dZ, dC, dw, db);
    FD_CHECK(dC, numericGrad(C, loss));
    FD_CHECK(dw, numericGrad(w, loss));
    FD_CHECK(db, numericGrad(b, loss));
    ddl::linearGateLogitsBackward(w, C, dZ, dC, dw, db);  // parameter gradients accumulate
    FD_CHECK(dw, 2 * numericGrad(w, loss));
  }
  SECTION("two-layer tanh gate: beta = 2 sigma(w2 tanh(W1 c) + b2)") {
    auto loss = [&] {
      RowX<double> zl, bl;
      MatX<double> hl;
      ddl::twoLayerGateLogits(W1, w2, b(0, 0), C, hl, zl);
      ddl::gateFromLogits(zl, bl);
      return (Wl.array() * bl.array()).sum();
    };
    ddl::twoLayerGateLogits(W1, w2, b(0, 0), C, Hid, Z);
    ddl::gateFromLogits(Z, beta);
    ddl::gateFromLogitsBackward(Z, Wl, dZ);
    ddl::twoLayerGateLogitsBackward(W1, w2, C, Hid, dZ, dC, dW1, dw2, db, dPre);
    FD_CHECK(dC, numericGrad(C, loss));
    FD_CHECK(dW1, numericGrad(W1, loss));
    FD_CHECK(dw2, numericGrad(w2, loss));
    FD_CHECK(db, numericGrad(b, loss));
  }
}

TEST_CASE("gate heads reject mismatched shapes", "[ops][gate][errors]") {
  MatX<double> C = MatX<double>::Random(4, 3), w = MatX<double>::Random(1, 5);
  RowX<double> Z;
  const std::string msg = ddl_test::thrownMessage<ddl::ShapeError>([&] { ddl::linearGateLogits(w, 0.0, C, Z); });
  CHECK(ddl_test::contains(msg, "ddl::linearGateLogits: C has shape (4, 3), expected (5, any)"));
}

TEST_CASE("gate backward in float stays accurate at saturated logits", "[ops][gate]") {
  // Reference d beta/d z = 2 sigma(z) sigma(-z) in double. The old formula beta (2 - beta) / 2 from
  // the rounded float beta is 0.9 % off at z = 12 and exactly 0 from z ~ 17 on.
  const float zs[] = {12.0f, 17.0f, 30.0f, -30.0f, 0.0f, -12.0f};
  RowX<float> Z(1, 6), dBeta = RowX<float>::Ones(1, 6), dZ;
  for (Index i = 0; i < 6; ++i) Z(0, i) = zs[i];
  ddl::gateFromLogitsBackward(Z, dBeta, dZ);
  for (Index i = 0; i < 6; ++i) {
    const double z = zs[i];
    const double s = 1.0 / (1.0 + std::exp(-z)), sm = 1.0 / (1.0 + std::exp(z));
    const double ref = 2.0 * s * sm;
    CAPTURE(z, dZ(0, i), ref);
    CHECK(dZ(0, i) > 0.0f);
    CHECK(std::abs(dZ(0, i) - ref) <= 1e-6 * ref);
  }
}

}  // namespace test_direction_gate
