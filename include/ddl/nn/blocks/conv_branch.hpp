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
class ConvBranch : public TwoLayerBranch<S, Conv2d<S>> {
 public:
  // hidden 0 means d (an image block's branch keeps the width; 4 d would quadruple its cost). Both
  // convolutions are 3x3, stride 1, padding 1.
  ConvBranch(Index d, const DeltaBlockBranchOptions& opt)
      : TwoLayerBranch<S, Conv2d<S>>(d, opt.hidden > 0 ? opt.hidden : d, opt.activation, 3, 1, 1) {}

  static const char* name() { return "conv"; }

  // C: (d, N) -> H: (d, N), N = layout.tokens(). The convolutions check C against the layout.
  void forward(const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H) {
    this->runLayers(C, H, ForwardMode::Train, layout);
  }

  // Same H as forward, bit for bit; keeps nothing backward reads (its activations live in buffers of
  // their own, the hidden one overwritten in place).
  void forwardInference(const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H) {
    this->runLayers(C, H, ForwardMode::Inference, layout);
  }

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    this->m_layer1.visitParams(joinName(prefix, "conv1"), f);
    this->m_layer2.visitParams(joinName(prefix, "conv2"), f);
  }
};

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class ConvBranch<float>;
extern template class ConvBranch<double>;
#endif

}  // namespace ddl
