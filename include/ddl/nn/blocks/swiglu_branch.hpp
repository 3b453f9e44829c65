#pragma once
// ddl/nn/blocks/swiglu_branch.hpp: the gated MLP of a transformer block (SwiGLU), usable as the branch F of
// DeltaBlock<S, SwiGluBranch<S>> (the branch contract of mlp_branch.hpp):
//
//   a = W1 c,  b = W3 c,  m = silu(a) ⊙ b,  h = W2 m          silu(x) = x σ(x), no biases
//   c: (d, N) -> a, b, m: (hidden, N) -> h: (d, N); tokens are independent, so the layout is only checked.
//   hidden 0 means floor(8 d / 3) (the same parameter count as a 4 d two-matrix MLP).
//
// backward, with dm = W2ᵀ dh:
//   da = dm ⊙ b ⊙ silu'(a),  silu'(x) = σ(x) (1 + x (1 − σ(x)));   db = dm ⊙ silu(a)
//   dc = W1ᵀ da + W3ᵀ db;   dW1 += da cᵀ, dW3 += db cᵀ, dW2 += dh mᵀ (Linear, which keeps views)
//
// Parameter names under the block (PyTorch shapes): mlp.fc1.weight [hidden, d] (W1, through silu),
// mlp.fc2.weight [d, hidden] (W2, output), mlp.fc3.weight [hidden, d] (W3, the gate's partner).
#include <string>
#include <tuple>
#include <type_traits>

#include "ddl/core/alias.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/swap_each.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/activation.hpp"
#include "ddl/nn/layers/linear.hpp"
#include "ddl/nn/blocks/mlp_branch.hpp"

namespace ddl {

template <class S>
class SwiGluBranch {
 public:
  // floor(8 d / 3), the hidden width when the options leave it at 0.
  static Index defaultHidden(Index d) { return 8 * d / 3; }

  // d >= 1; opt.hidden >= 0 (0: defaultHidden(d)); opt.activation must be SiLU, the gate of SwiGLU
  // (refused otherwise, so a configuration never names an activation the branch does not apply).
  SwiGluBranch(Index d, const DeltaBlockBranchOptions& opt)
      : m_d(d), m_hidden(checkedHidden(d, opt)), m_fc1(d, m_hidden, false), m_fc2(m_hidden, d, false),
        m_fc3(d, m_hidden, false) {
    m_fc2.weight().role = ParamRole::ResidualOutput;
  }

  static const char* name() { return "mlp"; }

  // Draw order: fc1, fc2, fc3 (torch.nn.Linear default, U(±1/sqrt(fan_in))).
  void init(Rng& rng);

  // What backward reads of the last forward (N tokens).
  struct Activations {
    MatX<S> a;  // (hidden, N) W1 c
    MatX<S> b;  // (hidden, N) W3 c
    MatX<S> m;  // (hidden, N) silu(a) ⊙ b; fc2 keeps a view of it
  };

  // Scratch of one inference caller: the gate is applied in place, so m is a.
  struct Workspace {
    MatX<S> a, b;                                // (hidden, N)
    typename Linear<S>::Workspace fc1, fc2, fc3;  // one per layer: each keeps its product shape
  };

  // C: (d, N) -> H: (d, N); N == layout.tokens(). Keeps a view of C (C must stay alive and unchanged
  // until backward) and its Activations. H must not alias C.
  void forward(const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H);

  // Same H as forward, bit for bit; caches nothing.
  void forwardInference(const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H);

  // The same with the caller's scratch: reads the branch only (callers on several threads may share it).
  void forwardInference(const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H,
                        Workspace& ws) const;

  // dH: (d, N) of the last forward -> dC: (d, N) overwritten; dW1, dW2, dW3 accumulate.
  void backward(const Eigen::Ref<const MatX<S>>& dH, MatX<S>& dC);

  // fc1.weight (hidden, d), fc2.weight (d, hidden), fc3.weight (hidden, d).
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    m_fc1.visitParams(joinName(prefix, "fc1"), f);
    m_fc2.visitParams(joinName(prefix, "fc2"), f);
    m_fc3.visitParams(joinName(prefix, "fc3"), f);
  }

  // Exchanges backward's scratch and the layers' product workspaces with other's, a branch of the same
  // shape (docs/decisions.md, "Scratch shared between blocks"); Activations stay.
  void swapScratch(SwiGluBranch& other) noexcept {
    swapEach(std::tie(m_dA, m_dB, m_dC3, m_fc1, m_fc2, m_fc3),
             std::tie(other.m_dA, other.m_dB, other.m_dC3, other.m_fc1, other.m_fc2, other.m_fc3));
  }

  Index hidden() const { return m_hidden; }
  Linear<S>& fc1() { return m_fc1; }
  Linear<S>& fc2() { return m_fc2; }
  Linear<S>& fc3() { return m_fc3; }

 private:
  static Index checkedHidden(Index d, const DeltaBlockBranchOptions& opt);

  void checkInput(const char* fn, const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout) const;

  // The one forward: on a mutable branch with its Activations (training: the Linears keep views for
  // backward), on a const one with a caller's Workspace (inference: nothing is kept).
  template <class Self, class Store>
  static void run(Self& self, const char* fn, const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout,
                  MatX<S>& H, Store& st);

