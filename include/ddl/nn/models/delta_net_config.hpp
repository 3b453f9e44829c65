#pragma once
// ddl/nn/models/delta_net_config.hpp: the full configuration of a DeltaNet, the presets of docs/spec.md §7, and a
// string key/value form of it (checkpoints store it; the PyTorch loader rebuilds the net from it).
//
// Presets (the residual kind is independent: "code" + additive is the plain residual baseline):
//   code : k-Map, SqrtEps eps_k = 1e-5, linear gate, beta0 = 1, SigmoidScaled value (s = 4) on raw
//          x / x_in, structured CC (K = 4 per feature) for dv > 1, RMSNorm eps = 1e-5 (the authors' code)
//   paper: as code, but Linear value on c and free CC weights                 (latest paper)
//   v1   : auxiliary MLP_k(Pool X) direction, AddEps, two-layer tanh gate, value from the branch
#include <cmath>
#include <map>
#include <string>

#include "ddl/core/error.hpp"
#include "ddl/core/key_values.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/activation.hpp"
#include "ddl/nn/blocks/compressor.hpp"
#include "ddl/nn/blocks/delta_block.hpp"
#include "ddl/nn/blocks/delta_residual.hpp"
#include "ddl/nn/models/preset.hpp"

namespace ddl {

struct DeltaNetConfig {
  static constexpr Index kMaxSize = Index(1) << 24;  // upper bound of every size read from text

  Index inputDim = 784;
  Index classes = 10;
  Index d = 256;
  Index depth = 4;
  Index dv = 1;
  bool learnedExpansion = false;  // EC (true) or plain repetition (false), dv > 1 only
  double finalNormEps = 1e-5;
  Preset preset = Preset::Code;  // the preset applied last (applyPreset)
  DeltaBlockOptions block;

  // Throws ValueError naming the option and its value.
  void validate() const {
    const char* fn = "ddl::DeltaNetConfig";
    require(inputDim >= 1, fn, "inputDim must be >= 1, got ", inputDim);
    require(classes >= 2, fn, "classes must be >= 2, got ", classes);
    require(d >= 1, fn, "d must be >= 1, got ", d);
    require(depth >= 0, fn, "depth must be >= 0, got ", depth);
    require(dv >= 1, fn, "dv must be >= 1, got ", dv);
    require(block.hidden >= 0, fn, "hidden must be >= 0 (0 means 4 d), got ", block.hidden);
    require(block.normEps >= 0 && finalNormEps >= 0, fn, "RMSNorm eps must be >= 0");
    require(!block.compressorReadInit || std::isfinite(*block.compressorReadInit), fn,
            "compressorReadInit must be finite, got ", block.compressorReadInit.value_or(0.0));
    block.residual.validate(fn);
  }

  // String form of every option, for checkpoint metadata. hidden and aux_hidden are written resolved
  // (0 = default becomes 4 d and d / 4), so a reader needs no default rule.
  KeyValues toKeyValues() const;

