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
#include "ddl/nn/blocks/two_layer_branch.hpp"

namespace ddl {

// What every branch is built from: its hidden width (0 means 4 d) and activation.
struct DeltaBlockBranchOptions {
  Index hidden = 0;
  Activation activation = Activation::GELU;
};

template <class S>
class MlpBranch : public TwoLayerBranch<S, Linear<S>> {
 public:
  MlpBranch(Index d, const DeltaBlockBranchOptions& opt)
      : TwoLayerBranch<S, Linear<S>>(d, opt.hidden > 0 ? opt.hidden : 4 * d, opt.activation) {
    this->m_layer2.weight().role = ParamRole::ResidualOutput;
  }

  static const char* name() { return "mlp"; }

  // C: (d, N) -> H: (d, N); N == layout.tokens().
  void forward(const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H) {
    run("ddl::MlpBranch::forward", C, layout, H, ForwardMode::Train);
  }

  // Same H as forward, bit for bit; keeps nothing backward reads (its activations live in buffers of
  // their own, the hidden one overwritten in place).
  void forwardInference(const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H) {
    run("ddl::MlpBranch::forwardInference", C, layout, H, ForwardMode::Inference);
  }

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    this->m_layer1.visitParams(joinName(prefix, "fc1"), f);
    this->m_layer2.visitParams(joinName(prefix, "fc2"), f);
  }

 private:
  // The forward of both modes, after checking C against the layout; fn names the public caller in errors.
  void run(const char* fn, const Eigen::Ref<const MatX<S>>& C, const TokenLayout& layout, MatX<S>& H,
           ForwardMode mode) {
    if (C.cols() != layout.tokens())
      throw ShapeError(message(fn, "C has ", C.cols(), " columns but the layout ", toString(layout), " has ",
                               layout.tokens(), " tokens"));
    this->runLayers(C, H, mode);
  }
};

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class MlpBranch<float>;
extern template class MlpBranch<double>;
#endif

}  // namespace ddl
