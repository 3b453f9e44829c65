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
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "ddl/core/alias.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/enum_names.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/swap_each.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/forward_mode.hpp"
#include "ddl/nn/blocks/attention_options.hpp"
#include "ddl/nn/blocks/causal_self_attention.hpp"
#include "ddl/nn/blocks/compressor.hpp"
#include "ddl/nn/blocks/delta_block.hpp"
#include "ddl/nn/blocks/delta_residual.hpp"
#include "ddl/nn/blocks/delta_sublayer.hpp"
#include "ddl/nn/layers/rms_norm.hpp"
#include "ddl/nn/blocks/swiglu_branch.hpp"
#include "ddl/nn/blocks/token_compressor.hpp"

namespace ddl {

// How a block reads its expanded state into the sublayers' input (dv > 1).
enum class StateCompressorKind {
  PerToken,    // CC: x_in[i] = sum_j W[i, j] X_j[i] at the current token (nn/blocks/compressor.hpp)
  OverTokens,  // TC: causal depthwise conv over tokens on every (i, j) channel, then a read vector over dv
};
inline constexpr EnumName<StateCompressorKind> kStateCompressorNames[] = {{StateCompressorKind::PerToken, "cc"},
                                                                           {StateCompressorKind::OverTokens, "tc"}};
inline const char* toString(StateCompressorKind k) { return nameOf(kStateCompressorNames, k); }
inline StateCompressorKind parseStateCompressorKind(const std::string& s) {
  return parseEnumName(kStateCompressorNames, s, "ddl::parseStateCompressorKind", "value");
}

// What one block needs to know (DeltaLMConfig::blockConfig() fills it from the model's configuration).
struct DeltaTransformerBlockConfig {
  Index d = 0, dv = 1, heads = 1;
  Index hidden = 0;  // SwiGLU hidden width, resolved (>= 1)
  double ropeBase = 10000;
  bool qkNorm = true;
  StateCompressorKind compressor = StateCompressorKind::PerToken;
  Index convKernel = 4;  // TC (the authors' ddl_state_shortconv_kernel_size of their TC files)
  DeltaBlockOptions block;  // residual options, norm eps, CC form

  // ---- the authors' attention options (nn/blocks/attention_options.hpp) ----
  AttentionOptions attention;
};

template <class S>
class DeltaTransformerBlock {
 public:
  explicit DeltaTransformerBlock(const DeltaTransformerBlockConfig& cfg)
      : m_d(validated(cfg).d), m_dv(cfg.dv), m_overTokens(cfg.dv > 1 && cfg.compressor == StateCompressorKind::OverTokens),
        m_attn(cfg.d, cfg.dv, cfg.block.normEps, cfg.block.residual, CausalSelfAttention<S>(attentionConfig(cfg))),
        m_mlp(cfg.d, cfg.dv, cfg.block.normEps, cfg.block.residual,
              SwiGluBranch<S>(cfg.d, DeltaBlockBranchOptions{cfg.hidden, Activation::SiLU})) {
    if (m_overTokens)
      m_tc.emplace(cfg.d, cfg.dv, cfg.convKernel, cfg.block.compressorReadInit);
    else if (cfg.dv > 1)
      m_compress.emplace(cfg.d, cfg.dv, cfg.block.compressor, cfg.block.compressorKernel, cfg.block.compressorReadInit);
  }

  // The modules' own initialisation (torch.nn defaults, gate bias logit(beta0/2), gains 1); DeltaLM
  // then redraws the matrices as docs/spec.md §8 prescribes. Draw order: attention, its residual, SwiGLU,
  // its residual.
  void init(Rng& rng);

  // The value heads' biases as torch.nn.Linear starts them, U(+-1/sqrt(d)) (DeltaLM's init "authors"):
  // the attention's residual, then SwiGLU's.
  void initValueBiasesAsLinear(Rng& rng) {
    m_attn.delta.initValueBiasAsLinear(rng);
    m_mlp.delta.initValueBiasAsLinear(rng);
  }

  // What backward reads of one sublayer in the last forward, N = layout.tokens().
  struct SublayerActivations {
    typename Compressor<S>::Cache cc;       // CC's record of this sublayer's application (dv > 1)
    typename TokenCompressor<S>::Cache tc;  // TC's
    MatX<S> xin;  // (d, N) the compressed state (dv > 1; for dv = 1 x_in is the state itself)
    MatX<S> c;    // (d, N) RMSNorm(x_in); the branch and the rewrite keep views of it
    MatX<S> h;    // (d, N) the branch output, when the rewrite's backward reads it (else m_h holds it)
  };
  struct Activations {
    SublayerActivations attn, mlp;
    MatX<S> mid;  // (d, dv*N) the state after the attention sublayer
  };

  // X: (d, dv*N) with N = layout.tokens(), layout = sequence(B, T) -> Y: (d, dv*N). Keeps views of X
  // and its Activations for backward: X must stay alive and unchanged until then. Y must not alias X.
  void forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y);

  // Same Y as forward, bit for bit; writes none of the caches backward reads.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y);

