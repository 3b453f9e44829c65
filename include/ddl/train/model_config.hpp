#pragma once
// ddl/train/model_config.hpp: the configuration of a DeltaNet or ConvDeltaNet read back from the
// model_config metadata of a checkpoint, checked against the file's tensor shapes before any model
// is built from it.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ddl/core/requires_json.hpp"  // before nlohmann: a clear error without it
#include <nlohmann/json.hpp>

#include "ddl/core/error.hpp"
#include "ddl/core/json_text.hpp"
#include "ddl/core/types.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/io/safetensors.hpp"
#include "ddl/nn/layers/beta_gate.hpp"
#include "ddl/nn/models/conv_delta_net_config.hpp"
#include "ddl/nn/models/delta_lm_config.hpp"
#include "ddl/nn/models/delta_net_config.hpp"
#include "ddl/train/model.hpp"

namespace ddl {

namespace detail {
// Metadata must not decide an allocation the file cannot back: before a model is built from a
// checkpoint's model_config, the header's tensor shapes (no data is read) must confirm every size
// the configuration names. A 188 KB file claiming d = 4096 is refused here, not after 2 GB.
inline void requireTensorShape(const SafetensorsHeader& h, const std::string& name,
                               const std::vector<std::int64_t>& shape) {
  const TensorInfo* t = h.find(name);
  if (t == nullptr || t->shape != shape)
    throw IoError(message("ddl::configFromCheckpoint", h.path, ": model_config implies tensor \"", name, "\" ",
                          shapeString(shape), ", the file ", t ? "holds " + shapeString(t->shape) : std::string("has none"),
                          " (model_config does not match the tensors; nothing was built)"));
}
inline void requireNoTensor(const SafetensorsHeader& h, const std::string& name, const char* why) {
  if (h.find(name) != nullptr)
    throw IoError(message("ddl::configFromCheckpoint", h.path, ": the file holds \"", name, "\", but model_config ",
                          why, " (model_config does not match the tensors; nothing was built)"));
}
inline void checkConfigShapes(const DeltaNetConfig& c, const SafetensorsHeader& h) {
  const Index hidden = c.block.hidden > 0 ? c.block.hidden : 4 * c.d;
  requireTensorShape(h, "input.weight", {c.d, c.inputDim});
  requireTensorShape(h, "norm.weight", {c.d});
  requireTensorShape(h, "head.weight", {c.classes, c.d});
  for (Index i = 0; i < c.depth; ++i)
    requireTensorShape(h, "blocks." + std::to_string(i) + ".mlp.fc1.weight", {hidden, c.d});
  requireNoTensor(h, "blocks." + std::to_string(c.depth) + ".norm.weight",
                  ("has depth " + std::to_string(c.depth)).c_str());
  const DeltaResidualOptions& r = c.block.residual;
  if (c.dv > 1) {
    if (c.block.compressor == CompressorKind::Structured) requireTensorShape(h, "readout.read.weight", {c.dv});
    else requireTensorShape(h, "readout.weight", {c.d, c.dv});
    // The kernel [d, K], or the one [K] the shared-kernel form saved (io/checkpoint.hpp loads it as d rows).
    const std::string kernel = "blocks.0.compress.conv.weight";
    const TensorInfo* t = h.find(kernel);
    if (c.depth > 0 && c.block.compressor == CompressorKind::Structured &&
        !(t != nullptr && t->shape == std::vector<std::int64_t>{c.block.compressorKernel}))
      requireTensorShape(h, kernel, {c.d, c.block.compressorKernel});
  }
  if (c.depth > 0 && r.residual != ResidualKind::Additive) {
    if (r.direction == DirectionSource::AuxiliaryMlp)
      requireTensorShape(h, "blocks.0.delta.direction.fc1.weight", {r.auxHidden > 0 ? r.auxHidden : std::max<Index>(c.d / 4, 1), c.d});
    // The gate's tensors from its own list (every form); the scalar bias holds no size and version 2 files
    // name it otherwise (io/checkpoint.hpp).
    for (const GateTensor& t : gateTensors(c.d, r.gateOptions()))
      if (t.shape != std::vector<Index>{1})
        requireTensorShape(h, std::string("blocks.0.delta.gate.") + t.name, {t.shape.begin(), t.shape.end()});
  }
}
inline void checkConfigShapes(const ConvDeltaNetConfig& c, const SafetensorsHeader& h) {
  requireTensorShape(h, "stem.weight", {c.widths[0], c.channels, c.stemKernel, c.stemKernel});
  requireTensorShape(h, "norm.weight", {c.widths.back()});
  requireTensorShape(h, "head.weight", {c.classes, c.widths.back()});
  Index block = 0;
  for (std::size_t s = 0; s < c.widths.size(); ++s) {
    if (s > 0)
      requireTensorShape(h, "transitions." + std::to_string(s - 1) + ".conv.weight", {c.widths[s], c.widths[s - 1], 3, 3});
    for (Index i = 0; i < c.depths[s]; ++i, ++block)
      requireTensorShape(h, "blocks." + std::to_string(block) + ".conv.conv1.weight",
                         {c.branchRatio * c.widths[s], c.widths[s], 3, 3});
  }
  requireNoTensor(h, "blocks." + std::to_string(block) + ".norm.weight",
                  ("has " + std::to_string(block) + " blocks").c_str());
}
inline void checkConfigShapes(const DeltaLMConfig& c, const SafetensorsHeader& h) {
  requireTensorShape(h, "embed.weight", {c.vocab, c.d});
  requireTensorShape(h, "norm.weight", {c.d});
  if (c.tiedHead)
    requireNoTensor(h, "head.weight", "ties the head to the embedding");
  else
    requireTensorShape(h, "head.weight", {c.vocab, c.d});
  for (Index i = 0; i < c.depth; ++i) {
    const std::string b = "blocks." + std::to_string(i);
    // q, k, v map d to heads * head_dim features (head_dim need not be d / heads: the authors' default is 128).
    requireTensorShape(h, b + ".attn.q.weight", {c.heads * c.headDim(), c.d});
    requireTensorShape(h, b + ".mlp.fc1.weight", {c.resolvedHidden(), c.d});
  }
  requireNoTensor(h, "blocks." + std::to_string(c.depth) + ".attn_norm.weight",
                  ("has depth " + std::to_string(c.depth)).c_str());
  // dv multiplies every state: a dv the tensors do not confirm would allocate d x dv per token.
  if (c.dv > 1 && (c.stateCompressor == StateCompressorKind::OverTokens || c.block.compressor != CompressorKind::Free))
    requireTensorShape(h, "readout.read.weight", {c.dv});
  else if (c.dv > 1)
    requireTensorShape(h, "readout.weight", {c.d, c.dv});
  else
    requireNoTensor(h, "readout.read.weight", "has dv 1");
}
}  // namespace detail

// The model configuration stored in a checkpoint by Trainer (model_config JSON); Config is
// DeltaNetConfig, ConvDeltaNetConfig or DeltaLMConfig (anything with a static fromKeyValues). Before returning,
// the checkpoint's tensor shapes must confirm every size of the configuration (detail::checkConfigShapes),
// so that building the model it describes allocates no more than the file backs.
template <class Config = DeltaNetConfig>
Config configFromCheckpoint(const CheckpointMeta& meta, const std::string& path) {
  const char* fn = "ddl::configFromCheckpoint";
  if (meta.modelConfig.empty()) throw IoError(message(fn, path, ": the checkpoint has no model_config metadata"));
  std::map<std::string, std::string> kv;
  const nlohmann::json j = parseJsonText<nlohmann::json>(meta.modelConfig, fn, path + ": model_config");
  try {
    kv = j.get<std::map<std::string, std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw IoError(message(fn, path, ": model_config is not a JSON object of strings: ", excerpt(e.what(), 2 * kExcerptBytes)));
  }
  const Config config = Config::fromKeyValues(kv);
  detail::checkConfigShapes(config, readSafetensorsHeader(path));
  return config;
}

}  // namespace ddl
