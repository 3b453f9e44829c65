#pragma once
// What the PyTorch interop tests (DeltaNet, ConvDeltaNet, DeltaLM) share beyond torch_runner.hpp: the
// checkpoint metadata of a net configuration, and the `ddl_torch.py export` round trip (PyTorch writes
// a state_dict and a batch with its logits, ddl loads the state_dict strictly and compares logits).
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "catch_compat.hpp"
#include "ddl/core/types.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/io/safetensors.hpp"
#include "torch_runner.hpp"

namespace torch_runner {

// The checkpoint metadata of a net of cfg: its preset and its model_config (cfg's key-values as JSON).
template <class Config>
ddl::CheckpointMeta metaOf(const Config& cfg) {
  ddl::CheckpointMeta meta;
  meta.preset = ddl::toString(cfg.preset);  // the saved name, as ddl::saveModel writes it
  meta.modelConfig = nlohmann::json(cfg.toKeyValues()).dump();
  return meta;
}

// Writes cfg to <base>.config.json and has `ddl_torch.py export` (with `seed`) write a PyTorch-initialised
// net's state_dict to <base>.state.safetensors and a batch with its logits to <base>.batch.safetensors
// (REQUIREs exit 0); loads the state_dict strictly (every name) into net, which must come with no
// model_config. Returns the batch.
template <class Config, class Net>
std::map<std::string, ddl::MatX<double>> exportAndLoad(const Config& cfg, const std::string& base, int seed,
                                                       Net& net) {
  {
    std::ofstream out(base + ".config.json");
    out << nlohmann::json(cfg.toKeyValues()).dump();
  }
  const std::string cmd =
      exportCommand(base + ".config.json", base + ".state.safetensors", base + ".batch.safetensors", seed);
  CAPTURE(cmd);
  REQUIRE(runCommand(cmd) == 0);
  const ddl::CheckpointMeta meta = ddl::loadCheckpoint(base + ".state.safetensors", net);  // strict: every name
  CHECK(meta.modelConfig.empty());
  return ddl::loadSafetensors<double>(base + ".batch.safetensors");
}

// ddl's logits against PyTorch's: the same shape and every entry within 1e-12.
inline void checkSameLogits(const ddl::MatX<double>& logits, const ddl::MatX<double>& expected) {
  REQUIRE(logits.rows() == expected.rows());
  REQUIRE(logits.cols() == expected.cols());
  CHECK((logits - expected).cwiseAbs().maxCoeff() < 1e-12);
}

}  // namespace torch_runner
