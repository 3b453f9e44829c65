#pragma once
// ddl/nn/models/delta_lm_config.hpp: the configuration of DeltaLM, the causal language model of Delta
// Transformer blocks (docs/spec.md §8), its paper variants and its checkpoint key-values.
//
// Variants (the paper's names; applyVariant sets dv, the state compressor and the expansion, and
// variant() reads the name back from them):
//   dv1    dv = 1, no compressor                      the paper's "DDL (dv = 1)"
//   cc     dv = 4, CC per token, expansion by repeat  "DDL-CC w/o EC"
//   cc-ec  dv = 4, CC per token, EC expansion         "DDL-CC", the paper's headline
//   tc     dv = 4, TC over tokens, repeat             "DDL-TC w/o EC"
//   tc-ec  dv = 4, TC over tokens, EC expansion       "DDL-TC"
// Any residual kind combines with any variant; ResidualKind::Additive with dv1 is a pre-norm GPT
// with RoPE, QK-norm and SwiGLU, the baseline of the comparisons.
//
// Key-values (model_config of a checkpoint, read by tools/ddl_torch.py): model = "delta_lm", vocab, d,
// depth, heads, context, hidden (SwiGLU width, resolved), variant, state_compressor (cc | tc),
// conv_kernel (TC and EC), tied_head, rope_base, qk_norm, and the options every Delta net shares
// (dv, learned_expansion, preset, norm_eps, compressor (the CC form), residual, gate, value, ...), and
// the authors' attention options under their GPTConfig names (head_dim, rope_ratio, qk_norm_eps,
// use_output_gate, using_groupnorm, output_norm_eps, use_k_shift, use_v_shift, q/k/v_activation;
// nn/blocks/attention_options.hpp), which older checkpoints lack and then read as their defaults.
#include <cmath>
#include <string>

#include "ddl/core/error.hpp"
#include "ddl/core/key_values.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/activation.hpp"
#include "ddl/nn/blocks/attention_options.hpp"
#include "ddl/nn/blocks/delta_block.hpp"
#include "ddl/nn/blocks/delta_transformer_block.hpp"
#include "ddl/nn/models/delta_net_config.hpp"

namespace ddl {

struct DeltaLMConfig {
  static constexpr Index kMaxSize = Index(1) << 24;  // upper bound of every size read from text

  Index vocab = 256;     // byte-level text
  Index d = 256;
  Index depth = 4;       // L blocks of two Delta sublayers each
  Index heads = 4;       // d must be a multiple of heads
  Index context = 256;   // longest sequence forward accepts (and generate keeps)
  Index hidden = 0;      // SwiGLU hidden width; 0 means floor(8 d / 3)
  Index dv = 1;
  bool learnedExpansion = false;  // EC (dv > 1)
  StateCompressorKind stateCompressor = StateCompressorKind::PerToken;
  Index convKernel = 4;  // K of the TC compressor and of EC
  bool tiedHead = true;  // logits = E y (E the embedding) or a separate head.weight [vocab, d]
  double ropeBase = 10000;
  bool qkNorm = true;
  double finalNormEps = 1e-5;
  Preset preset = Preset::Code;  // the residual preset applied last (applyPreset): code | paper
  DeltaBlockOptions block = defaultBlock();  // residual options, norm eps, CC form; activation SiLU

  // ---- the authors' attention options (nn/blocks/attention_options.hpp) ----
  AttentionOptions attention;  // head_dim, rope_ratio, QK-norm eps, output gate and norm, k/v shift, q/k/v activations

  static DeltaBlockOptions defaultBlock() {
    DeltaBlockOptions b;
    b.activation = Activation::SiLU;
    b.compressor = CompressorKind::Structured;
    return b;
  }

  Index resolvedHidden() const { return hidden > 0 ? hidden : 8 * d / 3; }

  // The configuration of each block.
  DeltaTransformerBlockConfig blockConfig() const {
    DeltaTransformerBlockConfig b;
    b.d = d;
    b.dv = dv;
    b.heads = heads;
    b.hidden = resolvedHidden();
    b.ropeBase = ropeBase;
    b.qkNorm = qkNorm;
    b.compressor = stateCompressor;
    b.convKernel = convKernel;
    b.block = block;
    b.attention = attention;
    return b;
  }
  Index headDim() const { return attention.resolvedHeadDim(d, heads); }

  // The paper's name of this configuration (dv1 | cc | cc-ec | tc | tc-ec), read from dv, the state
  // compressor and the expansion, so that the label can never contradict the model it names.
  std::string variant() const {
    if (dv == 1) return "dv1";
    std::string v = stateCompressor == StateCompressorKind::PerToken ? "cc" : "tc";
    return learnedExpansion ? v + "-ec" : v;
  }

