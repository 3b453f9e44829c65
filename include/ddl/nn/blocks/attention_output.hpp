#pragma once
// ddl/nn/blocks/attention_output.hpp: what the authors' attention options do to the heads' outputs
// between the attention core and W_o (nn/blocks/attention_options.hpp): a per-head RMSNorm (using_groupnorm
// or use_output_gate) and the output gate.
//
//   A: (D, N) the heads concatenated, D = H*d_h, head h owns rows h*d_h ..;  c: (d, N) the attention's input
//   n = RMSNorm(A) over each head's d_h features, one gain [d_h] (eps outputNormEps)
//   gate:  y = n ⊙ silu(u),  u = W_g c,  W_g: [D, d];  otherwise y = n
// Backward, with dy the gradient of y:  dn = dy ⊙ silu(u),  du = dy ⊙ n ⊙ σ(u) (1 + u (1 − σ(u))),
// then the norm's backward into dA (backward) and W_gᵀ du into dc (addInputGradient).
// Parameters: g.weight [D, d] (the gate), then subln.weight (using_groupnorm) or o_norm.weight [d_h].
// When neither option is on, active() is false and the attention bypasses this module.
#include <optional>
#include <string>
#include <tuple>

#include "ddl/core/error.hpp"
#include "ddl/core/gemm.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/swap_each.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/attention_options.hpp"
#include "ddl/nn/layers/forward_mode.hpp"
#include "ddl/nn/layers/linear.hpp"
#include "ddl/nn/layers/rms_norm.hpp"

namespace ddl {

template <class S>
class AttentionOutput {
 public:
  using TokenMap = Eigen::Map<const MatX<S>>;

  // d model width, H heads of d_h features; reads outputGate, groupNorm and outputNormEps.
  AttentionOutput(Index d, Index heads, Index headDim, const AttentionOptions& opt)
      : m_H(heads), m_dh(headDim), m_groupNorm(opt.groupNorm), m_active(opt.outputNorm()),
        m_norm(headDim, opt.outputNormEps) {
    if (opt.outputGate) m_g.emplace(d, heads * headDim, false);
  }

  bool active() const { return m_active; }

  // Draws W_g (torch.nn.Linear's default) when there is a gate; the gain is reset to 1.
  void init(Rng& rng) {
    if (m_g) m_g->init(rng);
    m_norm.weight().value.setOnes();
  }

  // A: (D, N), c: (d, N) -> what W_o reads, (D, N), a view of this module's storage (valid until the next
  // call in the same mode). Train keeps the norm's and W_g's caches (views of A and c) for backward.
  TokenMap forward(const MatX<S>& A, const Eigen::Ref<const MatX<S>>& c, ForwardMode mode);

  // dY: (D, N) of the last Train forward -> dA (D, N) overwritten; the gain's gradient accumulates and
  // du is kept for addInputGradient.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dA);

  // After backward: dc (d, N) += W_gᵀ du, and W_g's gradient accumulates (the gate only; else nothing).
  void addInputGradient(MatX<S>& dc) {
    if (!m_g) return;
    m_g->backward(m_du, m_tmp);
    dc += m_tmp;
  }

  // Exchanges backward's scratch (dead once addInputGradient has run) and the layers' with other's, a
  // module of the same shape (docs/decisions.md, "Scratch shared between blocks").
  void swapScratch(AttentionOutput& other) noexcept {
    swapEach(std::tie(m_dn, m_du, m_dnHeads, m_tmp, m_norm),
             std::tie(other.m_dn, other.m_du, other.m_dnHeads, other.m_tmp, other.m_norm));
    if (m_g && other.m_g) m_g->swapScratch(*other.m_g);
  }

  // Decoding scratch: the normed heads, u and the gated heads of one step.
  struct Step {
    MatX<S> n, u, y;
  };
  // Sizes st for one-column steps (which then allocate nothing).
  void startStep(Step& st) const {
    st.n.resize(m_dh, m_H);
    st.u.resize(m_H * m_dh, 1);
    st.y.resize(m_H * m_dh, 1);
  }
  // A: (D, n) of one step, c: (d, n) -> (D, n), the same as forward's columns. Reads the module only.
  TokenMap step(const MatX<S>& A, const Eigen::Ref<const MatX<S>>& c, Step& st, GemmWorkspace<S>& gemm) const;

  // g.weight, then subln.weight or o_norm.weight.
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    if (!m_active) return;
    if (m_g) m_g->visitParams(joinName(prefix, "g"), f);
    m_norm.visitParams(joinName(prefix, m_groupNorm ? "subln" : "o_norm"), f);
  }

 private:
  TokenMap heads(const MatX<S>& M) const { return TokenMap(M.data(), m_dh, M.size() / m_dh); }
  TokenMap tokens(const MatX<S>& M) const { return TokenMap(M.data(), m_H * m_dh, M.size() / (m_H * m_dh)); }
  // y = n ⊙ silu(u), all (D, n).
  static void gate(const TokenMap& n, const MatX<S>& u, MatX<S>& y) {
    y.resize(n.rows(), n.cols());
    y.array() = n.array() * (u.array() * u.array().logistic());
  }

  struct Cache {
    MatX<S> n, u, y;  // (d_h, H*N) normed heads; (D, N) W_g c and the gated heads
  };
  Index m_H, m_dh;
  bool m_groupNorm, m_active;
  RmsNorm<S> m_norm;
  std::optional<Linear<S>> m_g;
  Cache m_train, m_infer;
  MatX<S> m_dn, m_du, m_dnHeads, m_tmp;  // backward scratch
};

template <class S>
typename AttentionOutput<S>::TokenMap AttentionOutput<S>::forward(const MatX<S>& A, const Eigen::Ref<const MatX<S>>& c,
                                                                  ForwardMode mode) {
  const bool train = mode == ForwardMode::Train;
  Cache& a = train ? m_train : m_infer;
  if (train)
    m_norm.forward(heads(A), a.n);
  else
    m_norm.forwardInference(heads(A), a.n);
  if (!m_g) return tokens(a.n);
  if (train)
    m_g->forward(c, a.u);
  else
    m_g->forwardInference(c, a.u);
  gate(tokens(a.n), a.u, a.y);
  return tokens(a.y);
}

template <class S>
void AttentionOutput<S>::backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dA) {
  const MatX<S>* dn = nullptr;
  if (m_g) {
    const auto u = m_train.u.array();
    const auto sig = u.logistic();
    m_du.resize(dY.rows(), dY.cols());
    m_du.array() = dY.array() * tokens(m_train.n).array() * (sig * (S(1) + u * (S(1) - sig)));
    m_dn.resize(dY.rows(), dY.cols());
    m_dn.array() = dY.array() * (u * sig);
    dn = &m_dn;
  } else {
    m_dn = dY;
    dn = &m_dn;
  }
  m_norm.backward(heads(*dn), m_dnHeads);
  dA = tokens(m_dnHeads);
}

template <class S>
typename AttentionOutput<S>::TokenMap AttentionOutput<S>::step(const MatX<S>& A, const Eigen::Ref<const MatX<S>>& c,
                                                               Step& st, GemmWorkspace<S>& gemm) const {
  m_norm.forwardInference(heads(A), st.n);
  if (!m_g) return tokens(st.n);
  const MatX<S>& W = m_g->weight().value;
  st.u.resize(W.rows(), c.cols());
  if (c.cols() == 1)
    st.u.col(0).noalias() = W * c.col(0);
  else
    gemm.product(W, false, c, false, st.u, S(1), false);
  gate(tokens(st.n), st.u, st.y);
  return tokens(st.y);
}

}  // namespace ddl
