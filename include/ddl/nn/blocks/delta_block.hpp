#pragma once
// ddl/nn/blocks/delta_block.hpp: one residual block, generic over its branch F (docs/decisions.md, "One block,
// any branch"):
//   x_in = X (dv = 1) | CC(X) (dv > 1);  c = RMSNorm(x_in);  h = F(c);  X' = rewrite(X, x_in, c, h)
// The compress / norm / residual plumbing is written once (DeltaSublayer, nn/blocks/delta_sublayer.hpp,
// shared with DeltaTransformerBlock); the branch is MlpBranch (fc1 -> act -> fc2, vectors), ConvBranch
// (conv 3x3 -> act -> conv 3x3, images) or anything with the branch contract of mlp_branch.hpp. The token layout passed to forward tells a token-mixing branch what the
// columns are; the compressor, the norm and the rewrite are per token and only need its count.
// With ResidualKind::Additive this is exactly the plain pre-norm residual block X' = X + h, so a
// comparison against the baseline changes one option. Parameter names: compress.* (dv > 1), norm.weight,
// <branch name>.* (mlp.fc1.{weight,bias}, mlp.fc2.{weight,bias} for MlpBranch), delta.* (see
// delta_residual.hpp).
#include <optional>
#include <string>

#include "ddl/core/alias.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/activation.hpp"
#include "ddl/nn/layers/forward_mode.hpp"
#include "ddl/nn/blocks/compressor.hpp"
#include "ddl/nn/blocks/delta_residual.hpp"
#include "ddl/nn/blocks/delta_sublayer.hpp"
#include "ddl/nn/blocks/mlp_branch.hpp"
#include "ddl/nn/layers/rms_norm.hpp"

namespace ddl {

struct DeltaBlockOptions {
  Index hidden = 0;  // branch hidden width (MLP units or conv channels); 0 means 4 d
  Activation activation = Activation::GELU;
  double normEps = 1e-5;
  CompressorKind compressor = CompressorKind::Structured;  // dv > 1 only
  Index compressorKernel = 4;                   // Structured: taps per feature (the authors' default)
  std::optional<double> compressorReadInit;     // Structured CC and TC: the read vector's start; unset: 1/dv
  DeltaResidualOptions residual;

  DeltaBlockBranchOptions branch() const { return DeltaBlockBranchOptions{hidden, activation}; }
};

template <class S, class Branch = MlpBranch<S>>
class DeltaBlock {
 public:
  DeltaBlock(Index d, Index dv, const DeltaBlockOptions& opt)
      : m_d(checked(d, dv, opt)), m_dv(dv), m_compress(d, dv, opt.compressor, opt.compressorKernel, opt.compressorReadInit),
        m_sub(d, dv, opt.normEps, opt.residual, Branch(d, opt.branch())) {}

  // Seeded initialisation; draw order: the branch (MlpBranch: fc1, fc2), the residual's params, the
  // structured compressor's kernel (dv > 1).
  void init(Rng& rng);

  // X: (d, dv*N) with N = layout.tokens() -> Y: (d, dv*N). Y must not alias X.
  void forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
    run("ddl::DeltaBlock::forward", X, layout, Y, m_acts, ForwardMode::Train);
  }

