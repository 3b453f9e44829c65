#pragma once
// ddl/nn/blocks/delta_transformer_block.hpp: one block of the DDL Transformer (docs/spec.md §8): two Delta
// sublayers, causal self-attention then SwiGLU, each the rewrite of docs/spec.md §1-§3 with h = the
// sublayer's output (k-Map):
//   for s in (attn, mlp):
//     x_in = X (dv = 1) | compress(X) (dv > 1; one compressor per block, applied once per sublayer)
//     c = RMSNorm_s(x_in);  h = F_s(c);  X <- rewrite_s(X, x_in, c, h)
// With ResidualKind::Additive and dv = 1 this is exactly a pre-norm GPT block (x + attn(norm x), then
// x + mlp(norm x)), so the baseline is one option.
// State X: (d, dv*N), N = B*T under the layout sequence(B, T), value channel j = X.middleCols(j*N, N).
// The compressor is CC (per token, nn/blocks/compressor.hpp) or TC (over tokens, nn/blocks/token_compressor.hpp).
// Parameter names: compress.* (dv > 1), attn_norm.weight, attn.* (nn/blocks/causal_self_attention.hpp),
// attn_delta.* (nn/blocks/delta_residual.hpp), mlp_norm.weight, mlp.fc{1,2,3}.weight (nn/blocks/swiglu_branch.hpp),
// mlp_delta.*.
// The compressor's two applications keep separate caches and run backward in reverse order (docs/
// decisions.md, "Modules applied more than once per step").
#include <string>
#include <utility>

#include "ddl/core/alias.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/causal_self_attention.hpp"
#include "ddl/nn/blocks/compressor.hpp"
#include "ddl/nn/blocks/delta_block.hpp"
#include "ddl/nn/blocks/delta_residual.hpp"
#include "ddl/nn/layers/rms_norm.hpp"
#include "ddl/nn/blocks/swiglu_branch.hpp"
#include "ddl/nn/blocks/token_compressor.hpp"

namespace ddl {

// How a block reads its expanded state into the sublayers' input (dv > 1).
enum class StateCompressorKind {
  PerToken,    // CC: x_in[i] = sum_j W[i, j] X_j[i] at the current token (nn/blocks/compressor.hpp)
  OverTokens,  // TC: causal depthwise conv over tokens on every (i, j) channel, then a read vector over dv
};
inline const char* toString(StateCompressorKind k) { return k == StateCompressorKind::PerToken ? "cc" : "tc"; }
inline StateCompressorKind parseStateCompressorKind(const std::string& s) {
  if (s == "cc") return StateCompressorKind::PerToken;
  if (s == "tc") return StateCompressorKind::OverTokens;
  throw ValueError(message("ddl::parseStateCompressorKind", "unknown value '", s, "', expected one of cc, tc"));
}

// What one block needs to know (DeltaLMConfig::blockConfig() fills it from the model's configuration).
struct DeltaTransformerBlockConfig {
  Index d = 0, dv = 1, heads = 1;
  Index hidden = 0;  // SwiGLU hidden width, resolved (>= 1)
  double ropeBase = 10000;
  bool qkNorm = true;
  StateCompressorKind compressor = StateCompressorKind::PerToken;
  Index convKernel = 4;  // TC
  DeltaBlockOptions block;  // residual options, norm eps, CC form
};

template <class S>
class DeltaTransformerBlock {
 public:
  explicit DeltaTransformerBlock(const DeltaTransformerBlockConfig& cfg)
      : m_d(validated(cfg).d), m_dv(cfg.dv), m_overTokens(cfg.dv > 1 && cfg.compressor == StateCompressorKind::OverTokens),
        m_compress(cfg.d, cfg.dv, cfg.block.compressor, cfg.block.compressorKernel),
        m_tc(cfg.d, cfg.dv, cfg.convKernel),
        m_attn(cfg.d, cfg.dv, cfg.block, CausalSelfAttention<S>(attentionConfig(cfg))),
        m_mlp(cfg.d, cfg.dv, cfg.block, SwiGluBranch<S>(cfg.d, DeltaBlockBranchOptions{cfg.hidden, Activation::SiLU})) {}