  // Inverse of toKeyValues; every key must be present and parse completely. Sizes are capped at 2^24,
  // far above any MLP's, so that products of two of them cannot overflow.
  static DeltaNetConfig fromKeyValues(const KeyValues& kv);
};

// The keys every net configuration shares (the expanded state, the presets and the block's residual
// options), for DeltaNetConfig and ConvDeltaNetConfig alike. aux_hidden is written as set (0 = d / 4).
template <class Config>
void putSharedOptions(KeyValueWriter& w, const Config& c) {
  const DeltaResidualOptions& r = c.block.residual;
  w.put("dv", c.dv);
  w.put("learned_expansion", c.learnedExpansion);
  w.put("final_norm_eps", c.finalNormEps);
  w.put("preset", std::string(toString(c.preset)));
  w.put("activation", toString(c.block.activation));
  w.put("norm_eps", c.block.normEps);
  w.put("compressor", toString(c.block.compressor));
  w.put("compressor_kernel", c.block.compressorKernel);
  // Written resolved (unset = 1/dv), so a reader needs no default rule.
  w.put("compressor_read_init", c.block.compressorReadInit.value_or(1.0 / static_cast<double>(c.dv)));
  w.put("residual", toString(r.residual));
  w.put("direction", toString(r.direction));
  w.put("direction_norm", toString(r.norm));
  w.put("eps_k", r.epsK);
  w.put("gate", toString(r.gate));
  w.put("gate_hidden", r.gateHidden);
  w.put("beta0", r.beta0);
  // Written only when it is not the default 2: the configurations, checkpoints and pinned bytes of every
  // model with the paper's range stay exactly as before the cap existed, and a reader without the key
  // (every checkpoint written before it) reads 2.
  if (r.betaMax != 2.0) w.put("beta_max", r.betaMax);
  w.put("value", toString(r.value));
  w.put("value_scale", r.valueScale);
  w.put("value_constant", r.valueConstant);
  w.put("aux_hidden", r.auxHidden);
  w.put("aux_activation", toString(r.auxActivation));
}

template <class Config>
void readSharedOptions(const KeyValueReader& in, Config& c) {
  c.dv = in.size("dv", 1);
  c.learnedExpansion = in.flag("learned_expansion");
  c.finalNormEps = in.number("final_norm_eps");
  c.preset = parsePreset(in.text("preset"), "ddl::readSharedOptions");
  c.block.activation = parseActivation(in.text("activation"));
  c.block.normEps = in.number("norm_eps");
  c.block.compressor = parseCompressorKind(in.text("compressor"));
  c.block.compressorKernel = in.size("compressor_kernel", 1);
  // Absent from checkpoints written before the per-feature kernel: their read vectors started at 1/dv.
  c.block.compressorReadInit.reset();
  if (in.has("compressor_read_init")) c.block.compressorReadInit = in.number("compressor_read_init");
  DeltaResidualOptions& r = c.block.residual;
  r.residual = parseResidualKind(in.text("residual"));
  r.direction = parseDirectionSource(in.text("direction"));
  r.norm = parseDirectionNorm(in.text("direction_norm"));
  r.epsK = in.number("eps_k");
  r.gate = parseGateKind(in.text("gate"));
  r.gateHidden = in.size("gate_hidden", 1);
  r.beta0 = in.number("beta0");
  r.betaMax = in.has("beta_max") ? in.number("beta_max") : 2.0;
  r.value = parseValueKind(in.text("value"));
  r.valueScale = in.number("value_scale");
  r.valueConstant = in.number("value_constant");
  r.auxHidden = in.size("aux_hidden", 0);
  r.auxActivation = parseActivation(in.text("aux_activation"));
}

inline KeyValues DeltaNetConfig::toKeyValues() const {
  KeyValues kv;
  KeyValueWriter w(kv);
  w.put("input_dim", inputDim);
  w.put("classes", classes);
  w.put("d", d);
  w.put("depth", depth);
  w.put("hidden", block.hidden > 0 ? block.hidden : 4 * d);
  putSharedOptions(w, *this);
  w.put("aux_hidden", block.residual.auxHidden > 0 ? block.residual.auxHidden : (d / 4 > 0 ? d / 4 : 1));
  return kv;
}

inline DeltaNetConfig DeltaNetConfig::fromKeyValues(const KeyValues& kv) {
  const KeyValueReader in(kv, "ddl::DeltaNetConfig::fromKeyValues", kMaxSize);
  DeltaNetConfig c;
  c.inputDim = in.size("input_dim", 1);
  c.classes = in.size("classes", 2);
  c.d = in.size("d", 1);
  c.depth = in.size("depth", 0);
  c.block.hidden = in.size("hidden", 0);
  readSharedOptions(in, c);
  c.validate();
  return c;
}

// Sets the options a preset fixes (docs/spec.md §7) and records its name; the shape fields and the residual
// kind are left alone.
inline void applyPreset(DeltaNetConfig& c, Preset preset) {
  DeltaResidualOptions& r = c.block.residual;
  const ResidualKind kind = r.residual;
  r = DeltaResidualOptions{};
  r.residual = kind;
  c.block.normEps = 1e-5;
  c.finalNormEps = 1e-5;
  switch (preset) {
    case Preset::Code: c.block.compressor = CompressorKind::Structured; break;
    case Preset::Paper:
      r.value = ValueKind::LinearOnC;
      c.block.compressor = CompressorKind::Free;
      break;
    case Preset::V1:
      r.direction = DirectionSource::AuxiliaryMlp;
      r.norm = DirectionNorm::AddEps;
      r.gate = GateKind::TwoLayerTanh;
      r.value = ValueKind::FromBranch;
      c.block.compressor = CompressorKind::Free;
      break;
  }
  c.preset = preset;
}

// The same by name (a command line's --preset). Throws ValueError for an unknown preset.
inline void applyPreset(DeltaNetConfig& c, const std::string& preset) {
  applyPreset(c, parsePreset(preset, "ddl::applyPreset"));
}

}  // namespace ddl
