#pragma once
// ddl/train/saved_model.hpp: a model saved with its configuration, and built again from the file alone.
//
//   ddl::saveModel("lm.safetensors", lm);                                  // weights + model_config + preset
//   auto lm2 = ddl::loadModel<ddl::DeltaLM<float>>("lm.safetensors");      // the same model, no config by hand
//
// Model is DeltaNet, ConvDeltaNet or DeltaLM (S float or double), or any model whose config() has
// toKeyValues() / fromKeyValues() and a detail::checkConfigShapes overload (train/model_config.hpp), and
// which is constructible from that configuration. The file is an ordinary checkpoint
// (io/checkpoint.hpp): loadCheckpoint reads it into a model built by hand, and a Trainer's checkpoint
// loads here too.
#include <string>
#include <type_traits>
#include <utility>

#include "ddl/core/error.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/train/model.hpp"
#include "ddl/train/model_config.hpp"

namespace ddl {

// Saves model's parameters with its configuration (model_config) and preset; meta's other fields
// (epoch, step, extra keys) are kept. Throws what saveCheckpoint throws.
template <class Model>
void saveModel(const std::string& path, Model& model, CheckpointMeta meta = CheckpointMeta()) {
  meta.modelConfig = modelConfigJson(model);
  meta.preset = modelPreset(model);
  saveCheckpoint(path, model, meta);
}

// The same with the optimizer's state, so that training can go on from the file (loadCheckpoint with
// the optimizer); loadModel ignores that state.
template <class Model, class Optimizer, std::enable_if_t<detail::IsOptimizer<Optimizer>::value, int> = 0>
void saveModel(const std::string& path, Model& model, Optimizer& optimizer, CheckpointMeta meta = CheckpointMeta()) {
  meta.modelConfig = modelConfigJson(model);
  meta.preset = modelPreset(model);
  saveCheckpoint(path, model, optimizer, meta);
}

// Builds the model a checkpoint's model_config describes and loads its parameters. The configuration
// is checked against the file's tensor shapes before anything is allocated (configFromCheckpoint).
// Throws IoError for a file without model_config (naming loadCheckpoint as the way to load it), for
// a configuration of another model type, or for anything loadCheckpoint refuses.
template <class Model>
Model loadModel(const std::string& path, const CheckpointLoadOptions& options = CheckpointLoadOptions()) {
  using Config = std::decay_t<decltype(std::declval<const Model&>().config())>;
  const char* fn = "ddl::loadModel";
  const CheckpointMeta meta = readCheckpointMetadata(path);
  if (meta.modelConfig.empty())
    throw IoError(message(fn, path, ": the checkpoint has no model_config metadata (saved without ddl::saveModel?); "
                          "build the model and call ddl::loadCheckpoint"));
  Config config;
  try {
    config = configFromCheckpoint<Config>(meta, path);
  } catch (const ValueError& e) {  // keys of another model's configuration
    throw IoError(message(fn, path, ": its model_config does not describe this model type: ", e.what()));
  }
  Model model(config);
  loadCheckpoint(path, model, options);
  return model;
}

}  // namespace ddl
