#pragma once
// ddl/nn/blocks/attention_projection.hpp: one of the attention's q, k, v projections with the authors'
// options that come before RoPE (nn/blocks/attention_options.hpp):
//
//   z = W c                                  (H*d_h, N), W: [H*d_h, in], no bias
//   shift (k, v):  alpha = σ(W_s c) (H, N),  z <- alpha z(t−1) + (1 − alpha) z(t) per head
//                  (nn/layers/token_shift.hpp); W_s: [H, in], no bias
//   y = act(z)                               (nn/layers/qkv_activation.hpp)
// Backward runs the three in reverse: act' ⊙ dy, the shift's dz and dlogit, then Wᵀ and W_sᵀ into dc.
// Without shift and activation, forward is W c into y and nothing more (the plain attention's path).
// forward keeps views of c (the Linears') and its own z, alpha: c must stay alive until backward.
//
// Decoding (one sequence, positions L .. L+n−1): step takes c (in, n) and a Step holding the last z of
// the positions before (the shift's z(L−1)); its y equals forward's columns to rounding.
#include <optional>
#include <string>

#include "ddl/core/error.hpp"
#include "ddl/core/gemm.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/forward_mode.hpp"
#include "ddl/nn/layers/linear.hpp"
#include "ddl/nn/layers/qkv_activation.hpp"
#include "ddl/nn/layers/token_shift.hpp"

namespace ddl {

template <class S>
class AttentionProjection {
 public:
  // in features -> heads * headDim; shift adds W_s [heads, in].
  AttentionProjection(Index in, Index heads, Index headDim, bool shift, QkvActivation act)
      : m_W(in, heads * headDim, false), m_act(act), m_heads(heads) {
    if (shift) m_shift.emplace(in, heads, false);
  }

  // Draw W, and W_s when there is a shift (torch.nn.Linear's default); the attention orders the calls.
  void initWeight(Rng& rng) { m_W.init(rng); }
  void initShift(Rng& rng) {
    if (m_shift) m_shift->init(rng);
  }

  // Whether anything follows W c.
  bool transforms() const { return m_shift.has_value() || m_act != QkvActivation::Identity; }

  // c: (in, B*T), sequences of length T -> y: (H*d_h, B*T). y must not alias c.
  void forward(const Eigen::Ref<const MatX<S>>& c, Index T, MatX<S>& y, ForwardMode mode);

  // dy: (H*d_h, B*T) of the last Train forward, used as scratch (overwritten) -> dc (in, B*T): overwritten
  // when !accumulate, else dc += the input gradient. W's and W_s's gradients accumulate.
  void backward(Eigen::Ref<MatX<S>> dy, MatX<S>& dc, bool accumulate);

  // Exchanges backward's scratch and the layers' with other's, a projection of the same shape
  // (docs/decisions.md, "Scratch shared between blocks").
  void swapScratch(AttentionProjection& other) noexcept {
    m_dz.swap(other.m_dz);
    m_dLogit.swap(other.m_dLogit);
    m_tmp.swap(other.m_tmp);
    m_W.swapScratch(other.m_W);
    if (m_shift && other.m_shift) m_shift->swapScratch(*other.m_shift);
  }

  // Decoding state of one sequence: z of the last position (the next one's shift reads it) and scratch.
  struct Step {
    VecX<S> prev;          // (H*d_h) z of position L−1, valid when L > 0
    MatX<S> z, mixed, alpha;
  };

  // Sizes st for one-column steps (so they allocate nothing).
  void startStep(Step& st) const {
    const Index rows = m_W.weight().value.rows();
    if (!transforms()) return;
    st.prev.setZero(rows);
    st.z.resize(rows, 1);
    st.mixed.resize(rows, 1);
    st.alpha.resize(m_heads, 1);
  }

  // c: (in, n) positions L .. L+n−1 of one sequence (L = first) -> y (H*d_h, n). Reads the layer only.
  void step(const Eigen::Ref<const MatX<S>>& c, Index first, Step& st, MatX<S>& y, GemmWorkspace<S>& gemm) const;