  // dY: (d, dv*N) of the last forward -> dX: (d, dv*N) overwritten; parameter gradients accumulate.
  // dX must not alias dY.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX);

  // Incremental decoding of one sequence: the attention's keys and values of the positions so far,
  // with TC the last K states each sublayer's compressor read, the workspaces of the rewrites and CC,
  // and one position's scratch: a decoder writes only its own state.
  struct DecodeState {
    typename CausalSelfAttention<S>::DecodeCache attention;
    typename TokenCompressor<S>::StepCache attnTc, mlpTc;
    typename DeltaResidual<S>::Workspace attnDelta, mlpDelta;
    typename Compressor<S>::Workspace compress;  // CC (dv > 1)
    typename SwiGluBranch<S>::Workspace mlp;
    MatX<S> mid, xin, c, h;  // one position: (d, dv), (d, 1) x 3
  };
  // Empties state for up to `capacity` positions (allocates the first time; the first step sizes the
  // scratch). Reads the block only.
  void startDecode(DecodeState& state, Index capacity) const;

  // The next position of the sequence: Xt (d, dv) its state -> Yt (d, dv), equal (to rounding) to that
  // token's columns of forwardInference over the whole sequence so far. Reads the block only (callers
  // on several threads may share it, each with its own state).
  void forwardStep(const Eigen::Ref<const MatX<S>>& Xt, DecodeState& state, MatX<S>& Yt) const;

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    if (m_overTokens)
      m_tc->visitParams(joinName(prefix, "compress"), f);
    else if (m_dv > 1)
      m_compress->visitParams(joinName(prefix, "compress"), f);
    m_attn.norm.visitParams(joinName(prefix, "attn_norm"), f);
    m_attn.branch.visitParams(joinName(prefix, "attn"), f);
    m_attn.delta.visitParams(joinName(prefix, "attn_delta"), f);
    m_mlp.norm.visitParams(joinName(prefix, "mlp_norm"), f);
    m_mlp.branch.visitParams(joinName(prefix, "mlp"), f);
    m_mlp.delta.visitParams(joinName(prefix, "mlp_delta"), f);
  }

  // Exchanges every buffer whose contents are dead between calls (backward's scratch, the attention's
  // per-thread scratch, the product workspaces) with other's, a block of the same configuration. The
  // blocks of a model run one after another, so they share one set: the model moves it to the block
  // about to run (docs/decisions.md, "Scratch shared between blocks"). Parameters and Activations stay.
  void swapScratch(DeltaTransformerBlock& other) noexcept {
    swapEach(std::tie(m_h, m_dMid, m_scratch, m_attn, m_mlp),
             std::tie(other.m_h, other.m_dMid, other.m_scratch, other.m_attn, other.m_mlp));
  }

  const DeltaResidual<S>& attentionResidual() const { return m_attn.delta; }
  const DeltaResidual<S>& mlpResidual() const { return m_mlp.delta; }
  const CausalSelfAttention<S>& attention() const { return m_attn.branch; }
  // The state between the two sublayers in the last forward: (d, dv*N).
  const MatX<S>& middle() const { return m_acts.mid; }
  Index dim() const { return m_d; }
  Index valueChannels() const { return m_dv; }

 private:
  template <class Branch>
  using Sublayer = DeltaSublayer<S, Branch>;  // nn/blocks/delta_sublayer.hpp
  using Mode = ForwardMode;                   // nn/layers/forward_mode.hpp

  static const DeltaTransformerBlockConfig& validated(const DeltaTransformerBlockConfig& cfg);
  static CausalSelfAttentionConfig attentionConfig(const DeltaTransformerBlockConfig& cfg);

  void checkInput(const char* fn, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout) const;

  // The one forward of forward and forwardInference.
  void run(const char* fn, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y,
           Activations& acts, Mode mode);

  template <class Branch>
  void runSublayer(Sublayer<Branch>& s, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y,
                   SublayerActivations& a, Mode mode);

  template <class Branch>
  void runBackward(Sublayer<Branch>& s, const SublayerActivations& a, const Eigen::Ref<const MatX<S>>& dY,
                   MatX<S>& dX);

  Index m_d, m_dv;
  bool m_overTokens;          // TC (dv > 1); else CC
  std::optional<Compressor<S>> m_compress;  // CC, dv > 1 (each exists only in its variant)
  std::optional<TokenCompressor<S>> m_tc;    // TC, dv > 1
  Sublayer<CausalSelfAttention<S>> m_attn;
  Sublayer<SwiGluBranch<S>> m_mlp;
  Activations m_acts;   // of the last forward
  Activations m_infer;  // of forwardInference
  MatX<S> m_h;          // (d, N) a branch output no backward reads, dead once its rewrite has run
  MatX<S> m_dMid;       // the gradient of the state after the attention sublayer
  SublayerScratch<S> m_scratch;  // one sublayer's backward scratch, used by the two in turn
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
  run("ddl::DeltaTransformerBlock::forward", X, layout, Y, m_acts, Mode::Train);
}

