#pragma once
// ddl/nn/linear.hpp: the fully connected layer Y = W X + b 1ᵀ, tokens are columns.
//
//   X: (in, B)   W: (out, in)   b: (out, 1)   Y: (out, B)
//   backward:  dW += dY Xᵀ,  db += dY 1,  dX = Wᵀ dY
//
// Steady state allocates nothing: the input cache is a member resized only when B changes, and
// every product is written with noalias() into caller-owned outputs (Eigen's GEMM still packs
// into a stack buffer, or the heap above EIGEN_STACK_ALLOCATION_LIMIT = 128 KiB per panel).
#include <string>

#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/init.hpp"

namespace ddl {

template <class S>
class Linear {
 public:
  // in, out >= 1. The bias has decay = false (AdamW does not shrink it); both start at zero
  // until init() is called.
  Linear(Index in, Index out, bool bias = true) : m_in(in), m_out(out), m_hasBias(bias) {
    require(in >= 1 && out >= 1, "ddl::Linear", "in and out must be >= 1, got in = ", in, ", out = ", out);
    m_W = Param<S>(out, in, /*withDecay=*/true);
    if (bias) m_b = Param<S>(out, 1, /*withDecay=*/false);
  }

  // Seeded initialisation by scheme (see init.hpp). Draw order: weight (column-major), then bias.
  void init(Rng& rng, const InitScheme& scheme = InitScheme::pytorchDefault()) {
    initLinearParams(m_W.value, m_hasBias ? &m_b.value : nullptr, rng, scheme);
  }

  // X: (in, B) one column per token -> Y: (out, B). Caches X for backward. Y must not alias X.
  void forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y) {
    checkShape("ddl::Linear::forward", "X", X, m_in, -1);
    m_X = X;  // no allocation when B is unchanged
    m_hasForward = true;
    Y.resize(m_out, X.cols());
    Y.noalias() = m_W.value * X;
    if (m_hasBias) Y.colwise() += m_b.value.col(0);
  }

  // dY: (out, B) of the last forward -> dX: (in, B) overwritten; dW, db accumulate (+=).
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) {
    backwardParamsOnly(dY);
    dX.resize(m_in, dY.cols());
    dX.noalias() = m_W.value.transpose() * dY;
  }

  // dY: (out, B): accumulates dW and db only; for a layer whose input needs no gradient
  // (the first layer of a net), which saves the Wᵀ dY product.
  void backwardParamsOnly(const Eigen::Ref<const MatX<S>>& dY) {
    const char* fn = "ddl::Linear::backward";
    if (!m_hasForward) throw Error(message(fn, "called before forward"));
    checkShape(fn, "dY", dY, m_out, m_X.cols());
    m_W.grad.noalias() += dY * m_X.transpose();
    if (m_hasBias) {
      // Column sweep: contiguous, vectorised, no temporary (rowwise().sum() strides across columns).
      auto db = m_b.grad.col(0);
      for (Index j = 0; j < dY.cols(); ++j) db += dY.col(j);
    }
  }

  // Parameters in a fixed order: "weight" (out, in), then "bias" (out, 1) when present.
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    f(joinName(prefix, "weight"), m_W);
    if (m_hasBias) f(joinName(prefix, "bias"), m_b);
  }

  Param<S>& weight() { return m_W; }
  const Param<S>& weight() const { return m_W; }
  Param<S>& bias() {
    if (!m_hasBias) throw Error("ddl::Linear::bias: this layer was built without a bias");
    return m_b;
  }
  const Param<S>& bias() const { return const_cast<Linear*>(this)->bias(); }
  bool hasBias() const { return m_hasBias; }
  Index inFeatures() const { return m_in; }
  Index outFeatures() const { return m_out; }

 private:
  Index m_in, m_out;
  bool m_hasBias;
  bool m_hasForward = false;
  Param<S> m_W, m_b;
  MatX<S> m_X;  // (in, B) input of the last forward
};

}  // namespace ddl
