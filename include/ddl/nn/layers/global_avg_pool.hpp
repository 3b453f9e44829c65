#pragma once
// ddl/nn/layers/global_avg_pool.hpp: the mean over each sample's tokens (global average pool per image).
//
//   X: (C, B*T), T = layout.tokensPerSample() (H*W for an image), columns of sample b at b*T .. b*T+T-1
//   -> Y: (C, B), Y(:, b) = (1/T) Σ_t X(:, b*T + t)           backward: dX(:, b*T + t) = dY(:, b) / T
// The sum runs over one sample's T columns (T <= a few thousand), so its rounding error stays small.
#include <string>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

template <class S>
class GlobalAvgPool {
 public:
  TokenLayout outputLayout(const TokenLayout& in) const { return TokenLayout::vectors(in.batch); }

  // X: (C, layout.tokens()) -> Y: (C, B); returns TokenLayout::vectors(B). Caches only the layout.
  TokenLayout forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y);

  // Same output as forward, caches nothing.
  TokenLayout forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) const;

  // dY: (C, B) of the last forward -> dX: (C, B*T) overwritten. dX must not alias dY.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) const;

  template <class F>
  void visitParams(const std::string&, F&&) {}  // no parameters

 private:
  bool m_hasForward = false;
  Index m_channels = 0;
  TokenLayout m_inLayout;
};

template <class S>
TokenLayout GlobalAvgPool<S>::forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
  forwardInference(X, layout, Y);
  m_inLayout = layout;
  m_channels = X.rows();
  m_hasForward = true;
  return outputLayout(layout);
}

template <class S>
TokenLayout GlobalAvgPool<S>::forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout,
                                               MatX<S>& Y) const {
  if (X.cols() != layout.tokens())
    throw ShapeError(message("ddl::GlobalAvgPool::forward", "X has shape ", shapeOf(X), ", expected (C, ",
                             layout.tokens(), ") for the layout ", toString(layout)));
  const Index T = layout.tokensPerSample();
  const S inv = S(1) / static_cast<S>(T);
  Y.resize(X.rows(), layout.batch);
  for (Index b = 0; b < layout.batch; ++b) {
    auto y = Y.col(b);
    y.setZero();
    for (Index t = 0; t < T; ++t) y += X.col(b * T + t);  // column sweep: contiguous, no temporary
    y *= inv;
  }
  return outputLayout(layout);
}

template <class S>
void GlobalAvgPool<S>::backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) const {
  const char* fn = "ddl::GlobalAvgPool::backward";
  if (!m_hasForward) throw Error(message(fn, "called before forward"));
  checkShape(fn, "dY", dY, m_channels, m_inLayout.batch);
  const Index T = m_inLayout.tokensPerSample();
  const S inv = S(1) / static_cast<S>(T);
  dX.resize(m_channels, m_inLayout.tokens());
  for (Index b = 0; b < m_inLayout.batch; ++b)
    for (Index t = 0; t < T; ++t) dX.col(b * T + t) = inv * dY.col(b);
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class GlobalAvgPool<float>;
extern template class GlobalAvgPool<double>;
#endif

}  // namespace ddl
