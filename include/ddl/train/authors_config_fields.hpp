#pragma once
// ddl/train/authors_config_fields.hpp: the vocabulary of the authors' config.json (github.com/yifanzhang-pro/
// deep-delta-learning, their GPTConfig as save_pretrained writes it): their model files (AuthorsVariant),
// and one table, authorsConfigFields(), with an entry for every field of their GPTConfig (all six files), for
// the keys their modules read with getattr without declaring them (rope_base, rms_norm_eps, ...), and for
// Hugging Face's bookkeeping keys. Each entry is
//   Mapped       read into (and written from) a DeltaLMConfig field;
//   DefaultOnly  accepted only at their default: a field their model never reads (bias, dropout,
//                scale_attn_by_inverse_layer_idx, ddl_state_dv_shortconv_causal) or one ddl does not have
//                (mup, a baseline MLP width other than floor(8/3 d));
//   Bookkeeping  Hugging Face's own keys (architectures, model_type, torch_dtype, ...): ignored.
// train/authors_config.hpp turns a whole config.json into a DeltaLMConfig and back with this table;
// the format and what is refused: docs/authors_models.md.
#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ddl/core/requires_json.hpp"  // before nlohmann: a clear error without it
#include <nlohmann/json.hpp>

#include "ddl/core/error.hpp"
#include "ddl/core/json_text.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/attention_options.hpp"
#include "ddl/nn/layers/qkv_activation.hpp"
#include "ddl/nn/models/delta_lm_config.hpp"

