#pragma once
// ddl/nn/blocks/mlp_branch.hpp: the branch F of a vector DeltaBlock (docs/spec.md §2): h = fc2(act(fc1(c))).
//   c: (d, N) -> hidden (hidden, N) -> h: (d, N); tokens are independent, so the layout is only checked.
// Parameter names under the block: mlp.fc1.{weight,bias}, mlp.fc2.{weight,bias}.
//
// The branch contract (what DeltaBlock<S, Branch> calls; a conv or attention branch has the same):
//   Branch(d, const DeltaBlockBranchOptions&);   static const char* name();   void init(Rng&);
//   void forward(const Ref<const MatX>& C, const TokenLayout&, MatX& H);   C, H: (d, N)
//   void forwardInference(same);   the same H bit for bit, caching nothing
//   void backward(const Ref<const MatX>& dH, MatX& dC);                    dC overwritten
//   template <class F> void visitParams(prefix, f);   Index hidden() const;
#include <string>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/activation.hpp"
#include "ddl/nn/layers/forward_mode.hpp"
#include "ddl/nn/layers/linear.hpp"

namespace ddl {

// What every branch is built from: its hidden width (0 means 4 d) and activation.
struct DeltaBlockBranchOptions {
  Index hidden = 0;
  Activation activation = Activation::GELU;
};

template <class S>
class MlpBranch {
 public:
  MlpBranch(Index d, const DeltaBlockBranchOptions& opt)
      : m_d(d), m_hidden(opt.hidden > 0 ? opt.hidden : 4 * d), m_fc1(d, m_hidden), m_act(opt.activation),
        m_fc2(m_hidden, d) {
    m_fc2.weight().role = ParamRole::ResidualOutput;
  }

  static const char* name() { return "mlp"; }

  // Draw order: fc1, fc2 (torch.nn.Linear default).
  void init(Rng& rng);

  // C: (d, N) -> H: (d, N); N == layout.tokens().
  void forward(const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H) {
    run("ddl::MlpBranch::forward", C, layout, H, m_acts, ForwardMode::Train);
  }

  // Same H as forward, bit for bit; keeps nothing backward reads (its activations live in buffers of
  // their own, the hidden one overwritten in place).
  void forwardInference(const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H) {
    run("ddl::MlpBranch::forwardInference", C, layout, H, m_inferActs, ForwardMode::Inference);
  }

  // dH: (d, N) -> dC: (d, N) overwritten; parameter gradients accumulate.
  void backward(const Eigen::Ref<const MatX<S>>& dH, MatX<S>& dC);

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    m_fc1.visitParams(joinName(prefix, "fc1"), f);
    m_fc2.visitParams(joinName(prefix, "fc2"), f);
  }

  Index hidden() const { return m_hidden; }

 private:
  // What backward reads of one forward (the layers keep views of them).
  struct Activations {
    MatX<S> pre;  // (hidden, N) fc1(c)
    MatX<S> hid;  // (hidden, N) act(pre); Inference mode writes it into pre instead
  };

  // The forward of both modes; fn names the public caller in errors.
  void run(const char* fn, const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H,
           Activations& a, ForwardMode mode);

  Index m_d, m_hidden;
  Linear<S> m_fc1;
  ActivationLayer<S> m_act;
  Linear<S> m_fc2;
  Activations m_acts;       // of the last forward, read by backward
  Activations m_inferActs;  // of the last forwardInference
  MatX<S> m_dHid;
};

template <class S>
void MlpBranch<S>::init(Rng& rng) {
  m_fc1.init(rng);
  m_fc2.init(rng);
}

template <class S>
void MlpBranch<S>::run(const char* fn, const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H,
                       Activations& a, ForwardMode mode) {
  if (C.cols() != layout.tokens())
    throw ShapeError(message(fn, "C has ", C.cols(), " columns but the layout ", toString(layout), " has ",
                             layout.tokens(), " tokens"));
  forwardAs(mode, m_fc1, C, a.pre);
  MatX<S>& hid = mode == ForwardMode::Train ? a.hid : a.pre;  // in place: nothing is kept
  forwardAs(mode, m_act, a.pre, hid);
  forwardAs(mode, m_fc2, hid, H);
}

template <class S>
void MlpBranch<S>::backward(const Eigen::Ref<const MatX<S>>& dH, MatX<S>& dC) {
  m_fc2.backward(dH, m_dHid);
  m_act.backward(m_dHid, m_dHid);
  m_fc1.backward(m_dHid, dC);
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class MlpBranch<float>;
extern template class MlpBranch<double>;
#endif

}  // namespace ddl
