#pragma once
// ddl/nn/blocks/step_delta_block.hpp: one block of the depth-as-time net (docs/claims.md, "Models"): a
// Delta block whose branch also reads one step of a sequence,
//   c = RMSNorm(X) + P s;   h = F(c);   X' = rewrite(X, x_in = c, c, h)
// with s step t's input (stepWidth, N) and P a per-block projection (d x stepWidth, no bias). The branch
// output, the gate and the value all come from c (the value head's input x_in is c: the step must reach
// what is written), and the residual kind (delta, write_only, additive) maps X to X'. dv = 1.
// The norm, branch and rewrite are DeltaSublayer's (nn/blocks/delta_sublayer.hpp); only the skeleton
// differs from DeltaBlock's, because c is not a function of X alone.
// Parameter names: step.weight (d, stepWidth), norm.weight, mlp.fc1.*, mlp.fc2.*, delta.*.
#include <string>

#include "ddl/core/alias.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/delta_block.hpp"
#include "ddl/nn/blocks/delta_residual.hpp"
#include "ddl/nn/blocks/delta_sublayer.hpp"
#include "ddl/nn/blocks/mlp_branch.hpp"
#include "ddl/nn/layers/forward_mode.hpp"
#include "ddl/nn/layers/linear.hpp"

namespace ddl {

template <class S>
class StepDeltaBlock {
 public:
  // d >= 1 features, stepWidth >= 1 inputs per step; opt.compressor* are unused (dv = 1).
  StepDeltaBlock(Index d, Index stepWidth, const DeltaBlockOptions& opt)
      : m_d(checked(d, stepWidth, opt)), m_step(stepWidth, d, /*bias=*/false),
        m_sub(d, 1, opt.normEps, opt.residual, MlpBranch<S>(d, opt.branch())) {}

  // The draws every residual kind shares (the step projection, then the branch: fc1, fc2) and the
  // residual's own (gate, value), apart, so that a net can draw all shared parameters first and kinds
  // of one seed start equal where their parameters are the same (docs/claims.md, "Training").
  void initShared(Rng& rng) {
    m_step.init(rng);
    m_sub.branch.init(rng);
  }
  void initResidual(Rng& rng) { m_sub.delta.init(rng); }

  // X: (d, N) the state, S: (stepWidth, N) the step's input -> Y: (d, N). Keeps views of X and S for
  // backward: both must stay alive and unchanged until then. Y must alias neither.
  void forward(const Eigen::Ref<const MatX<S>>& X, const Eigen::Ref<const MatX<S>>& Sx, MatX<S>& Y) {
    run("ddl::StepDeltaBlock::forward", X, Sx, Y, m_acts, ForwardMode::Train);
  }

  // Same Y as forward, bit for bit; writes none of the activations backward reads.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, const Eigen::Ref<const MatX<S>>& Sx, MatX<S>& Y) {
    run("ddl::StepDeltaBlock::forwardInference", X, Sx, Y, m_inferActs, ForwardMode::Inference);
  }

  // dY: (d, N) -> dX: (d, N) overwritten; dS: (stepWidth, N) overwritten when given; parameter
  // gradients accumulate.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX, MatX<S>* dS = nullptr);

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    m_step.visitParams(joinName(prefix, "step"), f);
    visitCellParams(prefix, f);
  }
  // The parameters apart from the step projection: what a tied net shares across its blocks.
  template <class F>
  void visitCellParams(const std::string& prefix, F&& f) {
    m_sub.norm.visitParams(joinName(prefix, "norm"), f);
    m_sub.branch.visitParams(joinName(prefix, MlpBranch<S>::name()), f);
    m_sub.delta.visitParams(joinName(prefix, "delta"), f);
  }
  template <class F>
  void visitStepParams(const std::string& prefix, F&& f) {
    m_step.visitParams(joinName(prefix, "step"), f);
  }

  const DeltaResidual<S>& residual() const { return m_sub.delta; }
  // The evaluation clamp beta <- min(beta, c) of this block (DeltaResidual::setBetaClamp; +inf removes it).
  void setBetaClamp(double c) { m_sub.delta.setBetaClamp(c); }
  Index dim() const { return m_d; }
  Index stepWidth() const { return m_step.weight().value.cols(); }

 private:
  struct Activations {
    MatX<S> ps;  // (d, N) P s
    MatX<S> c;   // (d, N) RMSNorm(X) + P s, the branch input
    MatX<S> h;   // (d, N) the branch output F(c)
  };

  static Index checked(Index d, Index stepWidth, const DeltaBlockOptions& opt) {
    const char* fn = "ddl::StepDeltaBlock";
    require(d >= 1, fn, "d must be >= 1, got ", d);
    require(stepWidth >= 1, fn, "stepWidth must be >= 1, got ", stepWidth);
    require(opt.hidden >= 0, fn, "hidden must be >= 0 (0 means 4 d), got ", opt.hidden);
    return d;
  }

  void run(const char* fn, const Eigen::Ref<const MatX<S>>& X, const Eigen::Ref<const MatX<S>>& Sx, MatX<S>& Y,
           Activations& a, ForwardMode mode) {
    checkShape(fn, "X", X, m_d, -1);
    checkShape(fn, "S", Sx, stepWidth(), X.cols());
    requireNoAlias(fn, "X", X, "Y", Y);
    forwardAs(mode, m_sub.norm, X, a.c);
    forwardAs(mode, m_step, Sx, a.ps);
    a.c += a.ps;
    forwardAs(mode, m_sub.branch, a.c, TokenLayout::vectors(X.cols()), a.h);
    forwardAs(mode, m_sub.delta, X, a.c, a.c, a.h, Y);
  }

  Index m_d;
  Linear<S> m_step;                  // P: (d, stepWidth), no bias
  DeltaSublayer<S, MlpBranch<S>> m_sub;  // norm, branch, rewrite
  Activations m_acts, m_inferActs;
  SublayerScratch<S> m_scratch;
};

template <class S>
void StepDeltaBlock<S>::backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX, MatX<S>* dS) {
  SublayerScratch<S>& s = m_scratch;
  m_sub.delta.backward(dY, dX, s.dXin, s.dC, s.dH);  // dX: the state's direct path
  m_sub.branch.backward(s.dH, s.dTmp);
  s.dC += s.dTmp;
  s.dC += s.dXin;  // the value head reads c as its x_in
  if (dS)
    m_step.backward(s.dC, *dS);
  else
    m_step.backwardParamsOnly(s.dC);
  m_sub.norm.backward(s.dC, s.dTmp);
  dX += s.dTmp;
}

}  // namespace ddl