  // W as `name`.weight (the attention visits W and W_s at different places of its order).
  template <class F>
  void visitWeight(const std::string& name, F&& f) {
    m_W.visitParams(name, f);
  }
  // W_s as `name`.weight, when there is a shift.
  template <class F>
  void visitShift(const std::string& name, F&& f) {
    if (m_shift) m_shift->visitParams(name, f);
  }

  const Linear<S>& linear() const { return m_W; }

  // Y (rows, n) = W X: one column is a matrix-vector product (no allocation), a block goes through gemm.
  static void stepProduct(const MatX<S>& W, const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y, GemmWorkspace<S>& gemm) {
    Y.resize(W.rows(), X.cols());
    if (X.cols() == 1)
      Y.col(0).noalias() = W * X.col(0);
    else
      gemm.product(W, false, X, false, Y, S(1), false);
  }

 private:
  struct Cache {
    MatX<S> z, mixed, alpha;  // W c; after the shift (shift and activation); σ(W_s c)
    Index T = 1;
  };
  // The input of the activation in cache a.
  const MatX<S>& preActivation(const Cache& a) const { return m_shift ? a.mixed : a.z; }

  Linear<S> m_W;
  std::optional<Linear<S>> m_shift;
  QkvActivation m_act;
  Index m_heads;
  Cache m_train, m_infer;
  MatX<S> m_dz, m_dLogit, m_tmp;
};

template <class S>
void AttentionProjection<S>::forward(const Eigen::Ref<const MatX<S>>& c, Index T, MatX<S>& y, ForwardMode mode) {
  const bool train = mode == ForwardMode::Train;
  const auto linear = [train](Linear<S>& layer, const Eigen::Ref<const MatX<S>>& in, MatX<S>& out) {
    if (train)
      layer.forward(in, out);
    else
      layer.forwardInference(in, out);
  };
  if (!transforms()) return linear(m_W, c, y);
  Cache& a = train ? m_train : m_infer;
  a.T = T;
  linear(m_W, c, a.z);
  const bool act = m_act != QkvActivation::Identity;
  if (m_shift) {
    linear(*m_shift, c, a.alpha);
    a.alpha.array() = a.alpha.array().logistic();
    tokenShift<S>(a.z, a.alpha, T, nullptr, act ? a.mixed : y);
  }
  if (act) qkvActivate<S>(m_act, preActivation(a), y);
}

template <class S>
void AttentionProjection<S>::backward(Eigen::Ref<MatX<S>> dy, MatX<S>& dc, bool accumulate) {
  const auto into = [&](Linear<S>& layer, const Eigen::Ref<const MatX<S>>& d, bool add) {
    if (!add) return layer.backward(d, dc);
    layer.backward(d, m_tmp);
    dc += m_tmp;
  };
  if (m_act != QkvActivation::Identity) qkvActivateBackward<S>(m_act, preActivation(m_train), dy, dy);
  if (!m_shift) return into(m_W, dy, accumulate);
  tokenShiftBackward<S>(m_train.z, m_train.alpha, m_train.T, dy, m_dz, m_dLogit);
  into(m_W, m_dz, accumulate);
  into(*m_shift, m_dLogit, true);
}

template <class S>
void AttentionProjection<S>::step(const Eigen::Ref<const MatX<S>>& c, Index first, Step& st, MatX<S>& y,
                                  GemmWorkspace<S>& gemm) const {
  if (!transforms()) return stepProduct(m_W.weight().value, c, y, gemm);
  stepProduct(m_W.weight().value, c, st.z, gemm);
  const bool act = m_act != QkvActivation::Identity;
  if (m_shift) {
    stepProduct(m_shift->weight().value, c, st.alpha, gemm);
    st.alpha.array() = st.alpha.array().logistic();
    tokenShift<S>(st.z, st.alpha, c.cols(), first > 0 ? &st.prev : nullptr, act ? st.mixed : y);
    st.prev = st.z.col(st.z.cols() - 1);
  }
  if (act) qkvActivate<S>(m_act, m_shift ? st.mixed : st.z, y);
}

}  // namespace ddl
