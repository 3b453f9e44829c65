#pragma once
// ddl/train/authors_config.hpp: the config.json of the authors' models (github.com/yifanzhang-pro/
// deep-delta-learning, their GPTConfig as save_pretrained writes it) mapped onto DeltaLMConfig, and back,
// through the table of their fields (train/authors_config_fields.hpp). The folder (config.json + weights)
// is read and written by train/authors_model.hpp; the format, the table and what is refused:
// docs/authors_models.md.
// Any other value of a DefaultOnly field, a value of the wrong JSON type and a key outside the table are
// refused with a ValueError naming the field and the value.
#include <cmath>
#include <string>

#include "ddl/core/requires_json.hpp"  // before nlohmann: a clear error without it
#include <nlohmann/json.hpp>

#include "ddl/core/error.hpp"
#include "ddl/core/json_text.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/attention_options.hpp"
#include "ddl/nn/models/delta_lm_config.hpp"
#include "ddl/train/authors_config_fields.hpp"

namespace ddl {

// their floor(8 / 3 * hidden_size), in double as Python computes it.
inline Index authorsMlpWidth(Index d) { return static_cast<Index>(std::floor(8.0 / 3.0 * static_cast<double>(d))); }

// The DeltaLMConfig of a config.json (parsed; `source` names it in messages) of the given variant (read
// from the tensor names, train/authors_model.hpp). Throws ValueError naming the field and its value.
inline DeltaLMConfig authorsConfigToDeltaLM(const nlohmann::json& j, AuthorsVariant variant, const std::string& source) {
  const char* fn = "ddl::authorsConfigToDeltaLM";
  if (!j.is_object()) throw ValueError(message(fn, source, ": expected a JSON object, found ", j.type_name()));
  DeltaLMConfig c;
  if (detail::isExpanded(variant)) applyVariant(c, toString(variant));
  if (variant == AuthorsVariant::Baseline) c.block.residual.residual = ResidualKind::Additive;
  detail::AuthorsConfigRead r{c, variant, source};
  const auto& fields = authorsConfigFields();
  // A field the file leaves out has their default (their GPTConfig's, or getattr's), not ddl's: every
  // Mapped field the variant reads starts at its default; only what the file gives counts as given.
  for (const auto& f : fields) {
    const bool reads = f.scope == kAuthorsUndeclared || (f.scope & authorsScopeBit(variant)) != 0;
    if (f.use == AuthorsFieldUse::Mapped && reads) f.read(r, f.name, nlohmann::json::parse(f.defaultJson));
  }
  r.stateKernelGiven = r.channelsGiven = false;
  r.rmsNormEps.reset();
  for (auto it = j.begin(); it != j.end(); ++it) {
    const AuthorsField* f = nullptr;
    for (const auto& e : fields)
      if (it.key() == e.name) f = &e;
    if (f == nullptr)
      throw ValueError(message(fn, source, ": unknown field '", excerpt(it.key()), "' = ", jsonExcerpt(it.value()),
                               " (not a field of the authors' GPTConfig; docs/authors_models.md)"));
    if (f->use == AuthorsFieldUse::Bookkeeping) continue;
    const bool declared = f->scope == kAuthorsUndeclared || (f->scope & authorsScopeBit(variant)) != 0;
    if (f->use == AuthorsFieldUse::Mapped && declared) {
      f->read(r, f->name, it.value());
      continue;
    }
    const nlohmann::json def = nlohmann::json::parse(f->defaultJson);
    if (it.value() != def)
      throw ValueError(message(fn, source, ": field '", f->name, "' = ", jsonExcerpt(it.value()),
                               " is not supported (accepted: only its default ", def.dump(), "; ", f->meaning,
                               declared ? "" : std::string("; not read by the ") + toString(variant) + " model",
                               ")"));
  }
  // head_dim: ddl keeps 0 for d / heads (its default), as its own checkpoints read it.
  c.attention.headDim = c.heads >= 1 && c.d % c.heads == 0 && r.headDim == c.d / c.heads ? 0 : r.headDim;
  // The eps of their norms: q_rms, k_rms and subln fix 1e-5; o_norm (the output gate without using_groupnorm)
  // takes rms_norm_eps, and so do the baseline's ln_1, ln_2, ln_f (gpt_base.py); the DDL files' fix 1e-5.
  const bool baseline = variant == AuthorsVariant::Baseline, gateNorm = detail::authorsGateNorm(c.attention);
  const double rmsEps = r.rmsNormEps.value_or(1e-5);
  if (r.rmsNormEps && !baseline && !gateNorm && rmsEps != 1e-5)
    throw ValueError(message(fn, source, ": field 'rms_norm_eps' = ", jsonExcerpt(j.at("rms_norm_eps")),
                             " is not supported (accepted: only its default 1e-05; the ", toString(variant),
                             " model reads it only for the output gate's o_norm, use_output_gate without "
                             "using_groupnorm, which this config.json does not have)"));
  c.attention.qkNormEps = 1e-5;
  c.attention.outputNormEps = gateNorm ? rmsEps : 1e-5;
  if (baseline) c.block.normEps = c.finalNormEps = rmsEps;
  // Their value: the constant when ddl_v_constant (their dv = 1 files: ddl_v_dim1_constant), else
  // sigmoid-scaled or, with ddl_v_sigmoid false, linear on the same input.
  c.block.residual.value = r.vConstant ? ValueKind::Constant
                           : r.vSigmoid ? ValueKind::SigmoidScaled
                                        : ValueKind::LinearOnInput;
  c.hidden = authorsMlpWidth(c.d);
  if (detail::isTc(variant)) {
    c.convKernel = r.stateKernel;
    if (variant == AuthorsVariant::TcEc) c.inputEmbedKernel = r.embedKernel == r.stateKernel ? 0 : r.embedKernel;
  } else if (detail::isExpanded(variant)) {
    // cc-ec's GPTConfig takes the kernel from the channels when only they are given.
    if (variant == AuthorsVariant::CcEc && r.channelsGiven && !r.stateKernelGiven) r.stateKernel = c.dv;
    require(r.stateKernel == c.dv, fn, source, ": field 'ddl_state_shortconv_kernel_size' = ", r.stateKernel,
            " must equal ddl_value_channels = ", c.dv, " (their CC compressor's construction computes only then)");
    c.block.compressorKernel = r.stateKernel;
    if (detail::hasEc(variant)) c.convKernel = r.embedKernel;
  }
  c.validate();
  return c;
}

// Throws ValueError unless the authors' model of c's variant computes what c does (names what differs).
inline void requireAuthorsExpressible(const DeltaLMConfig& c, const char* fn) {
  c.validate();
  const AuthorsVariant v = authorsVariantOf(c);
  const auto& res = c.block.residual;
  const auto no = [&](const char* what) { return std::string(what) + " has no counterpart in the authors' models"; };
  require(c.tiedHead, fn, no("an untied head"));
  const AttentionOptions& a = c.attention;
  if (v == AuthorsVariant::Baseline) {  // gpt_base.py: ln_1, ln_2, ln_f (and o_norm) take rms_norm_eps
    require(c.block.normEps == c.finalNormEps, fn, no("a final RMSNorm eps other than the blocks' in the baseline"),
            " (norm eps ", c.block.normEps, ", final ", c.finalNormEps, "; their rms_norm_eps is both)");
    require(!detail::authorsGateNorm(a) || a.outputNormEps == c.block.normEps, fn,
            no("an output-gate norm eps other than the blocks' in the baseline"), " (output_norm_eps ",
            a.outputNormEps, ", norm eps ", c.block.normEps, "; their rms_norm_eps is both)");
  } else {
    require(c.block.normEps == 1e-5 && c.finalNormEps == 1e-5, fn, no("a block or final RMSNorm eps other than 1e-5"));
  }
  require(!c.qkNorm || a.qkNormEps == 1e-5, fn, no("a QK-norm eps other than 1e-5"), " (qk_norm_eps ", a.qkNormEps,
          "; their q_rms, k_rms fix 1e-5)");
  require(!a.groupNorm || a.outputNormEps == 1e-5, fn, no("a using_groupnorm eps other than 1e-5"),
          " (output_norm_eps ", a.outputNormEps, "; their subln fixes 1e-5)");
  require(c.resolvedHidden() == authorsMlpWidth(c.d), fn, no("a SwiGLU width other than floor(8/3 d)"), " (hidden ",
          c.resolvedHidden(), ", theirs ", authorsMlpWidth(c.d), ")");
  require(res.direction == DirectionSource::BranchOutput && res.norm == DirectionNorm::SqrtEps, fn,
          no("a direction other than kmap / sqrt_eps"));
  if (v == AuthorsVariant::Baseline) return;
  // Their gate is 2 sigma(z): a model trained under another cap computes something else there.
  require(res.betaMax == 2.0, fn, no("a gate cap betaMax other than 2"), " (betaMax ", res.betaMax,
          "; their beta = 2 sigma(z))");
  require(res.gate == GateKind::Linear || res.gate == GateKind::TwoLayerTanh, fn,
          no("a gate other than linear or two_layer_tanh"));
  require(res.value == ValueKind::SigmoidScaled || res.value == ValueKind::LinearOnInput ||
              res.value == ValueKind::Constant,
          fn, no("a value other than sigmoid_scaled, linear_on_input or constant"));
  if (detail::isExpanded(v) && !detail::isTc(v)) {
    require(c.block.compressor == CompressorKind::Structured, fn, no("the free CC compressor"));
    require(c.block.compressorKernel == c.dv, fn, no("a CC kernel size other than dv"), " (kernel ",
            c.block.compressorKernel, ", dv ", c.dv, "; their construction computes only with kernel = dv)");
  }
}

// config.json of c as their save_pretrained writes it: every field their variant's GPTConfig declares,
// plus architectures, model_type and torch_dtype. Throws as requireAuthorsExpressible.
inline nlohmann::json authorsConfigJson(const DeltaLMConfig& c, const std::string& torchDtype) {
  requireAuthorsExpressible(c, "ddl::authorsConfigJson");
  const AuthorsVariant v = authorsVariantOf(c);
  nlohmann::json j = nlohmann::json::object();
  j["architectures"] = nlohmann::json::array({v == AuthorsVariant::Baseline ? "GPTBase" : "GPT"});
  j["model_type"] = "nanogpt-pro";
  j["torch_dtype"] = torchDtype;
  for (const auto& f : authorsConfigFields()) {
    if ((f.scope & authorsScopeBit(v)) == 0) continue;
    j[f.name] = f.use == AuthorsFieldUse::Mapped ? f.write(c, v) : nlohmann::json::parse(f.defaultJson);
  }
  if (c.ropeBase != 10000.0) j["rope_base"] = c.ropeBase;  // undeclared: written only when it matters
  const double rmsEps = v == AuthorsVariant::Baseline ? c.block.normEps
                        : detail::authorsGateNorm(c.attention) ? c.attention.outputNormEps
                                                               : 1e-5;
  if (rmsEps != 1e-5) j["rms_norm_eps"] = rmsEps;  // undeclared too
  if (v == AuthorsVariant::Baseline) j["is_decoder"] = true;  // GPTBase sets it; HF writes what differs
  return j;
}

}  // namespace ddl