  // The modules' own initialisation (torch.nn defaults, gate bias logit(beta0/2), gains 1); DeltaLM
  // then redraws the matrices as docs/spec.md §8 prescribes. Draw order: attention, its residual, SwiGLU,
  // its residual.
  void init(Rng& rng);

  // X: (d, dv*N) with N = layout.tokens(), layout = sequence(B, T) -> Y: (d, dv*N). Keeps views of X
  // and of its own activations for backward: X must stay alive and unchanged until then. Y must not
  // alias X.
  void forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y);

  // Same Y as forward, bit for bit; writes none of the caches backward reads.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y);

  // dY: (d, dv*N) of the last forward -> dX: (d, dv*N) overwritten; parameter gradients accumulate.
  // dX must not alias dY.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX);

  // Incremental decoding of one sequence: the attention's keys and values of the positions so far.
  // With the TC compressor also the last K states each sublayer's compressor read.
  struct DecodeState {
    typename CausalSelfAttention<S>::DecodeCache attention;
    typename TokenCompressor<S>::StepCache attnTc, mlpTc;
  };
  // Empties state for up to `capacity` positions (allocates; the steps then allocate nothing).
  void startDecode(DecodeState& state, Index capacity) const;

  // The next position of the sequence: Xt (d, dv) its state -> Yt (d, dv), equal (to rounding) to that
  // token's columns of forwardInference over the whole sequence so far. Touches no training cache.
  void forwardStep(const Eigen::Ref<const MatX<S>>& Xt, DecodeState& state, MatX<S>& Yt);

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    if (m_overTokens)
      m_tc.visitParams(joinName(prefix, "compress"), f);
    else if (m_dv > 1)
      m_compress.visitParams(joinName(prefix, "compress"), f);
    m_attn.norm.visitParams(joinName(prefix, "attn_norm"), f);
    m_attn.branch.visitParams(joinName(prefix, "attn"), f);
    m_attn.delta.visitParams(joinName(prefix, "attn_delta"), f);
    m_mlp.norm.visitParams(joinName(prefix, "mlp_norm"), f);
    m_mlp.branch.visitParams(joinName(prefix, "mlp"), f);
    m_mlp.delta.visitParams(joinName(prefix, "mlp_delta"), f);
  }

  const DeltaResidual<S>& attentionResidual() const { return m_attn.delta; }
  const DeltaResidual<S>& mlpResidual() const { return m_mlp.delta; }
  const CausalSelfAttention<S>& attention() const { return m_attn.branch; }
  // The state between the two sublayers in the last forward: (d, dv*N).
  const MatX<S>& middle() const { return m_mid; }
  Index dim() const { return m_d; }
  Index valueChannels() const { return m_dv; }

 private:
  // One Delta sublayer: its norm, branch and rewrite, the compressor application it records and the
  // activations backward reads.
  template <class Branch>
  struct Sublayer {
    Sublayer(Index d, Index dv, const DeltaBlockOptions& opt, Branch&& b)
        : norm(d, opt.normEps), branch(std::move(b)), delta(d, dv, opt.residual) {}
    RmsNorm<S> norm;
    Branch branch;
    DeltaResidual<S> delta;
    typename Compressor<S>::Cache compressCache;    // CC's record of this sublayer's application
    typename TokenCompressor<S>::Cache tcCache;     // TC's
    MatX<S> xin, c, h;                              // forward (dv = 1: x_in is the state itself)
    MatX<S> inferXin, inferC, inferH;               // forwardInference
    MatX<S> dXin, dC, dH, dTmp, dXc;                // backward
  };

  static const DeltaTransformerBlockConfig& validated(const DeltaTransformerBlockConfig& cfg);
  static CausalSelfAttentionConfig attentionConfig(const DeltaTransformerBlockConfig& cfg);

  void checkInput(const char* fn, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout) const;

  template <class Branch>
  void runForward(Sublayer<Branch>& s, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
    if (m_dv == 1) {
      s.norm.forward(X, s.c);
      s.branch.forward(s.c, layout, s.h);
      s.delta.forward(X, X, s.c, s.h, Y);
    } else {
      if (m_overTokens)
        m_tc.forward(X, layout, s.xin, s.tcCache);
      else
        m_compress.forward(X, s.xin, s.compressCache);
      s.norm.forward(s.xin, s.c);
      s.branch.forward(s.c, layout, s.h);
      s.delta.forward(X, s.xin, s.c, s.h, Y);
    }
  }

  template <class Branch>
  void runInference(Sublayer<Branch>& s, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
    if (m_dv == 1) {
      s.norm.forwardInference(X, s.inferC);
      s.branch.forwardInference(s.inferC, layout, s.inferH);
      s.delta.forwardInference(X, X, s.inferC, s.inferH, Y);
    } else {
      if (m_overTokens)
        m_tc.forwardInference(X, layout, s.inferXin);
      else
        m_compress.forwardInference(X, s.inferXin);
      s.norm.forwardInference(s.inferXin, s.inferC);
      s.branch.forwardInference(s.inferC, layout, s.inferH);
      s.delta.forwardInference(X, s.inferXin, s.inferC, s.inferH, Y);
    }
  }

  // One position through a sublayer with forwardInference's arithmetic; branch(c, h) computes h.
  template <class Branch, class StepBranch>
  void stepSublayer(Sublayer<Branch>& s, const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y,
                    typename TokenCompressor<S>::StepCache& tc, StepBranch&& branch) {
    if (m_dv == 1) {
      s.norm.forwardInference(X, s.inferC);
      branch(s.inferC, s.inferH);
      s.delta.forwardInference(X, X, s.inferC, s.inferH, Y);
    } else {
      if (m_overTokens)
        m_tc.forwardStep(X, tc, s.inferXin);
      else
        m_compress.forwardInference(X, s.inferXin);
      s.norm.forwardInference(s.inferXin, s.inferC);
      branch(s.inferC, s.inferH);
      s.delta.forwardInference(X, s.inferXin, s.inferC, s.inferH, Y);
    }
  }

  template <class Branch>
  void runBackward(Sublayer<Branch>& s, const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) {
    s.delta.backward(dY, dX, s.dXin, s.dC, s.dH);
    s.branch.backward(s.dH, s.dTmp);
    s.dC += s.dTmp;
    s.norm.backward(s.dC, s.dTmp);
    s.dXin += s.dTmp;
    if (m_dv == 1) {
      dX += s.dXin;
    } else {
      if (m_overTokens)
        m_tc.backward(s.dXin, s.dXc, s.tcCache);
      else
        m_compress.backward(s.dXin, s.dXc, s.compressCache);
      dX += s.dXc;
    }
  }

  Index m_d, m_dv;
  bool m_overTokens;          // TC (dv > 1); else CC
  Compressor<S> m_compress;   // CC, dv > 1
  TokenCompressor<S> m_tc;    // TC, dv > 1
  Sublayer<CausalSelfAttention<S>> m_attn;
  Sublayer<SwiGluBranch<S>> m_mlp;
  MatX<S> m_mid, m_inferMid, m_dMid;  // the state after the attention sublayer; its gradient
  MatX<S> m_stepMid;                  // the same for one decoded position
};