namespace ddl {

// The authors' model files, one per variant (baseline: gpt_base.py's GPTBase with their attention).
enum class AuthorsVariant { Baseline, Dv1, Cc, CcEc, Tc, TcEc };

inline const char* toString(AuthorsVariant v) {
  switch (v) {
    case AuthorsVariant::Baseline: return "baseline";
    case AuthorsVariant::Dv1: return "dv1";
    case AuthorsVariant::Cc: return "cc";
    case AuthorsVariant::CcEc: return "cc-ec";
    case AuthorsVariant::Tc: return "tc";
    case AuthorsVariant::TcEc: return "tc-ec";
  }
  return "?";
}

// The variant of a ddl configuration in the authors' terms; throws ValueError when their code has no
// such model (ddl's write-only residual, or the additive residual with dv > 1).
inline AuthorsVariant authorsVariantOf(const DeltaLMConfig& c) {
  const char* fn = "ddl::authorsVariantOf";
  const ResidualKind r = c.block.residual.residual;
  require(r != ResidualKind::WriteOnly, fn, "residual 'write_only' has no counterpart in the authors' models");
  if (r == ResidualKind::Additive) {
    require(c.dv == 1, fn, "the additive residual with dv = ", c.dv,
            " has no counterpart in the authors' models (their baseline is dv = 1)");
    return AuthorsVariant::Baseline;
  }
  if (c.dv == 1) return AuthorsVariant::Dv1;
  if (c.stateCompressor == StateCompressorKind::PerToken)
    return c.learnedExpansion ? AuthorsVariant::CcEc : AuthorsVariant::Cc;
  return c.learnedExpansion ? AuthorsVariant::TcEc : AuthorsVariant::Tc;
}

namespace detail {

inline bool isExpanded(AuthorsVariant v) { return v != AuthorsVariant::Baseline && v != AuthorsVariant::Dv1; }
inline bool hasEc(AuthorsVariant v) { return v == AuthorsVariant::CcEc || v == AuthorsVariant::TcEc; }
inline bool isTc(AuthorsVariant v) { return v == AuthorsVariant::Tc || v == AuthorsVariant::TcEc; }

// What a Mapped entry's reader fills: the configuration and the values checked once all fields are read.
struct AuthorsConfigRead {
  DeltaLMConfig& config;
  AuthorsVariant variant;
  const std::string& source;  // the file, for messages
  Index headDim = 128;                      // their default
  Index stateKernel = 4, embedKernel = 4;   // ddl_state_shortconv_kernel_size, input_embed_shortconv_kernel_size
  bool stateKernelGiven = false, channelsGiven = false;
  std::optional<double> rmsNormEps = std::nullopt;  // rms_norm_eps when given (who reads it: authorsConfigToDeltaLM)
  bool vSigmoid = true, vConstant = false;  // ddl_v_sigmoid; ddl_v_constant (ddl_v_dim1_constant in dv1 files)
};

[[noreturn]] inline void authorsFieldError(const AuthorsConfigRead& r, const char* field, const nlohmann::json& v,
                                           const std::string& expected) {
  throw ValueError(message("ddl::authorsConfigToDeltaLM", r.source, ": field '", field, "' = ", jsonExcerpt(v),
                           ": expected ", expected));
}
inline Index authorsInt(const AuthorsConfigRead& r, const char* field, const nlohmann::json& v, Index lo) {
  if (!v.is_number_integer() || v.get<long long>() < lo || v.get<long long>() > DeltaLMConfig::kMaxSize)
    authorsFieldError(r, field, v, "an integer in [" + std::to_string(lo) + ", " +
                                       std::to_string(DeltaLMConfig::kMaxSize) + "]");
  return static_cast<Index>(v.get<long long>());
}
inline double authorsNumber(const AuthorsConfigRead& r, const char* field, const nlohmann::json& v, double lo,
                            bool strict) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < lo || (strict && v.get<double>() == lo)) {
    std::ostringstream expected;
    expected << "a finite number " << (strict ? "> " : ">= ") << lo;
    authorsFieldError(r, field, v, expected.str());
  }
  return v.get<double>();
}
inline bool authorsBool(const AuthorsConfigRead& r, const char* field, const nlohmann::json& v) {
  if (!v.is_boolean()) authorsFieldError(r, field, v, "true or false");
  return v.get<bool>();
}
inline double authorsFinite(const AuthorsConfigRead& r, const char* field, const nlohmann::json& v) {
  if (!v.is_number() || !std::isfinite(v.get<double>())) authorsFieldError(r, field, v, "a finite number");
  return v.get<double>();
}
// q_activation, k_activation, v_activation: null or one of the names of their ActivationName Literal (their
// pydantic validation refuses anything else, "elu" included).
inline QkvActivation authorsActivation(const AuthorsConfigRead& r, const char* field, const nlohmann::json& v) {
  if (v.is_null()) return QkvActivation::Identity;
  if (v.is_string()) {
    const std::string name = v.get<std::string>();
    if (name == "identity" || name == "silu" || name == "relu" || name == "elu+1")
      return parseQkvActivation(name, field);
  }
  authorsFieldError(r, field, v, "null, \"identity\", \"silu\", \"relu\" or \"elu+1\"");
}
inline nlohmann::json authorsActivationJson(QkvActivation a) {
  return a == QkvActivation::Identity ? nlohmann::json(nullptr) : nlohmann::json(toString(a));
}
// The constant value v = c of the Delta write: ddl_v_constant and ddl_v_constant_value, which their dv = 1
// files name ddl_v_dim1_constant and ddl_v_dim1_constant_value (one option each under two names).
inline void readValueConstant(AuthorsConfigRead& r, const char* field, const nlohmann::json& v) {
  r.vConstant = authorsBool(r, field, v);
}
inline nlohmann::json writeValueConstant(const DeltaLMConfig& c, AuthorsVariant) {
  return c.block.residual.value == ValueKind::Constant;
}
inline void readValueConstantValue(AuthorsConfigRead& r, const char* field, const nlohmann::json& v) {
  r.config.block.residual.valueConstant = authorsFinite(r, field, v);
}
inline nlohmann::json writeValueConstantValue(const DeltaLMConfig& c, AuthorsVariant) {
  return c.block.residual.valueConstant;
}

