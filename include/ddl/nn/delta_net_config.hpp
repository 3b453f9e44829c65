#pragma once
// ddl/nn/delta_net_config.hpp: the full configuration of a DeltaNet, the presets of SPEC §7, and a
// string key/value form of it (checkpoints store it; the PyTorch loader rebuilds the net from it).
//
// Presets (the residual kind is independent: "code" + additive is the plain residual baseline):
//   code : k-Map, SqrtEps eps_k = 1e-5, linear gate, beta0 = 1, SigmoidScaled value (s = 4) on raw
//          x / x_in, structured CC for dv > 1, RMSNorm eps = 1e-5            (the authors' code)
//   paper: as code, but Linear value on c and free CC weights                 (latest paper)
//   v1   : auxiliary MLP_k(Pool X) direction, AddEps, two-layer tanh gate, value from the branch
#include <map>
#include <sstream>
#include <string>

#include "ddl/core/error.hpp"
#include "ddl/core/parse.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/activation.hpp"
#include "ddl/nn/compressor.hpp"
#include "ddl/nn/delta_block.hpp"
#include "ddl/nn/delta_residual.hpp"

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
  std::string preset = "code";
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
    block.residual.validate(fn);
  }

  // String form of every option, for checkpoint metadata.
  std::map<std::string, std::string> toKeyValues() const {
    std::map<std::string, std::string> kv;
    auto put = [&kv](const std::string& k, const auto& v) {
      std::ostringstream os;
      os.precision(17);
      os << v;
      kv[k] = os.str();
    };
    const DeltaResidualOptions& r = block.residual;
    put("input_dim", inputDim);
    put("classes", classes);
    put("d", d);
    put("depth", depth);
    put("dv", dv);
    put("learned_expansion", learnedExpansion ? 1 : 0);
    put("final_norm_eps", finalNormEps);
    put("preset", preset);
    put("hidden", block.hidden > 0 ? block.hidden : 4 * d);
    put("activation", toString(block.activation));
    put("norm_eps", block.normEps);
    put("compressor", toString(block.compressor));
    put("compressor_kernel", block.compressorKernel);
    put("residual", toString(r.residual));
    put("direction", toString(r.direction));
    put("direction_norm", toString(r.norm));
    put("eps_k", r.epsK);
    put("gate", toString(r.gate));
    put("gate_hidden", r.gateHidden);
    put("beta0", r.beta0);
    put("value", toString(r.value));
    put("value_scale", r.valueScale);
    put("value_constant", r.valueConstant);
    put("aux_hidden", r.auxHidden > 0 ? r.auxHidden : (d / 4 > 0 ? d / 4 : 1));
    put("aux_activation", toString(r.auxActivation));
    return kv;
  }

  // Inverse of toKeyValues; every key must be present and parse completely.
  static DeltaNetConfig fromKeyValues(const std::map<std::string, std::string>& kv) {
    const char* fn = "ddl::DeltaNetConfig::fromKeyValues";
    auto get = [&](const std::string& k) -> const std::string& {
      auto it = kv.find(k);
      if (it == kv.end()) throw ValueError(message(fn, "missing key '", k, "'"));
      return it->second;
    };
    // Every number is checked completely (ddl/core/parse.hpp): "1e300", "nan" or "2.5" for a size
    // is refused instead of being cast. Sizes are capped at 2^24, far above any MLP's, so that
    // products of two of them cannot overflow.
    auto num = [&](const std::string& k) { return parseNumber(std::string(fn) + ": key '" + k + "'", get(k)); };
    auto idx = [&](const std::string& k, Index lo) {
      return parseInteger<Index>(std::string(fn) + ": key '" + k + "'", get(k), lo, kMaxSize);
    };
    DeltaNetConfig c;
    c.inputDim = idx("input_dim", 1);
    c.classes = idx("classes", 2);
    c.d = idx("d", 1);
    c.depth = idx("depth", 0);
    c.dv = idx("dv", 1);
    c.learnedExpansion = parseInteger<int>(std::string(fn) + ": key 'learned_expansion'", get("learned_expansion"), 0, 1) != 0;
    c.finalNormEps = num("final_norm_eps");
    c.preset = get("preset");
    c.block.hidden = idx("hidden", 0);
    c.block.activation = parseActivation(get("activation"));
    c.block.normEps = num("norm_eps");
    c.block.compressor = parseCompressorKind(get("compressor"));
    c.block.compressorKernel = idx("compressor_kernel", 1);
    DeltaResidualOptions& r = c.block.residual;
    r.residual = parseResidualKind(get("residual"));
    r.direction = parseDirectionSource(get("direction"));
    r.norm = parseDirectionNorm(get("direction_norm"));
    r.epsK = num("eps_k");
    r.gate = parseGateKind(get("gate"));
    r.gateHidden = idx("gate_hidden", 1);
    r.beta0 = num("beta0");
    r.value = parseValueKind(get("value"));
    r.valueScale = num("value_scale");
    r.valueConstant = num("value_constant");
    r.auxHidden = idx("aux_hidden", 0);
    r.auxActivation = parseActivation(get("aux_activation"));
    c.validate();
    return c;
  }
};

// Sets the options a preset fixes (SPEC §7) and records its name; the shape fields and the residual
// kind are left alone. Throws ValueError for an unknown preset.
inline void applyPreset(DeltaNetConfig& c, const std::string& preset) {
  DeltaResidualOptions& r = c.block.residual;
  const ResidualKind kind = r.residual;
  r = DeltaResidualOptions{};
  r.residual = kind;
  c.block.normEps = 1e-5;
  c.finalNormEps = 1e-5;
  if (preset == "code") {
    c.block.compressor = CompressorKind::Structured;
  } else if (preset == "paper") {
    r.value = ValueKind::LinearOnC;
    c.block.compressor = CompressorKind::Free;
  } else if (preset == "v1") {
    r.direction = DirectionSource::AuxiliaryMlp;
    r.norm = DirectionNorm::AddEps;
    r.gate = GateKind::TwoLayerTanh;
    r.value = ValueKind::FromBranch;
    c.block.compressor = CompressorKind::Free;
  } else {
    throw ValueError(message("ddl::applyPreset", "unknown preset '", preset, "', expected one of code, paper, v1"));
  }
  c.preset = preset;
}

}  // namespace ddl