  // Vector tokens: X: (d, dv*N), one token per column of each value channel.
  void forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y) {
    forward(X, vectorLayout("ddl::DeltaBlock::forward", X), Y);
  }

  // Same Y as forward, bit for bit; writes none of the activations backward reads (it has buffers of
  // its own, so steady state allocates nothing). The residual's diagnostics then describe this call.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
    run("ddl::DeltaBlock::forwardInference", X, layout, Y, m_inferActs, ForwardMode::Inference);
  }

  void forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y) {
    forwardInference(X, vectorLayout("ddl::DeltaBlock::forwardInference", X), Y);
  }

  // dY: (d, dv*N) -> dX: (d, dv*N) overwritten; parameter gradients accumulate.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX);

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    if (m_dv > 1) m_compress.visitParams(joinName(prefix, "compress"), f);
    m_sub.norm.visitParams(joinName(prefix, "norm"), f);
    m_sub.branch.visitParams(joinName(prefix, Branch::name()), f);
    m_sub.delta.visitParams(joinName(prefix, "delta"), f);
  }

  const DeltaResidual<S>& residual() const { return m_sub.delta; }
  const Branch& branch() const { return m_sub.branch; }
  Index hidden() const { return m_sub.branch.hidden(); }
  Index dim() const { return m_d; }
  Index valueChannels() const { return m_dv; }

 private:
  // What one forward computes and backward reads (the branch and the residual keep views of them).
  struct Activations {
    MatX<S> xin;  // (d, N) the branch input CC(X); dv > 1 only (for dv = 1 it is X itself)
    MatX<S> c;    // (d, N) RMSNorm(x_in)
    MatX<S> h;    // (d, N) the branch output F(c)
  };

  static Index checked(Index d, Index dv, const DeltaBlockOptions& opt);

  // The forward of both modes; fn names the public caller in errors.
  void run(const char* fn, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y,
           Activations& a, ForwardMode mode);

  void checkInput(const char* fn, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout) const;
  TokenLayout vectorLayout(const char* fn, const Eigen::Ref<const MatX<S>>& X) const;

  Index m_d, m_dv;
  Compressor<S> m_compress;
  DeltaSublayer<S, Branch> m_sub;  // norm, branch, rewrite
  Activations m_acts;       // of the last forward, read by backward
  Activations m_inferActs;  // of the last forwardInference
  SublayerScratch<S> m_scratch;  // backward's
};

template <class S, class Branch>
void DeltaBlock<S, Branch>::init(Rng& rng) {
  m_sub.branch.init(rng);
  m_sub.delta.init(rng);
  if (m_dv > 1) m_compress.init(rng);  // last: a free compressor draws nothing, so its nets keep their draws
}

template <class S, class Branch>
void DeltaBlock<S, Branch>::run(const char* fn, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout,
                                MatX<S>& Y, Activations& a, ForwardMode mode) {
  requireNoAlias(fn, "X", X, "Y", Y);
  checkInput(fn, X, layout);
  m_sub.forward(mode, X, layout, Y, a.xin, a.c, a.h,
                [&](const Eigen::Ref<const MatX<S>>& x, MatX<S>& xin) { forwardAs(mode, m_compress, x, xin); });
}

template <class S, class Branch>
void DeltaBlock<S, Branch>::backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) {
  m_sub.backward(dY, dX, m_scratch, [&](const MatX<S>& dXin, MatX<S>& dXc) { m_compress.backward(dXin, dXc); });
}

template <class S, class Branch>
Index DeltaBlock<S, Branch>::checked(Index d, Index dv, const DeltaBlockOptions& opt) {
  const char* fn = "ddl::DeltaBlock";
  require(d >= 1, fn, "d must be >= 1, got ", d);
  require(dv >= 1, fn, "dv must be >= 1, got ", dv);
  require(opt.hidden >= 0, fn, "hidden must be >= 0 (0 means 4 d), got ", opt.hidden);
  return d;
}

template <class S, class Branch>
void DeltaBlock<S, Branch>::checkInput(const char* fn, const Eigen::Ref<const MatX<S>>& X,
                                       const TokenLayout& layout) const {
  if (X.rows() != m_d || X.cols() != m_dv * layout.tokens())
    throw ShapeError(message(fn, "X has shape ", shapeOf(X), ", expected (", m_d, ", ", m_dv, "*N) with N = ",
                             layout.tokens(), " tokens of the layout ", toString(layout)));
}

template <class S, class Branch>
TokenLayout DeltaBlock<S, Branch>::vectorLayout(const char* fn, const Eigen::Ref<const MatX<S>>& X) const {
  if (X.rows() != m_d || X.cols() % m_dv != 0)
    throw ShapeError(message(fn, "X has shape ", shapeOf(X), ", expected (", m_d, ", ", m_dv, "*N)"));
  return TokenLayout::vectors(X.cols() / m_dv);
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class DeltaBlock<float, MlpBranch<float>>;
extern template class DeltaBlock<double, MlpBranch<double>>;
#endif

}  // namespace ddl