  void validate() const {
    const char* fn = "ddl::DeltaLMConfig";
    require(vocab >= 2, fn, "vocab must be >= 2, got ", vocab);
    require(d >= 1, fn, "d must be >= 1, got ", d);
    require(depth >= 0, fn, "depth must be >= 0, got ", depth);
    require(heads >= 1, fn, "heads must be >= 1, got ", heads);
    attention.validate(fn, d, heads);
    require(context >= 1, fn, "context must be >= 1, got ", context);
    require(hidden >= 0, fn, "hidden must be >= 0 (0 means floor(8 d / 3)), got ", hidden);
    require(dv >= 1, fn, "dv must be >= 1, got ", dv);
    require(preset == Preset::Code || preset == Preset::Paper, fn,
            "preset must be code or paper (applyPreset), got '", toString(preset), "'");
    require(convKernel >= 1, fn, "conv_kernel must be >= 1, got ", convKernel);
    require(ropeBase > 0 && std::isfinite(ropeBase), fn, "rope_base must be finite and > 0, got ", ropeBase);
    require(block.normEps >= 0 && finalNormEps >= 0, fn, "RMSNorm eps must be >= 0");
    require(!block.compressorReadInit || std::isfinite(*block.compressorReadInit), fn,
            "compressorReadInit must be finite, got ", block.compressorReadInit.value_or(0.0));
    require(block.activation == Activation::SiLU, fn, "the SwiGLU sublayer gates with silu, got activation ",
            toString(block.activation));
    require(block.residual.direction == DirectionSource::BranchOutput, fn,
            "a DeltaLM takes its directions from the sublayers (k-Map); direction '", toString(block.residual.direction),
            "' (preset v1) is for DeltaNet");
    block.residual.validate(fn);
  }

  KeyValues toKeyValues() const {
    KeyValues kv;
    KeyValueWriter w(kv);
    w.put("model", std::string("delta_lm"));
    w.put("vocab", vocab);
    w.put("d", d);
    w.put("depth", depth);
    w.put("heads", heads);
    w.put("context", context);
    w.put("hidden", resolvedHidden());
    w.put("variant", variant());
    w.put("state_compressor", std::string(toString(stateCompressor)));
    w.put("conv_kernel", convKernel);
    w.put("tied_head", tiedHead);
    w.put("rope_base", ropeBase);
    w.put("qk_norm", qkNorm);
    putSharedOptions(w, *this);
    putAttentionOptions(w, attention, d, heads);
    return kv;
  }

  static DeltaLMConfig fromKeyValues(const KeyValues& kv) {
    const KeyValueReader in(kv, "ddl::DeltaLMConfig::fromKeyValues", kMaxSize);
    if (in.text("model") != "delta_lm")
      throw ValueError(message("ddl::DeltaLMConfig::fromKeyValues", "model is '", in.text("model"),
                               "', expected 'delta_lm'"));
    DeltaLMConfig c;
    c.vocab = in.size("vocab", 2);
    c.d = in.size("d", 1);
    c.depth = in.size("depth", 0);
    c.heads = in.size("heads", 1);
    c.context = in.size("context", 1);
    c.hidden = in.size("hidden", 0);
    const std::string variant = in.text("variant");
    c.stateCompressor = parseStateCompressorKind(in.text("state_compressor"));
    c.convKernel = in.size("conv_kernel", 1);
    c.tiedHead = in.flag("tied_head");
    c.ropeBase = in.number("rope_base");
    c.qkNorm = in.flag("qk_norm");
    readSharedOptions(in, c);
    c.attention = readAttentionOptions(in, c.d, c.heads, c.block.normEps);
    c.validate();
    if (variant != c.variant())
      throw ValueError(message("ddl::DeltaLMConfig::fromKeyValues", "variant '", variant, "' contradicts dv ", c.dv,
                               ", state_compressor ", toString(c.stateCompressor), " and learned_expansion ",
                               c.learnedExpansion ? "true" : "false", ", which make '", c.variant(), "'"));
    return c;
  }
};

// The paper's variants: dv1 | cc | cc-ec | tc | tc-ec (see the header comment). dv > 1 variants use
// dv = 4, the paper's setting; change c.dv afterwards for another.
inline void applyVariant(DeltaLMConfig& c, const std::string& variant) {
  if (variant == "dv1") {
    c.dv = 1;
    c.learnedExpansion = false;
    c.stateCompressor = StateCompressorKind::PerToken;
  } else if (variant == "cc" || variant == "cc-ec" || variant == "tc" || variant == "tc-ec") {
    c.dv = 4;
    c.stateCompressor = variant[0] == 'c' ? StateCompressorKind::PerToken : StateCompressorKind::OverTokens;
    c.learnedExpansion = variant.size() == 5;
  } else {
    throw ValueError(message("ddl::applyVariant", "unknown variant '", variant,
                             "', expected one of dv1, cc, cc-ec, tc, tc-ec"));
  }
}

// The residual presets of docs/spec.md §7 that apply to a language model: code (default) and paper,
// the options applyPreset(DeltaNetConfig&) fixes; the block's SiLU and widths are left alone.
inline void applyPreset(DeltaLMConfig& c, Preset preset) {
  if (preset != Preset::Code && preset != Preset::Paper)
    throw ValueError(message("ddl::applyPreset", "unknown language-model preset '", toString(preset),
                             "', expected one of code, paper (v1's auxiliary direction is for DeltaNet)"));
  DeltaNetConfig v;
  v.block = c.block;
  applyPreset(v, preset);
  c.block = v.block;
  c.finalNormEps = v.finalNormEps;
  c.preset = preset;
}

// The same by name (a command line's --preset).
inline void applyPreset(DeltaLMConfig& c, const std::string& preset) {
  if (preset == "code" || preset == "paper") return applyPreset(c, parsePreset(preset));
  throw ValueError(message("ddl::applyPreset", "unknown language-model preset '", preset,
                           "', expected one of code, paper (v1's auxiliary direction is for DeltaNet)"));
}

}  // namespace ddl
