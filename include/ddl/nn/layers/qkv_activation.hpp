#pragma once
// ddl/nn/layers/qkv_activation.hpp: the element-wise activations the authors' attention may apply to its
// queries, keys and values (their activations.py: q_activation, k_activation, v_activation).
//
//   identity  y = x                                        y' = 1
//   silu      y = x σ(x)                                   y' = σ(x) (1 + x (1 − σ(x)))
//   relu      y = max(x, 0)                                y' = [x > 0]
//   elu+1     y = x + 1 (x > 0),  exp(x) (x <= 0)          y' = 1 (x > 0),  exp(x) (x <= 0)
//             computed as elu(x) + 1 with elu(x) = expm1(x) for x <= 0, as torch's F.elu(x) + 1
// Their names, as their validate_activation_name takes them: "elu" is read as "elu+1"; their None is
// identity. Any other name is refused.
#include <string>

#include <Eigen/Core>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

enum class QkvActivation { Identity, SiLU, ReLU, EluPlus1 };

// "identity", "silu", "relu", "elu+1".
inline std::string toString(QkvActivation kind) {
  switch (kind) {
    case QkvActivation::Identity: return "identity";
    case QkvActivation::SiLU: return "silu";
    case QkvActivation::ReLU: return "relu";
    case QkvActivation::EluPlus1: return "elu+1";
  }
  throw ValueError(message("ddl::toString(QkvActivation)", "invalid enum value ", static_cast<int>(kind)));
}

// Inverse of toString, plus the authors' aliases "elu" (elu+1) and "none" / "" (identity, their None).
// field names the option in the message (q_activation, ...).
inline QkvActivation parseQkvActivation(const std::string& name, const char* field = "activation") {
  if (name == "identity" || name == "none" || name.empty()) return QkvActivation::Identity;
  if (name == "silu") return QkvActivation::SiLU;
  if (name == "relu") return QkvActivation::ReLU;
  if (name == "elu+1" || name == "elu") return QkvActivation::EluPlus1;
  throw ValueError(message("ddl::parseQkvActivation", "unsupported ", field, " '", name,
                           "', expected one of identity, silu, relu, elu+1 (or elu, none)"));
}

// Y = act(X), X and Y (r, n) of the same shape (Y resized); Y may alias X.
template <class S>
void qkvActivate(QkvActivation kind, const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y) {
  if (Y.rows() != X.rows() || Y.cols() != X.cols()) Y.resize(X.rows(), X.cols());
  const auto x = X.array();
  switch (kind) {
    case QkvActivation::Identity: Y = X; return;
    case QkvActivation::SiLU: Y.array() = x * x.logistic(); return;
    case QkvActivation::ReLU: Y.array() = x.max(S(0)); return;
    case QkvActivation::EluPlus1: Y.array() = (x > S(0)).select(x, x.expm1()) + S(1); return;
  }
}

// dX = act'(X) ⊙ dY, all (r, n); X is the activation's input. dX (presized) may alias dY.
template <class S>
void qkvActivateBackward(QkvActivation kind, const Eigen::Ref<const MatX<S>>& X, const Eigen::Ref<const MatX<S>>& dY,
                         Eigen::Ref<MatX<S>> dX) {
  const auto x = X.array();
  switch (kind) {
    case QkvActivation::Identity: dX = dY; return;
    case QkvActivation::SiLU:
      for (Index j = 0; j < X.cols(); ++j) {
        const auto xj = X.col(j).array();
        const auto sig = xj.logistic();
        dX.col(j).array() = dY.col(j).array() * (sig * (S(1) + xj * (S(1) - sig)));
      }
      return;
    case QkvActivation::ReLU: dX.array() = (x > S(0)).select(dY.array(), S(0)); return;
    case QkvActivation::EluPlus1: dX.array() = (x > S(0)).select(dY.array(), dY.array() * x.exp()); return;
  }
}

}  // namespace ddl