template <class S>
void DeltaTransformerBlock<S>::init(Rng& rng) {
  m_attn.branch.init(rng);
  m_attn.delta.init(rng);
  m_mlp.branch.init(rng);
  m_mlp.delta.init(rng);
}

template <class S>
void DeltaTransformerBlock<S>::forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
  const char* fn = "ddl::DeltaTransformerBlock::forward";
  requireNoAlias(fn, "X", X, "Y", Y);
  checkInput(fn, X, layout);
  runForward(m_attn, X, layout, m_mid);
  runForward(m_mlp, m_mid, layout, Y);
}

template <class S>
void DeltaTransformerBlock<S>::forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout,
                                                MatX<S>& Y) {
  const char* fn = "ddl::DeltaTransformerBlock::forwardInference";
  requireNoAlias(fn, "X", X, "Y", Y);
  checkInput(fn, X, layout);
  runInference(m_attn, X, layout, m_inferMid);
  runInference(m_mlp, m_inferMid, layout, Y);
}

template <class S>
void DeltaTransformerBlock<S>::backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) {
  requireNoAlias("ddl::DeltaTransformerBlock::backward", "dY", dY, "dX", dX);
  runBackward(m_mlp, dY, m_dMid);
  runBackward(m_attn, m_dMid, dX);
}