// Whether their attention has the o_norm whose eps is rms_norm_eps (the output gate without using_groupnorm).
inline bool authorsGateNorm(const AttentionOptions& a) { return a.outputGate && !a.groupNorm; }

}  // namespace detail

enum class AuthorsFieldUse { Mapped, DefaultOnly, Bookkeeping };

// Which variants' GPTConfig declares a field (a config.json written for that variant holds it).
enum AuthorsScope : unsigned {
  kAuthorsUndeclared = 0,  // read by their modules with getattr, declared by no GPTConfig: never written
  kAuthorsDv1Files = 1u << 0 | 1u << 1,  // baseline (which uses the dv1 file's GPTConfig) and dv1
  kAuthorsDv1Only = 1u << 1,
  kAuthorsCc = 1u << 2 | 1u << 3,                // cc, cc-ec
  kAuthorsExpanded = 1u << 2 | 1u << 3 | 1u << 4 | 1u << 5,  // cc, cc-ec, tc, tc-ec
  kAuthorsEc = 1u << 3 | 1u << 5,                // cc-ec, tc-ec
  kAuthorsAll = 0x3fu,
};
inline unsigned authorsScopeBit(AuthorsVariant v) { return 1u << static_cast<unsigned>(v); }

struct AuthorsField {
  const char* name;
  AuthorsFieldUse use;
  unsigned scope;            // AuthorsScope bits
  const char* defaultJson;   // their default as JSON text
  const char* meaning;       // the DeltaLMConfig field, or why only the default is accepted
  // Mapped only: read(r, name, value) parses value, naming the field `name` in errors; write gives its JSON.
  void (*read)(detail::AuthorsConfigRead&, const char* name, const nlohmann::json&);
  nlohmann::json (*write)(const DeltaLMConfig&, AuthorsVariant);
};

