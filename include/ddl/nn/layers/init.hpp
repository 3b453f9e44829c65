#pragma once
// ddl/nn/layers/init.hpp: seeded, portable parameter initialisation.
//
// Every draw goes through ddl::Rng in double and is then rounded to S, so float and double models
// built from the same seed hold the same numbers (up to rounding) on every platform. Matrices are
// filled in column-major order (Eigen's storage order); a layer documents the order of its params.
#include <cmath>
#include <string>

#include "ddl/core/error.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

// How a Linear-like layer (weight W: (out, in), bias b: (out, 1)) is initialised.
//   PyTorchDefault : W ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform with a = sqrt(5)),
//                    b ~ U(-1/sqrt(in), 1/sqrt(in))                      (torch.nn.Linear default)
//   XavierUniform  : W ~ U(-sqrt(6/(in+out)), sqrt(6/(in+out))), b = 0    (Glorot, tanh nets)
//   KaimingNormal  : W ~ N(0, 2/in) (std sqrt(2/in)), b = 0               (He, ReLU nets)
//   Normal         : W ~ N(0, std^2), b = 0                               (GPT-2 style, std = 0.02)
//   Zeros          : W = 0, b = 0   (e.g. the last layer of a residual branch: the block starts as identity)
enum class InitKind { PyTorchDefault, XavierUniform, KaimingNormal, Normal, Zeros };

struct InitScheme {
  InitKind kind = InitKind::PyTorchDefault;
  double std = 0.02;  // used by InitKind::Normal only

  static InitScheme pytorchDefault() { return {InitKind::PyTorchDefault, 0.02}; }
  static InitScheme xavierUniform() { return {InitKind::XavierUniform, 0.02}; }
  static InitScheme kaimingNormal() { return {InitKind::KaimingNormal, 0.02}; }
  static InitScheme normal(double stddev) { return {InitKind::Normal, stddev}; }
  static InitScheme zeros() { return {InitKind::Zeros, 0.02}; }
};

inline std::string toString(InitKind k) {
  switch (k) {
    case InitKind::PyTorchDefault: return "pytorch_default";
    case InitKind::XavierUniform: return "xavier_uniform";
    case InitKind::KaimingNormal: return "kaiming_normal";
    case InitKind::Normal: return "normal";
    case InitKind::Zeros: return "zeros";
  }
  return "unknown";
}

inline InitKind parseInitKind(const std::string& name) {
  for (InitKind k : {InitKind::PyTorchDefault, InitKind::XavierUniform, InitKind::KaimingNormal,
                     InitKind::Normal, InitKind::Zeros})
    if (name == toString(k)) return k;
  throw ValueError(message("ddl::parseInitKind", "unknown init scheme '", name,
                           "', expected one of pytorch_default, xavier_uniform, kaiming_normal, normal, zeros"));
}

// M: (r, c) filled column by column with U(lo, hi).
template <class Derived>
void fillUniform(Eigen::MatrixBase<Derived>& M, Rng& rng, double lo, double hi) {
  require(lo <= hi && std::isfinite(lo) && std::isfinite(hi), "ddl::fillUniform", "need finite lo <= hi, got [",
          lo, ", ", hi, ")");
  using S = typename Derived::Scalar;
  for (Index j = 0; j < M.cols(); ++j)
    for (Index i = 0; i < M.rows(); ++i) M(i, j) = static_cast<S>(rng.uniform(lo, hi));
}

// M: (r, c) filled column by column with N(mean, stddev^2).
template <class Derived>
void fillNormal(Eigen::MatrixBase<Derived>& M, Rng& rng, double mean, double stddev) {
  require(stddev >= 0 && std::isfinite(stddev) && std::isfinite(mean), "ddl::fillNormal",
          "need finite mean and stddev >= 0, got mean ", mean, ", stddev ", stddev);
  using S = typename Derived::Scalar;
  for (Index j = 0; j < M.cols(); ++j)
    for (Index i = 0; i < M.rows(); ++i) M(i, j) = static_cast<S>(rng.normal(mean, stddev));
}

// Initialises a weight W: (out, in) and an optional bias b: (out, 1) (nullptr when absent) by scheme.
// Draw order: all of W (column-major), then b.
template <class S>
void initLinearParams(MatX<S>& W, MatX<S>* b, Rng& rng, const InitScheme& scheme) {
  const char* fn = "ddl::initLinearParams";
  const double in = static_cast<double>(W.cols()), out = static_cast<double>(W.rows());
  require(in > 0 && out > 0, fn, "weight must be non-empty, got shape ", shapeOf(W));
  switch (scheme.kind) {
    case InitKind::PyTorchDefault: {
      const double bound = 1.0 / std::sqrt(in);
      fillUniform(W, rng, -bound, bound);
      if (b) fillUniform(*b, rng, -bound, bound);
      return;
    }
    case InitKind::XavierUniform: {
      const double bound = std::sqrt(6.0 / (in + out));
      fillUniform(W, rng, -bound, bound);
      break;
    }
    case InitKind::KaimingNormal:
      fillNormal(W, rng, 0.0, std::sqrt(2.0 / in));
      break;
    case InitKind::Normal:
      require(scheme.std >= 0 && std::isfinite(scheme.std), fn, "Normal init needs a finite std >= 0, got ",
              scheme.std);
      fillNormal(W, rng, 0.0, scheme.std);
      break;
    case InitKind::Zeros:
      W.setZero();
      break;
  }
  if (b) b->setZero();
}

}  // namespace ddl