template <class S>
void DeltaTransformerBlock<S>::startDecode(DecodeState& state, Index capacity) const {
  m_attn.branch.startDecode(state.attention, capacity);
  if (m_overTokens) {
    m_tc.startStep(state.attnTc);
    m_tc.startStep(state.mlpTc);
  }
}

template <class S>
void DeltaTransformerBlock<S>::forwardStep(const Eigen::Ref<const MatX<S>>& Xt, DecodeState& state, MatX<S>& Yt) {
  const char* fn = "ddl::DeltaTransformerBlock::forwardStep";
  checkShape(fn, "Xt", Xt, m_d, m_dv);
  requireNoAlias(fn, "Xt", Xt, "Yt", Yt);
  stepSublayer(m_attn, Xt, m_stepMid, state.attnTc,
               [&](const MatX<S>& c, MatX<S>& h) { m_attn.branch.forwardStep(c, state.attention, h); });
  const TokenLayout one = TokenLayout::sequence(1, 1);
  stepSublayer(m_mlp, m_stepMid, Yt, state.mlpTc,
               [&](const MatX<S>& c, MatX<S>& h) { m_mlp.branch.forwardInference(c, one, h); });
}

template <class S>
const DeltaTransformerBlockConfig& DeltaTransformerBlock<S>::validated(const DeltaTransformerBlockConfig& cfg) {
  const char* fn = "ddl::DeltaTransformerBlock";
  require(cfg.d >= 1 && cfg.dv >= 1 && cfg.hidden >= 1 && cfg.convKernel >= 1, fn,
          "d, dv, hidden and convKernel must be >= 1, got d = ", cfg.d, ", dv = ", cfg.dv, ", hidden = ", cfg.hidden,
          ", convKernel = ", cfg.convKernel);
  require(cfg.block.residual.direction == DirectionSource::BranchOutput, fn,
          "the sublayers give the directions (k-Map); direction '", toString(cfg.block.residual.direction),
          "' is for DeltaBlock");
  cfg.block.residual.validate(fn);
  return cfg;
}

template <class S>
CausalSelfAttentionConfig DeltaTransformerBlock<S>::attentionConfig(const DeltaTransformerBlockConfig& cfg) {
  CausalSelfAttentionConfig a;
  a.d = cfg.d;
  a.heads = cfg.heads;
  a.ropeBase = cfg.ropeBase;
  a.qkNorm = cfg.qkNorm;
  a.normEps = cfg.block.normEps;
  return a;
}

template <class S>
void DeltaTransformerBlock<S>::checkInput(const char* fn, const Eigen::Ref<const MatX<S>>& X,
                                          const TokenLayout& layout) const {
  if (layout.height != 1 || layout.width != 1)
    throw ShapeError(message(fn, "the block needs a sequence layout, got ", toString(layout)));
  if (X.rows() != m_d || X.cols() != m_dv * layout.tokens())
    throw ShapeError(message(fn, "X has shape ", shapeOf(X), ", expected (", m_d, ", ", m_dv, "*N) with N = ",
                             layout.tokens(), " tokens of the layout ", toString(layout)));
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class DeltaTransformerBlock<float>;
extern template class DeltaTransformerBlock<double>;
#endif

}  // namespace ddl