template <class S>
void DeltaTransformerBlock<S>::forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout,
                                                MatX<S>& Y) {
  run("ddl::DeltaTransformerBlock::forwardInference", X, layout, Y, m_infer, Mode::Inference);
}

template <class S>
void DeltaTransformerBlock<S>::backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) {
  requireNoAlias("ddl::DeltaTransformerBlock::backward", "dY", dY, "dX", dX);
  runBackward(m_mlp, m_acts.mlp, dY, m_dMid);
  runBackward(m_attn, m_acts.attn, m_dMid, dX);
}

template <class S>
void DeltaTransformerBlock<S>::startDecode(DecodeState& state, Index capacity) const {
  m_attn.branch.startDecode(state.attention, capacity);
  if (m_overTokens) {
    m_tc->startStep(state.attnTc);
    m_tc->startStep(state.mlpTc);
  }
}

template <class S>
void DeltaTransformerBlock<S>::forwardStep(const Eigen::Ref<const MatX<S>>& Xt, DecodeState& st, MatX<S>& Yt) const {
  const char* fn = "ddl::DeltaTransformerBlock::forwardStep";
  checkShape(fn, "Xt", Xt, m_d, m_dv);
  requireNoAlias(fn, "Xt", Xt, "Yt", Yt);
  const auto compress = [&](typename TokenCompressor<S>::StepCache& tc) {
    return [&](const Eigen::Ref<const MatX<S>>& X, MatX<S>& xin) {
      if (m_overTokens)
        m_tc->forwardStep(X, tc, xin);
      else
        m_compress->forwardInference(X, xin, st.compress);
    };
  };
  const auto rewrite = [](const DeltaResidual<S>& r, typename DeltaResidual<S>::Workspace& ws) {
    return [&r, &ws](const auto& X, const auto& in, const MatX<S>& c, const MatX<S>& h, MatX<S>& Y) {
      r.forwardInference(X, in, c, h, Y, ws);
    };
  };
  sublayerSteps<S>(m_dv, Xt, st.mid, st.xin, st.c, st.h, compress(st.attnTc),
           [&](const auto& in, MatX<S>& c) { m_attn.norm.forwardInference(in, c); },
           [&](const MatX<S>& c, MatX<S>& h) { m_attn.branch.forwardStep(c, st.attention, h); },
           rewrite(m_attn.delta, st.attnDelta));
  const TokenLayout one = TokenLayout::sequence(1, 1);
  sublayerSteps<S>(m_dv, st.mid, Yt, st.xin, st.c, st.h, compress(st.mlpTc),
           [&](const auto& in, MatX<S>& c) { m_mlp.norm.forwardInference(in, c); },
           [&](const MatX<S>& c, MatX<S>& h) { m_mlp.branch.forwardInference(c, one, h, st.mlp); },
           rewrite(m_mlp.delta, st.mlpDelta));
}

template <class S>
void DeltaTransformerBlock<S>::run(const char* fn, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout,
                                   MatX<S>& Y, Activations& acts, Mode mode) {
  requireNoAlias(fn, "X", X, "Y", Y);
  checkInput(fn, X, layout);
  runSublayer(m_attn, X, layout, acts.mid, acts.attn, mode);
  runSublayer(m_mlp, acts.mid, layout, Y, acts.mlp, mode);
}

template <class S>
template <class Branch>
void DeltaTransformerBlock<S>::runSublayer(Sublayer<Branch>& s, const Eigen::Ref<const MatX<S>>& X,
                                           const TokenLayout& layout, MatX<S>& Y, SublayerActivations& a, Mode mode) {
  MatX<S>& h = s.delta.readsBranchOutput() ? a.h : m_h;
  s.forward(mode, X, layout, Y, a.xin, a.c, h, [&](const Eigen::Ref<const MatX<S>>& x, MatX<S>& xin) {
    if (m_overTokens)
      forwardKeepingAs(mode, *m_tc, a.tc, x, layout, xin);
    else
      forwardKeepingAs(mode, *m_compress, a.cc, x, xin);
  });
}

template <class S>
template <class Branch>
void DeltaTransformerBlock<S>::runBackward(Sublayer<Branch>& s, const SublayerActivations& a,
                                           const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) {
  s.backward(dY, dX, m_scratch, [&](const MatX<S>& dXin, MatX<S>& dXc) {
    if (m_overTokens)
      m_tc->backward(dXin, dXc, a.tc);
    else
      m_compress->backward(dXin, dXc, a.cc);
  });
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
  a.options = cfg.attention;
  return a;
}

template <class S>
void DeltaTransformerBlock<S>::checkInput(const char* fn, const Eigen::Ref<const MatX<S>>& X,
                                          const TokenLayout& layout) const {
  requireSequenceLayout(fn, layout);
  if (X.rows() != m_d || X.cols() != m_dv * layout.tokens())
    throw ShapeError(message(fn, "X has shape ", shapeOf(X), ", expected (", m_d, ", ", m_dv, "*N) with N = ",
                             layout.tokens(), " tokens of the layout ", toString(layout)));
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class DeltaTransformerBlock<float>;
extern template class DeltaTransformerBlock<double>;
#endif

}  // namespace ddl