  // M = silu(A) ⊙ B, all (hidden, N); M may be A. One expression for forward and forwardInference,
  // so both give the same bits; columns are independent, so any split over threads does too.
  static void gate(const MatX<S>& A, const MatX<S>& B, MatX<S>& M);

  // On one column range: dm (in dA) -> da = dm ⊙ b ⊙ silu'(a) (in place), db = dm ⊙ silu(a).
  // σ(a) is needed three times, so it is evaluated once per coefficient in a stack chunk.
  template <class BA, class BB, class BDA, class BDB>
  static void gateBackwardRange(const BA& A, const BB& B, BDA dA, BDB dB) {
    detail::forEachChunk(A, [&](Index j, Index i0, Index n, auto& s) {
      const auto a = A.col(j).segment(i0, n).array();
      const auto b = B.col(j).segment(i0, n).array();
      auto dm = dA.col(j).segment(i0, n).array();
      s = a.logistic();
      dB.col(j).segment(i0, n).array() = dm * (a * s);
      dm = dm * b * (s * (S(1) + a * (S(1) - s)));
    });
  }

  Index m_d, m_hidden;
  Linear<S> m_fc1, m_fc2, m_fc3;
  Index m_N = -1;               // tokens of the last forward
  Activations m_acts;           // of the last forward
  MatX<S> m_dA, m_dB, m_dC3;    // backward scratch: dm then da, db, W3ᵀ db
  Workspace m_infer;            // forwardInference without a Workspace
};

template <class S>
void SwiGluBranch<S>::init(Rng& rng) {
  m_fc1.init(rng);
  m_fc2.init(rng);
  m_fc3.init(rng);
}

template <class S>
void SwiGluBranch<S>::forward(const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H) {
  run(*this, "ddl::SwiGluBranch::forward", C, layout, H, m_acts);
  m_N = C.cols();
}

template <class S>
void SwiGluBranch<S>::forwardInference(const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H) {
  forwardInference(C, layout, H, m_infer);
}

template <class S>
void SwiGluBranch<S>::forwardInference(const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H,
                                       Workspace& ws) const {
  run(*this, "ddl::SwiGluBranch::forwardInference", C, layout, H, ws);
}

template <class S>
template <class Self, class Store>
void SwiGluBranch<S>::run(Self& self, const char* fn, const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout,
                          MatX<S>& H, Store& st) {
  self.checkInput(fn, C, layout);
  if constexpr (std::is_const<Self>::value) {
    self.m_fc1.forwardInference(C, st.a, st.fc1);
    self.m_fc3.forwardInference(C, st.b, st.fc3);
    gate(st.a, st.b, st.a);
    self.m_fc2.forwardInference(st.a, H, st.fc2);
  } else {
    requireNoAlias(fn, "C", C, "H", H);  // fc1 and fc3 keep views of C
    self.m_fc1.forward(C, st.a);
    self.m_fc3.forward(C, st.b);
    gate(st.a, st.b, st.m);
    self.m_fc2.forward(st.m, H);
  }
}

template <class S>
void SwiGluBranch<S>::backward(const Eigen::Ref<const MatX<S>>& dH, MatX<S>& dC) {
  const char* fn = "ddl::SwiGluBranch::backward";
  if (m_N < 0) throw Error(message(fn, "called before forward"));
  checkShape(fn, "dH", dH, m_d, m_N);
  m_fc2.backward(dH, m_dA);  // dm, turned into da in place below
  m_dB.resize(m_hidden, m_N);
  detail::forColumnRanges(m_hidden, m_N, [&](Index j0, Index n) {
    gateBackwardRange(m_acts.a.middleCols(j0, n), m_acts.b.middleCols(j0, n), m_dA.middleCols(j0, n),
                      m_dB.middleCols(j0, n));
  });
  m_fc1.backward(m_dA, dC);
  m_fc3.backward(m_dB, m_dC3);
  dC += m_dC3;
}

template <class S>
Index SwiGluBranch<S>::checkedHidden(Index d, const DeltaBlockBranchOptions& opt) {
  const char* fn = "ddl::SwiGluBranch";
  require(d >= 1, fn, "d must be >= 1, got ", d);
  require(opt.hidden >= 0, fn, "hidden must be >= 0 (0 means floor(8 d / 3)), got ", opt.hidden);
  require(opt.activation == Activation::SiLU, fn, "the gate of SwiGLU is silu, got activation ",
          toString(opt.activation));
  return opt.hidden > 0 ? opt.hidden : defaultHidden(d);
}

template <class S>
void SwiGluBranch<S>::checkInput(const char* fn, const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout) const {
  if (C.rows() != m_d || C.cols() != layout.tokens())
    throw ShapeError(message(fn, "C has shape ", shapeOf(C), ", expected (", m_d, ", ", layout.tokens(),
                             ") for the layout ", toString(layout)));
}

template <class S>
void SwiGluBranch<S>::gate(const MatX<S>& A, const MatX<S>& B, MatX<S>& M) {
  M.resize(A.rows(), A.cols());  // a no-op when M is A
  detail::forColumnRanges(A.rows(), A.cols(), [&](Index j0, Index n) {
    const auto a = A.middleCols(j0, n).array();
    M.middleCols(j0, n).array() = a * a.logistic() * B.middleCols(j0, n).array();
  });
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class SwiGluBranch<float>;
extern template class SwiGluBranch<double>;
#endif

}  // namespace ddl
