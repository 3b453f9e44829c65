#pragma once
// ddl/nn/blocks/conv_branch.hpp: the branch F of an image DeltaBlock (docs/spec.md §4): conv 3x3 -> act -> conv 3x3,
// "same" padding, stride 1, so h has c's layout.
//   c: (d, N) pixels as columns, N = layout.tokens() (column (b*H + y)*W + x) -> hidden (hidden, N)
//   -> h: (d, N). Parameter names under the block: conv.conv1.{weight,bias}, conv.conv2.{weight,bias}
//   (weights [out, in, 3, 3] as PyTorch's Conv2d). Satisfies the branch contract of mlp_branch.hpp.
#include <string>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/activation.hpp"
#include "ddl/nn/layers/forward_mode.hpp"
#include "ddl/nn/layers/conv2d.hpp"
#include "ddl/nn/blocks/mlp_branch.hpp"

namespace ddl {

template <class S>
class ConvBranch {
 public:
  // hidden 0 means d (an image block's branch keeps the width; 4 d would quadruple its cost).
  ConvBranch(Index d, const DeltaBlockBranchOptions& opt)
      : m_d(d), m_hidden(opt.hidden > 0 ? opt.hidden : d), m_conv1(d, m_hidden, 3, 1, 1), m_act(opt.activation),
        m_conv2(m_hidden, d, 3, 1, 1) {}

  static const char* name() { return "conv"; }

  // Draw order: conv1, conv2 (torch.nn.Conv2d default).
  void init(Rng& rng);

  // C: (d, N) -> H: (d, N), N = layout.tokens().
  void forward(const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H) {
    run(C, layout, H, m_acts, ForwardMode::Train);
  }

  // Same H as forward, bit for bit; keeps nothing backward reads (its activations live in buffers of
  // their own, the hidden one overwritten in place).
  void forwardInference(const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H) {
    run(C, layout, H, m_inferActs, ForwardMode::Inference);
  }

  // dH: (d, N) -> dC: (d, N) overwritten; parameter gradients accumulate.
  void backward(const Eigen::Ref<const MatX<S>>& dH, MatX<S>& dC);

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    m_conv1.visitParams(joinName(prefix, "conv1"), f);
    m_conv2.visitParams(joinName(prefix, "conv2"), f);
  }

  Index hidden() const { return m_hidden; }

 private:
  // What backward reads of one forward (the layers keep views of them).
  struct Activations {
    MatX<S> pre;  // (hidden, N) conv1(c)
    MatX<S> hid;  // (hidden, N) act(pre); Inference mode writes it into pre instead
  };

  // The forward of both modes (the convolutions check C against the layout).
  void run(const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H, Activations& a,
           ForwardMode mode);

  Index m_d, m_hidden;
  Conv2d<S> m_conv1;
  ActivationLayer<S> m_act;
  Conv2d<S> m_conv2;
  Activations m_acts;       // of the last forward, read by backward
  Activations m_inferActs;  // of the last forwardInference
  MatX<S> m_dHid;
};

template <class S>
void ConvBranch<S>::init(Rng& rng) {
  m_conv1.init(rng);
  m_conv2.init(rng);
}

template <class S>
void ConvBranch<S>::run(const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H, Activations& a,
                        ForwardMode mode) {
  forwardAs(mode, m_conv1, C, layout, a.pre);
  MatX<S>& hid = mode == ForwardMode::Train ? a.hid : a.pre;  // in place: nothing is kept
  forwardAs(mode, m_act, a.pre, hid);
  forwardAs(mode, m_conv2, hid, layout, H);
}

template <class S>
void ConvBranch<S>::backward(const Eigen::Ref<const MatX<S>>& dH, MatX<S>& dC) {
  m_conv2.backward(dH, m_dHid);
  m_act.backward(m_dHid, m_dHid);
  m_conv1.backward(m_dHid, dC);
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class ConvBranch<float>;
extern template class ConvBranch<double>;
#endif

}  // namespace ddl
