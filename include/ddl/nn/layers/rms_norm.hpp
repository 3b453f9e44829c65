#pragma once
// ddl/nn/layers/rms_norm.hpp: RMSNorm over the feature axis of every column, with a learnable gain.
//
//   r_b = 1 / sqrt(mean_i X(i,b)^2 + eps),   x̂ = X r,   Y = g ⊙ x̂          X, Y: (d, B), g: (d, 1)
//   backward (exact for eps > 0):  t = g ⊙ dY,   dX = r ⊙ (t − x̂ · mean_i(t ⊙ x̂)),   dg += Σ_b dY ⊙ x̂
// On an image activation (C, B*H*W) (core/token_layout.hpp) each column is one pixel, so this is the
// per-pixel RMSNorm over channels of a conv net; no separate image layer (tests/test_conv.cpp proves it).
#include <cmath>
#include <string>
#include <vector>

#include "ddl/core/alias.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/reduce.hpp"
#include "ddl/core/types.hpp"
#include "ddl/core/view.hpp"

namespace ddl {

template <class S>
class RmsNorm {
 public:
  // d >= 1 features, eps >= 0 (finite). The gain "weight" starts at 1 and has decay = false.
  explicit RmsNorm(Index d, double eps = 1e-5) : m_d(d), m_eps(static_cast<S>(eps)) {
    require(d >= 1, "ddl::RmsNorm", "d must be >= 1, got ", d);
    require(eps >= 0 && std::isfinite(eps), "ddl::RmsNorm", "eps must be finite and >= 0, got ", eps);
    m_g = Param<S>(std::vector<Index>{d}, /*withDecay=*/false);
    m_g.value.setOnes();
  }

  // X: (d, B) one column per token -> Y: (d, B). Keeps r and a view of X (backward recomputes
  // x̂ = X r, the same bits as forward), so X must stay alive and unchanged until backward. Y may
  // alias X: then X is copied first, as the output overwrites it.
  void forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y);

  // Same Y as forward, bit for bit (x̂ = X r is rounded before the gain multiplies it, as there);
  // caches nothing and allocates nothing once Y has its shape. Y may alias X.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y) const;

  // dY: (d, B) of the last forward -> dX: (d, B) overwritten; the gain gradient accumulates (+=).
  // dX may alias dY.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX);

  // Parameters: "weight" [d] (held as (d, 1)), the gain.
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    f(joinName(prefix, "weight"), m_g);
  }

  // Exchanges backward's scratch with other's, a norm of the same size (docs/decisions.md, "Scratch
  // shared between blocks"); the gain, the view of the input and r stay.
  void swapScratch(RmsNorm& other) noexcept { m_dgWide.swap(other.m_dgWide); }

  Param<S>& weight() { return m_g; }
  const Param<S>& weight() const { return m_g; }
  Index dim() const { return m_d; }
  S eps() const { return m_eps; }
  // r per column of the last forward: (B).
  const VecX<S>& rstd() const { return m_rstd; }

 private:
  Index m_d;
  S m_eps;
  bool m_hasForward = false;
  Param<S> m_g;
  ConstView<S> m_X;  // (d, B) input of the last forward, owned by the caller (or m_copy)
  MatX<S> m_copy;     // the input of an in-place forward
  VecX<S> m_rstd;  // (B)
  VecX<SumType<S>> m_dgWide;  // (d) scratch of backward
};

template <class S>
void RmsNorm<S>::forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y) {
  checkShape("ddl::RmsNorm::forward", "X", X, m_d, -1);
  if (detail::sharesStorage(X, Y)) {
    m_copy = X;
    m_X.bind(m_copy);
  } else {
    m_X.bind(X);
  }
  const Index B = X.cols();
  m_rstd.resize(B);
  Y.resize(m_d, B);  // a no-op when Y is X
  const S invD = S(1) / static_cast<S>(m_d);
  const auto g = m_g.value.col(0).array();
  for (Index b = 0; b < B; ++b) {
    const S r = S(1) / std::sqrt(X.col(b).squaredNorm() * invD + m_eps);
    m_rstd(b) = r;
    Y.col(b).array() = (X.col(b).array() * r) * g;
  }
  m_hasForward = true;
}

template <class S>
void RmsNorm<S>::forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y) const {
  checkShape("ddl::RmsNorm::forwardInference", "X", X, m_d, -1);
  const Index B = X.cols();
  Y.resize(m_d, B);  // a no-op when Y is X
  const S invD = S(1) / static_cast<S>(m_d);
  const auto g = m_g.value.col(0).array();
  for (Index b = 0; b < B; ++b) {
    const S r = S(1) / std::sqrt(X.col(b).squaredNorm() * invD + m_eps);
    Y.col(b).array() = (X.col(b).array() * r) * g;
  }
}

template <class S>
void RmsNorm<S>::backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) {
  const char* fn = "ddl::RmsNorm::backward";
  if (!m_hasForward) throw Error(message(fn, "called before forward"));
  checkShape(fn, "dY", dY, m_d, m_X.cols());
  const auto X = m_X.map();
  const Index B = dY.cols();
  const S invD = S(1) / static_cast<S>(m_d);
  auto g = m_g.value.col(0).array();
  if (dX.rows() != m_d || dX.cols() != B) dX.resize(m_d, B);
  m_dgWide.setZero(m_d);  // the gain gradient's sum over tokens, in double (core/reduce.hpp)
  for (Index b = 0; b < B; ++b) {
    const auto xh = X.col(b).array() * m_rstd(b);  // x̂ exactly as forward rounded it
    auto dy = dY.col(b).array();
    m_dgWide.array() += dy.template cast<SumType<S>>() * xh.template cast<SumType<S>>();
    const S c = (g * dy * xh).sum() * invD;
    dX.col(b).array() = m_rstd(b) * (g * dy - xh * c);
  }
  m_g.grad.col(0) += m_dgWide.template cast<S>();
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class RmsNorm<float>;
extern template class RmsNorm<double>;
#endif

}  // namespace ddl