// The table (docs/authors_models.md prints it).
inline const std::vector<AuthorsField>& authorsConfigFields() {
  using R = detail::AuthorsConfigRead;
  using J = nlohmann::json;
  using V = AuthorsVariant;
  using C = DeltaLMConfig;
  using K = const char*;  // the field's name, for the reader's errors
  constexpr auto M = AuthorsFieldUse::Mapped;
  constexpr auto D = AuthorsFieldUse::DefaultOnly;
  constexpr auto B = AuthorsFieldUse::Bookkeeping;
  static const std::vector<AuthorsField> fields = {
      {"vocab_size", M, kAuthorsAll, "50304", "vocab",
       [](R& r, K field, const J& v) { r.config.vocab = detail::authorsInt(r, field, v, 2); },
       [](const C& c, V) { return J(c.vocab); }},
      {"num_hidden_layers", M, kAuthorsAll, "12", "depth",
       [](R& r, K field, const J& v) { r.config.depth = detail::authorsInt(r, field, v, 0); },
       [](const C& c, V) { return J(c.depth); }},
      {"num_attention_heads", M, kAuthorsAll, "6", "heads",
       [](R& r, K field, const J& v) { r.config.heads = detail::authorsInt(r, field, v, 1); },
       [](const C& c, V) { return J(c.heads); }},
      {"hidden_size", M, kAuthorsAll, "768", "d (and the SwiGLU width floor(8/3 d), as their MLP)",
       [](R& r, K field, const J& v) { r.config.d = detail::authorsInt(r, field, v, 1); },
       [](const C& c, V) { return J(c.d); }},
      {"head_dim", M, kAuthorsAll, "128", "attention.headDim (0 when it is hidden_size / num_attention_heads)",
       [](R& r, K field, const J& v) { r.headDim = detail::authorsInt(r, field, v, 1); },
       [](const C& c, V) { return J(c.headDim()); }},
      {"block_size", M, kAuthorsAll, "1024", "context",
       [](R& r, K field, const J& v) { r.config.context = detail::authorsInt(r, field, v, 1); },
       [](const C& c, V) { return J(c.context); }},
      {"bias", D, kAuthorsAll, "false", "never read by their model", nullptr, nullptr},
      {"dropout", D, kAuthorsAll, "0.0", "never read by their model", nullptr, nullptr},
      {"scale_attn_by_inverse_layer_idx", D, kAuthorsAll, "false", "never read by their model", nullptr, nullptr},
      {"using_groupnorm", M, kAuthorsAll, "false", "attention.groupNorm (their subln, eps fixed at 1e-5)",
       [](R& r, K field, const J& v) { r.config.attention.groupNorm = detail::authorsBool(r, field, v); },
       [](const C& c, V) { return J(c.attention.groupNorm); }},
      {"use_output_gate", M, kAuthorsAll, "false", "attention.outputGate (without using_groupnorm its norm is "
       "o_norm, eps rms_norm_eps)",
       [](R& r, K field, const J& v) { r.config.attention.outputGate = detail::authorsBool(r, field, v); },
       [](const C& c, V) { return J(c.attention.outputGate); }},
      {"use_qk_rmsnorm", M, kAuthorsAll, "true", "qkNorm",
       [](R& r, K field, const J& v) { r.config.qkNorm = detail::authorsBool(r, field, v); },
       [](const C& c, V) { return J(c.qkNorm); }},
      {"use_k_shift", M, kAuthorsAll, "false", "attention.kShift (their ShiftLinear c_k)",
       [](R& r, K field, const J& v) { r.config.attention.kShift = detail::authorsBool(r, field, v); },
       [](const C& c, V) { return J(c.attention.kShift); }},
      {"use_v_shift", M, kAuthorsAll, "false", "attention.vShift (their ShiftLinear c_v)",
       [](R& r, K field, const J& v) { r.config.attention.vShift = detail::authorsBool(r, field, v); },
       [](const C& c, V) { return J(c.attention.vShift); }},
      {"q_activation", M, kAuthorsAll, "null", "attention.qActivation (null: identity)",
       [](R& r, K field, const J& v) { r.config.attention.qActivation = detail::authorsActivation(r, field, v); },
       [](const C& c, V) { return detail::authorsActivationJson(c.attention.qActivation); }},
      {"k_activation", M, kAuthorsAll, "null", "attention.kActivation (null: identity)",
       [](R& r, K field, const J& v) { r.config.attention.kActivation = detail::authorsActivation(r, field, v); },
       [](const C& c, V) { return detail::authorsActivationJson(c.attention.kActivation); }},
      {"v_activation", M, kAuthorsAll, "null", "attention.vActivation (null: identity)",
       [](R& r, K field, const J& v) { r.config.attention.vActivation = detail::authorsActivation(r, field, v); },
       [](const C& c, V) { return detail::authorsActivationJson(c.attention.vActivation); }},
      {"rope_ratio", M, kAuthorsAll, "1.0", "attention.ropeRatio (RoPE on int(head_dim * rope_ratio) features, "
       "rounded down to even)",
       [](R& r, K field, const J& v) {
         const double x = detail::authorsNumber(r, field, v, 0, false);
         if (x > 1) detail::authorsFieldError(r, field, v, "a number in [0, 1]");
         r.config.attention.ropeRatio = x;
       },
       [](const C& c, V) { return J(c.attention.ropeRatio); }},
      {"embedding_init_std", M, kAuthorsAll, "0.02", "embeddingInitStd (initialisation only)",
       [](R& r, K field, const J& v) { r.config.embeddingInitStd = detail::authorsNumber(r, field, v, 0, false); },
       [](const C& c, V) { return J(c.embeddingInitStd); }},
      {"hidden_init_std_factor", M, kAuthorsAll, "0.5", "hiddenInitStdFactor (initialisation only)",
       [](R& r, K field, const J& v) { r.config.hiddenInitStdFactor = detail::authorsNumber(r, field, v, 0, false); },
       [](const C& c, V) { return J(c.hiddenInitStdFactor); }},
      {"ddl_k_eps", M, kAuthorsAll, "1e-05", "block.residual.epsK",
       [](R& r, K field, const J& v) { r.config.block.residual.epsK = detail::authorsNumber(r, field, v, 0, false); },
       [](const C& c, V) { return J(c.block.residual.epsK); }},
      {"ddl_beta_hidden_size", M, kAuthorsAll, "128", "block.residual.gateHidden (the two-layer gate's width)",
       [](R& r, K field, const J& v) { r.config.block.residual.gateHidden = detail::authorsInt(r, field, v, 1); },
       [](const C& c, V) { return J(c.block.residual.gateHidden); }},
      {"ddl_beta_single_linear", M, kAuthorsAll, "true",
       "block.residual.gate: linear (true) | two_layer_tanh (false: their beta_in, beta_out)",
       [](R& r, K field, const J& v) {
         r.config.block.residual.gate =
             detail::authorsBool(r, field, v) ? GateKind::Linear : GateKind::TwoLayerTanh;
       },
       [](const C& c, V) { return J(c.block.residual.gate == GateKind::Linear); }},
      {"ddl_v_sigmoid", M, kAuthorsAll, "true",
       "block.residual.value: sigmoid_scaled (true) | linear_on_input (false); constant when ddl_v_constant",
       [](R& r, K field, const J& v) { r.vSigmoid = detail::authorsBool(r, field, v); },
       [](const C& c, V) { return J(c.block.residual.value != ValueKind::LinearOnInput); }},
      {"ddl_v_sigmoid_scale", M, kAuthorsAll, "4.0", "block.residual.valueScale",
       [](R& r, K field, const J& v) {
         r.config.block.residual.valueScale = detail::authorsNumber(r, field, v, 0, true);
       },
       [](const C& c, V) { return J(c.block.residual.valueScale); }},
      {"ddl_beta_init", M, kAuthorsAll, "1.0",
       "block.residual.beta0 (initialisation only), clamped to [0, 2] as their code clamps it",
       [](R& r, K field, const J& v) {
         const double b = detail::authorsFinite(r, field, v);
         r.config.block.residual.beta0 = b < 0 ? 0.0 : (b > 2 ? 2.0 : b);
       },
       [](const C& c, V) { return J(c.block.residual.beta0); }},
      {"ddl_v_dim1_constant", M, kAuthorsDv1Files, "false", "block.residual.value = constant (their dv = 1 name)",
       detail::readValueConstant, detail::writeValueConstant},
      {"ddl_v_dim1_constant_value", M, kAuthorsDv1Files, "2.0", "block.residual.valueConstant (their dv = 1 name)",
       detail::readValueConstantValue, detail::writeValueConstantValue},
      {"ddl_value_channels", M, kAuthorsExpanded, "4", "dv",
       [](R& r, K field, const J& v) {
         r.config.dv = detail::authorsInt(r, field, v, 2);
         r.channelsGiven = true;
       },
       [](const C& c, V) { return J(c.dv); }},
      {"ddl_state_shortconv_kernel_size", M, kAuthorsExpanded, "4",
       "cc: block.compressorKernel (= dv: their CC computes only then); tc: convKernel",
       [](R& r, K field, const J& v) {
         r.stateKernel = detail::authorsInt(r, field, v, 1);
         r.stateKernelGiven = true;
       },
       [](const C& c, V v) { return J(detail::isTc(v) ? c.convKernel : c.block.compressorKernel); }},
      {"ddl_state_read_init", M, kAuthorsExpanded, "null", "block.compressorReadInit (null: 1/dv)",
       [](R& r, K field, const J& v) {
         if (v.is_null()) r.config.block.compressorReadInit.reset();
         else if (v.is_number() && std::isfinite(v.get<double>())) r.config.block.compressorReadInit = v.get<double>();
         else detail::authorsFieldError(r, field, v, "null or a finite number");
       },
       [](const C& c, V) { return c.block.compressorReadInit ? J(*c.block.compressorReadInit) : J(nullptr); }},
      {"ddl_state_dv_shortconv_causal", D, kAuthorsCc, "false", "never read by their model (commented out)", nullptr,
       nullptr},
      {"input_embed_shortconv_kernel_size", M, kAuthorsEc, "4",
       "EC's kernel: cc-ec convKernel; tc-ec inputEmbedKernel (0 when it is the TC kernel)",
       [](R& r, K field, const J& v) { r.embedKernel = detail::authorsInt(r, field, v, 1); },
       [](const C& c, V) { return J(c.ecKernel()); }},
      {"ddl_v_constant", M, kAuthorsExpanded, "false", "block.residual.value = constant",
       detail::readValueConstant, detail::writeValueConstant},
      {"ddl_v_constant_value", M, kAuthorsExpanded, "2.0", "block.residual.valueConstant",
       detail::readValueConstantValue, detail::writeValueConstantValue},
      // Read by their modules with getattr, declared by no GPTConfig.
      {"rope_base", M, kAuthorsUndeclared, "10000.0", "ropeBase",
       [](R& r, K field, const J& v) { r.config.ropeBase = detail::authorsNumber(r, field, v, 0, true); }, nullptr},
      {"kv_cache_slot_size", D, kAuthorsUndeclared, "128", "their decoding cache's block size", nullptr, nullptr},
      {"rms_norm_eps", M, kAuthorsUndeclared, "1e-05",
       "baseline: block.normEps and finalNormEps; with use_output_gate and not using_groupnorm: "
       "attention.outputNormEps (their o_norm); read by nothing else (their DDL files fix 1e-5)",
       [](R& r, K field, const J& v) { r.rmsNormEps = detail::authorsNumber(r, field, v, 0, false); }, nullptr},
      {"mup", D, kAuthorsUndeclared, "false", "muP logit scale: not in ddl", nullptr, nullptr},
      {"hidden_size_base", D, kAuthorsUndeclared, "1024", "muP only", nullptr, nullptr},
      {"intermediate_size", D, kAuthorsUndeclared, "null", "baseline MLP width: floor(8/3 d) only", nullptr, nullptr},
      {"mlp_hidden_mult", D, kAuthorsUndeclared, "null", "baseline MLP width: floor(8/3 d) only", nullptr, nullptr},
      {"tie_word_embeddings", D, kAuthorsUndeclared, "true", "their head is always tied", nullptr, nullptr},
      // Hugging Face's bookkeeping.
      {"architectures", B, kAuthorsUndeclared, "null", "Hugging Face bookkeeping", nullptr, nullptr},
      {"model_type", B, kAuthorsUndeclared, "null", "Hugging Face bookkeeping", nullptr, nullptr},
      {"torch_dtype", B, kAuthorsUndeclared, "null", "Hugging Face bookkeeping", nullptr, nullptr},
      {"transformers_version", B, kAuthorsUndeclared, "null", "Hugging Face bookkeeping", nullptr, nullptr},
      {"_name_or_path", B, kAuthorsUndeclared, "null", "Hugging Face bookkeeping", nullptr, nullptr},
      {"is_decoder", B, kAuthorsUndeclared, "null", "Hugging Face bookkeeping", nullptr, nullptr},
      {"is_encoder_decoder", B, kAuthorsUndeclared, "null", "Hugging Face bookkeeping", nullptr, nullptr},
      {"add_cross_attention", B, kAuthorsUndeclared, "null", "Hugging Face bookkeeping", nullptr, nullptr},
      {"torchscript", B, kAuthorsUndeclared, "null", "Hugging Face bookkeeping", nullptr, nullptr},
  };
  return fields;
}

}  // namespace ddl
