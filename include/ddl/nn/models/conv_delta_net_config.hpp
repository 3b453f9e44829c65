#pragma once
// ddl/nn/models/conv_delta_net_config.hpp: the configuration of a ConvDeltaNet (docs/spec.md §4) and its string
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
#include <cmath>
#include <string>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/key_values.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/delta_block.hpp"
#include "ddl/nn/models/delta_net_config.hpp"

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
  Preset preset = Preset::Code;  // the preset applied last (applyPreset)
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
    require(block.compressorKernel >= 1, fn, "compressorKernel must be >= 1, got ", block.compressorKernel);
    require(!block.compressorReadInit || std::isfinite(*block.compressorReadInit), fn,
            "compressorReadInit must be finite, got ", block.compressorReadInit.value_or(0.0));
    block.residual.validate(fn);
  }

  // String form of every option, for checkpoint metadata ("model": "conv_delta_net" tells it from a
  // DeltaNetConfig).
  KeyValues toKeyValues() const {
    auto list = [](const std::vector<Index>& v) {
      std::string s;
      for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
      return s;
    };
    KeyValues kv;
    KeyValueWriter w(kv);
    w.put("model", "conv_delta_net");
    w.put("channels", channels);
    w.put("height", height);
    w.put("width", width);
    w.put("classes", classes);
    w.put("widths", list(widths));
    w.put("depths", list(depths));
    w.put("branch_ratio", branchRatio);
    w.put("stem_kernel", stemKernel);
    w.put("stem_stride", stemStride);
    putSharedOptions(w, *this);
    return kv;
  }

  // Inverse of toKeyValues; every key must be present and parse completely; sizes are capped at 2^24.
  static ConvDeltaNetConfig fromKeyValues(const KeyValues& kv) {
    const char* fn = "ddl::ConvDeltaNetConfig::fromKeyValues";
    const KeyValueReader in(kv, fn, DeltaNetConfig::kMaxSize);
    if (in.text("model") != "conv_delta_net")
      throw ValueError(message(fn, "model is '", in.text("model"), "', expected 'conv_delta_net'"));
    ConvDeltaNetConfig c;
    c.channels = in.size("channels", 1);
    c.height = in.size("height", 1);
    c.width = in.size("width", 1);
    c.classes = in.size("classes", 2);
    c.widths = in.sizes("widths", 1);
    c.depths = in.sizes("depths", 0);
    c.branchRatio = in.size("branch_ratio", 1);
    c.stemKernel = in.size("stem_kernel", 1);
    c.stemStride = in.size("stem_stride", 1);
    readSharedOptions(in, c);
    c.validate();
    return c;
  }
};

// Sets the options a preset fixes (docs/spec.md §7), as applyPreset(DeltaNetConfig&) does; shapes and the
// residual kind are left alone.
inline void applyPreset(ConvDeltaNetConfig& c, Preset preset) {
  DeltaNetConfig v;
  v.block = c.block;
  applyPreset(v, preset);
  c.block = v.block;
  c.block.hidden = 0;
  c.finalNormEps = v.finalNormEps;
  c.preset = v.preset;
}

// The same by name (a command line's --preset). Throws ValueError for an unknown preset.
inline void applyPreset(ConvDeltaNetConfig& c, const std::string& preset) {
  applyPreset(c, parsePreset(preset, "ddl::applyPreset"));
}

}  // namespace ddl
