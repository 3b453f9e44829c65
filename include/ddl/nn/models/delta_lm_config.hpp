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
// conv_kernel (TC, and EC unless input_embed_shortconv_kernel_size is set), tied_head, rope_base, qk_norm,
// the options every Delta net shares (dv, learned_expansion, preset, norm_eps, compressor (the CC form),
// residual, gate, value, ...), the authors' attention options under their GPTConfig names (head_dim,
// rope_ratio, qk_norm_eps, use_output_gate, using_groupnorm, output_norm_eps, use_k_shift, use_v_shift,
// q/k/v_activation; nn/blocks/attention_options.hpp) and the authors' Delta options below (keys named
// as their GPTConfig's). Older checkpoints lack these keys and read their defaults: the models they describe.
//
// The authors' GPTConfig options of the Delta write and the initialisation, and where ddl holds them:
//   ddl_v_sigmoid (True)                 block.residual.value: sigmoid_scaled (True) | linear_on_input (False)
//   ddl_v_sigmoid_scale (4.0)            block.residual.valueScale
//   ddl_v_constant, _value (False, 2.0)  block.residual.value = constant, block.residual.valueConstant
//                                        (their dv = 1 file names them ddl_v_dim1_constant, _value)
//   ddl_beta_single_linear (True)        block.residual.gate: linear (True) | two_layer_tanh (False)
//   ddl_beta_hidden_size (128)           block.residual.gateHidden
//   ddl_beta_init (1.0)                  block.residual.beta0; they clamp it to [0, 2] before the logit, so
//                                        a value b outside is the model of clamp(b, 0, 2), which validate() asks for
//   ddl_k_eps (1e-5)                     block.residual.epsK with direction_norm sqrt_eps (the same k)
//   ddl_state_read_init (None = 1/dv)    block.compressorReadInit (structured CC and TC)
//   ddl_state_shortconv_kernel_size (4)  block.compressorKernel (CC) or convKernel (TC); their CC files set it
//                                        to ddl_value_channels when only that is given (a rule of their
//                                        constructor's arguments: a saved config.json holds both)
//   input_embed_shortconv_kernel_size    inputEmbedKernel (EC)
//   ddl_state_dv_shortconv_causal        stateDvShortconvCausal (False only, see validate())
//   embedding_init_std, hidden_init_std_factor, and their 1-D biases' nn.Linear start: the fields below.
#include <cmath>
#include <string>

#include "ddl/core/enum_names.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/key_values.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/activation.hpp"
#include "ddl/nn/blocks/attention_options.hpp"
#include "ddl/nn/blocks/delta_block.hpp"
#include "ddl/nn/blocks/delta_transformer_block.hpp"
#include "ddl/nn/models/delta_net_config.hpp"

namespace ddl {

// How DeltaLM starts its parameters (docs/spec.md §8): ddl's rule, or the authors' init_gpt_weights, which
// differs only in the value heads' biases (nn.Linear's U(+-1/sqrt(d)) instead of 0).
enum class LmInit { Ddl, Authors };
inline constexpr EnumName<LmInit> kLmInitNames[] = {{LmInit::Ddl, "ddl"}, {LmInit::Authors, "authors"}};
inline const char* toString(LmInit k) { return nameOf(kLmInitNames, k); }
inline LmInit parseLmInit(const std::string& s) { return parseEnumName(kLmInitNames, s, "ddl::parseLmInit", "init"); }

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

  // ---- the authors' Delta options (their GPTConfig names; docs/spec.md §8) ----
  Index inputEmbedKernel = 0;  // input_embed_shortconv_kernel_size: EC's K; 0 means convKernel (as before the key)
  bool stateDvShortconvCausal = false;  // ddl_state_dv_shortconv_causal: only false (validate() says why)
  double embeddingInitStd = 0.02;       // embedding_init_std: the embedding (= tied head) ~ N(0, std²)
  double hiddenInitStdFactor = 0.5;     // hidden_init_std_factor: >= 2-D params ~ N(0, (factor/sqrt(d))²),
                                        // the output projections with a further 1/sqrt(L)
  LmInit init = LmInit::Ddl;            // init: ddl (value biases 0) | authors (value biases as nn.Linear's)
  // ---- end of the authors' Delta options ----

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
  // The kernel of EC (the authors' input_embed_shortconv_kernel_size).
  Index ecKernel() const { return inputEmbedKernel > 0 ? inputEmbedKernel : convKernel; }

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
    validateAuthorsDeltaOptions(fn);
  }

  // The authors' Delta options: throws ValueError naming the option (their name) and its value.
  void validateAuthorsDeltaOptions(const char* fn) const {
    require(inputEmbedKernel >= 0, fn, "input_embed_shortconv_kernel_size must be >= 1 (or 0: conv_kernel), got ",
            inputEmbedKernel);
    require(!stateDvShortconvCausal, fn,
            "ddl_state_dv_shortconv_causal = true is not supported: the authors' ResidualShortConvCompressor.forward "
            "never reads it (its causal padding is commented out), so their models train with the centred padding "
            "(K - 1) / 2 whatever it says; only their Triton file reads it, as the left padding K - 1");
    require(std::isfinite(embeddingInitStd) && embeddingInitStd >= 0, fn,
            "embedding_init_std must be finite and >= 0, got ", embeddingInitStd);
    require(std::isfinite(hiddenInitStdFactor) && hiddenInitStdFactor >= 0, fn,
            "hidden_init_std_factor must be finite and >= 0, got ", hiddenInitStdFactor);
    require(init == LmInit::Ddl || init == LmInit::Authors, fn, "init must be ddl or authors, got ",
            static_cast<int>(init));
  }

  // Their keys; written always, read when present (older checkpoints: the defaults).
  void putAuthorsDeltaOptions(KeyValueWriter& w) const {
    w.put("input_embed_shortconv_kernel_size", ecKernel());  // resolved
    w.put("ddl_state_dv_shortconv_causal", stateDvShortconvCausal);
    w.put("embedding_init_std", embeddingInitStd);
    w.put("hidden_init_std_factor", hiddenInitStdFactor);
    w.put("init", std::string(toString(init)));
  }
  void readAuthorsDeltaOptions(const KeyValueReader& in) {
    if (in.has("input_embed_shortconv_kernel_size")) inputEmbedKernel = in.size("input_embed_shortconv_kernel_size", 1);
    if (in.has("ddl_state_dv_shortconv_causal")) stateDvShortconvCausal = in.flag("ddl_state_dv_shortconv_causal");
    if (in.has("embedding_init_std")) embeddingInitStd = in.number("embedding_init_std");
    if (in.has("hidden_init_std_factor")) hiddenInitStdFactor = in.number("hidden_init_std_factor");
    if (in.has("init")) init = parseLmInit(in.text("init"));
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

    putAuthorsDeltaOptions(w);
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

    c.readAuthorsDeltaOptions(in);
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
