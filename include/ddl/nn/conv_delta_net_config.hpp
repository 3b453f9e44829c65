#pragma once
// ddl/nn/conv_delta_net_config.hpp: the configuration of a ConvDeltaNet (SPEC §4) and its string
// key/value form (checkpoints store it as JSON, like DeltaNetConfig).
//
//   image (channels, height, width) -> stem conv k x k (stemWidth... = widths[0]) -> expand to dv
//   -> stage 0: depths[0] DeltaConvBlocks of width widths[0]
//   -> stage s > 0: stride-2 transition widths[s-1] -> widths[s] on the compressed state, re-expand,
//      then depths[s] blocks -> readout CC (dv > 1) -> RMSNorm -> global average pool -> Linear head.
// The branch of a block in stage s is conv 3x3 (widths[s] -> hidden) -> act -> conv 3x3 (-> widths[s])
// with hidden = branchRatio * widths[s]. block.hidden must stay 0 (the width is per stage).
// stemStride 2 makes the stem a stride-2 convolution (padding k/2), so stage 0 runs at ceil(H/2) x ceil(W/2).
// Presets and residual kinds are those of DeltaNetConfig (applyPreset works on block.residual alike).
#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/parse.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/delta_block.hpp"
#include "ddl/nn/delta_net_config.hpp"

namespace ddl {

struct ConvDeltaNetConfig {
  Index channels = 3, height = 32, width = 32;  // input image, CHW per column
  Index classes = 10;
  std::vector<Index> widths{16, 32, 64};  // channels per stage
  std::vector<Index> depths{1, 1, 1};     // blocks per stage
  Index branchRatio = 1;                  // branch hidden channels = branchRatio * stage width
  Index stemKernel = 3;
  Index stemStride = 1;  // 2 halves the resolution before the first stage (4x cheaper stages)
  Index dv = 1;
  bool learnedExpansion = false;  // EC (per-channel scale) or repetition, dv > 1 only
  double finalNormEps = 1e-5;
  std::string preset = "code";
  DeltaBlockOptions block;  // residual options, activation, norm eps, compressor; hidden unused (0)

  Index inputDim() const { return channels * height * width; }
  Index stages() const { return static_cast<Index>(widths.size()); }
  Index totalBlocks() const {
    Index n = 0;
    for (Index v : depths) n += v;
    return n;
  }

  // Throws ValueError naming the option and its value.
  void validate() const {
    const char* fn = "ddl::ConvDeltaNetConfig";
    require(channels >= 1 && height >= 1 && width >= 1, fn, "image shape must be >= 1 on every axis, got (",
            channels, ", ", height, ", ", width, ")");
    require(classes >= 2, fn, "classes must be >= 2, got ", classes);
    require(!widths.empty(), fn, "widths needs at least one stage");
    require(depths.size() == widths.size(), fn, "depths has ", depths.size(), " entries but widths has ",
            widths.size(), " (one per stage)");
    for (Index w : widths) require(w >= 1, fn, "every stage width must be >= 1, got ", w);
    for (Index n : depths) require(n >= 0, fn, "every stage depth must be >= 0, got ", n);
    require(branchRatio >= 1, fn, "branchRatio must be >= 1, got ", branchRatio);
    require(stemKernel >= 1 && stemKernel % 2 == 1, fn, "stemKernel must be odd and >= 1, got ", stemKernel);
    require(stemStride == 1 || stemStride == 2, fn, "stemStride must be 1 or 2, got ", stemStride);
    require(dv >= 1, fn, "dv must be >= 1, got ", dv);
    require(block.hidden == 0, fn, "block.hidden must be 0: the branch width is branchRatio * stage width");
    require(block.normEps >= 0 && finalNormEps >= 0, fn, "RMSNorm eps must be >= 0");
    require(block.compressorKernel >= 1 && block.compressorKernel % 2 == 1, fn,
            "compressorKernel must be odd and >= 1, got ", block.compressorKernel);
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
    auto list = [](const std::vector<Index>& v) {
      std::string s;
      for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
      return s;
    };
    const DeltaResidualOptions& r = block.residual;
    put("model", "conv_delta_net");
    put("channels", channels);
    put("height", height);
    put("width", width);
    put("classes", classes);
    put("widths", list(widths));
    put("depths", list(depths));
    put("branch_ratio", branchRatio);
    put("stem_kernel", stemKernel);
    put("stem_stride", stemStride);
    put("dv", dv);
    put("learned_expansion", learnedExpansion ? 1 : 0);
    put("final_norm_eps", finalNormEps);
    put("preset", preset);
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
    put("aux_hidden", r.auxHidden);
    put("aux_activation", toString(r.auxActivation));
    return kv;
  }

  // Inverse of toKeyValues; every key must be present and parse completely.
  static ConvDeltaNetConfig fromKeyValues(const std::map<std::string, std::string>& kv) {
    const char* fn = "ddl::ConvDeltaNetConfig::fromKeyValues";
    auto get = [&](const std::string& k) -> const std::string& {
      auto it = kv.find(k);
      if (it == kv.end()) throw ValueError(message(fn, "missing key '", k, "'"));
      return it->second;
    };
    // Every number is checked completely (ddl/core/parse.hpp); sizes are capped at 2^24.
    const Index maxSize = DeltaNetConfig::kMaxSize;
    auto what = [&](const std::string& k) { return std::string(fn) + ": key '" + k + "'"; };
    auto num = [&](const std::string& k) { return parseNumber(what(k), get(k)); };
    auto idx = [&](const std::string& k, Index lo) { return parseInteger<Index>(what(k), get(k), lo, maxSize); };
    auto list = [&](const std::string& k, Index lo) {
      std::vector<Index> out;
      const std::string& text = get(k);
      std::size_t start = 0;
      while (start <= text.size()) {
        const std::size_t comma = std::min(text.find(',', start), text.size());
        out.push_back(parseInteger<Index>(what(k), std::string_view(text).substr(start, comma - start), lo, maxSize));
        start = comma + 1;
      }
      return out;
    };
    if (get("model") != "conv_delta_net")
      throw ValueError(message(fn, "model is '", get("model"), "', expected 'conv_delta_net'"));
    ConvDeltaNetConfig c;
    c.channels = idx("channels", 1);
    c.height = idx("height", 1);
    c.width = idx("width", 1);
    c.classes = idx("classes", 2);
    c.widths = list("widths", 1);
    c.depths = list("depths", 0);
    c.branchRatio = idx("branch_ratio", 1);
    c.stemKernel = idx("stem_kernel", 1);
    c.stemStride = idx("stem_stride", 1);
    c.dv = idx("dv", 1);
    c.learnedExpansion = parseInteger<int>(what("learned_expansion"), get("learned_expansion"), 0, 1) != 0;
    c.finalNormEps = num("final_norm_eps");
    c.preset = get("preset");
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

// Sets the options a preset fixes (SPEC §7), as applyPreset(DeltaNetConfig&) does; shapes and the
// residual kind are left alone. Throws ValueError for an unknown preset.
inline void applyPreset(ConvDeltaNetConfig& c, const std::string& preset) {
  DeltaNetConfig v;
  v.block = c.block;
  applyPreset(v, preset);
  c.block = v.block;
  c.block.hidden = 0;
  c.finalNormEps = v.finalNormEps;
  c.preset = v.preset;
}

}  // namespace ddl
