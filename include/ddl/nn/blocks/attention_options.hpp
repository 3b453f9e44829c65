#pragma once
// ddl/nn/blocks/attention_options.hpp: the authors' attention options (their GPTConfig in
// model/DDL-gpt-mha-rope-CC-EC.py), one block shared by CausalSelfAttentionConfig,
// DeltaTransformerBlockConfig and DeltaLMConfig, with its checks and its checkpoint key-values.
//
//   field          key              default   theirs
//   headDim        head_dim         0 = d/H   head_dim (their default 128 = 768 / 6)
//   ropeRatio      rope_ratio       1         rope_ratio: RoPE on the first rotary_dim features of a head,
//                                             rotary_dim = int(d_h * rope_ratio) rounded down to even
//   qkNormEps      qk_norm_eps      1e-5      the eps of q_rms, k_rms (fixed at 1e-5 there)
//   outputGate     use_output_gate  false     o_t <- norm(o_t) ⊙ silu(W_g c_t) per head before W_o
//   groupNorm      using_groupnorm  false     o_t <- subln(o_t), an RMSNorm per head (before the gate)
//   outputNormEps  output_norm_eps  1e-5      eps of that per-head output norm (subln: 1e-5; o_norm:
//                                             their rms_norm_eps)
//   kShift, vShift use_k_shift,     false     their ShiftLinear on k / v (nn/layers/token_shift.hpp)
//                  use_v_shift
//   qActivation..  q_activation,    identity  their activations.py: identity, silu, relu, elu+1
//                  k_activation, v_activation
// Older checkpoints have none of these keys: they load with the defaults, except qk_norm_eps, which
// was norm_eps before it had a key of its own (readAttentionOptions takes that fallback).
#include <cmath>
#include <string>

#include "ddl/core/error.hpp"
#include "ddl/core/key_values.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/qkv_activation.hpp"

namespace ddl {

struct AttentionOptions {
  Index headDim = 0;          // d_h of every head; 0 means d / heads
  double ropeRatio = 1.0;     // in [0, 1]
  double qkNormEps = 1e-5;    // eps of the q and k RMSNorms (qkNorm)
  bool outputGate = false;    // gate the heads' outputs with silu(W_g c), after a per-head norm
  bool groupNorm = false;     // RMSNorm per head on the heads' outputs (the gate's norm when both)
  double outputNormEps = 1e-5;
  bool kShift = false, vShift = false;  // token shift of the keys / values
  QkvActivation qActivation = QkvActivation::Identity;
  QkvActivation kActivation = QkvActivation::Identity;
  QkvActivation vActivation = QkvActivation::Identity;

  // d_h for a model of width d with `heads` heads.
  Index resolvedHeadDim(Index d, Index heads) const { return headDim > 0 ? headDim : (heads > 0 ? d / heads : 0); }

  // The features of a head RoPE turns: int(d_h * ropeRatio), rounded down to even (their Rotary).
  static Index ropeDim(Index dh, double ratio) {
    Index r = static_cast<Index>(static_cast<double>(dh) * ratio);
    r -= r % 2;
    return r < 0 ? 0 : (r > dh ? dh : r);
  }

  // Whether a per-head norm follows the attention (groupNorm, or the gate's own norm).
  bool outputNorm() const { return groupNorm || outputGate; }

  // Whether any option differs from the plain attention of d / heads features per head.
  bool anyTransform() const {
    return kShift || vShift || outputNorm() || qActivation != QkvActivation::Identity ||
           kActivation != QkvActivation::Identity || vActivation != QkvActivation::Identity;
  }

  // Refuses values the attention cannot build, naming the option (fn: the caller).
  void validate(const char* fn, Index d, Index heads) const {
    require(headDim >= 0, fn, "head_dim must be >= 0 (0 means d / heads), got ", headDim);
    if (headDim == 0)
      require(heads >= 1 && d % heads == 0, fn, "with head_dim 0 (d / heads), heads must be >= 1 and divide d = ", d,
              ", got ", heads);
    require(std::isfinite(ropeRatio) && ropeRatio >= 0 && ropeRatio <= 1, fn, "rope_ratio must be in [0, 1], got ",
            ropeRatio);
    require(std::isfinite(qkNormEps) && qkNormEps >= 0, fn, "qk_norm_eps must be finite and >= 0, got ", qkNormEps);
    require(std::isfinite(outputNormEps) && outputNormEps >= 0, fn, "output_norm_eps must be finite and >= 0, got ",
            outputNormEps);
  }
};

// Writes the options under their keys (head_dim resolved for width d and `heads` heads).
inline void putAttentionOptions(KeyValueWriter& w, const AttentionOptions& a, Index d, Index heads) {
  w.put("head_dim", a.resolvedHeadDim(d, heads));
  w.put("rope_ratio", a.ropeRatio);
  w.put("qk_norm_eps", a.qkNormEps);
  w.put("use_output_gate", a.outputGate);
  w.put("using_groupnorm", a.groupNorm);
  w.put("output_norm_eps", a.outputNormEps);
  w.put("use_k_shift", a.kShift);
  w.put("use_v_shift", a.vShift);
  w.put("q_activation", toString(a.qActivation));
  w.put("k_activation", toString(a.kActivation));
  w.put("v_activation", toString(a.vActivation));
}

// Reads them back; a missing key keeps its default, a missing qk_norm_eps is normEps (the eps the
// q and k norms had before the key existed). head_dim equal to d / heads reads as 0.
inline AttentionOptions readAttentionOptions(const KeyValueReader& in, Index d, Index heads, double normEps) {
  AttentionOptions a;
  if (in.has("head_dim")) {
    a.headDim = in.size("head_dim", 1);
    if (heads >= 1 && d % heads == 0 && a.headDim == d / heads) a.headDim = 0;
  }
  if (in.has("rope_ratio")) a.ropeRatio = in.number("rope_ratio");
  a.qkNormEps = in.has("qk_norm_eps") ? in.number("qk_norm_eps") : normEps;
  if (in.has("use_output_gate")) a.outputGate = in.flag("use_output_gate");
  if (in.has("using_groupnorm")) a.groupNorm = in.flag("using_groupnorm");
  if (in.has("output_norm_eps")) a.outputNormEps = in.number("output_norm_eps");
  if (in.has("use_k_shift")) a.kShift = in.flag("use_k_shift");
  if (in.has("use_v_shift")) a.vShift = in.flag("use_v_shift");
  if (in.has("q_activation")) a.qActivation = parseQkvActivation(in.text("q_activation"), "q_activation");
  if (in.has("k_activation")) a.kActivation = parseQkvActivation(in.text("k_activation"), "k_activation");
  if (in.has("v_activation")) a.vActivation = parseQkvActivation(in.text("v_activation"), "v_activation");
  return a;
}

}  // namespace ddl
