#pragma once
// ddl/io/checkpoint_meta.hpp: what a checkpoint (io/checkpoint.hpp) records besides its tensors, as
// the safetensors "__metadata__" strings, and how they are read back and checked.
#include <array>
#include <charconv>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "ddl/core/requires_json.hpp"  // before nlohmann: a clear error without it
#include <nlohmann/json.hpp>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/json_text.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/io/safetensors_header.hpp"

namespace ddl {

// Everything besides tensors that a checkpoint records. Metadata keys (all values are strings):
//   format "ddl-checkpoint", format_version "3" ("1" and "2" are read too), ddl_version, preset, model_config (JSON text),
//   epoch, step, rng_state (JSON array of the 6 Rng::State integers; 4 in older files),
//   optimizer_step, optimizer_tensors,
//   plus any caller keys in `extra`.
struct CheckpointMeta {
  std::string ddlVersion;                      // filled in by saveCheckpoint
  std::string preset;                          // e.g. "code"; empty if none
  std::string modelConfig;                     // JSON text of the model configuration; empty if none
  std::int64_t epoch = 0;                      // completed epochs
  std::int64_t step = 0;                       // completed training steps
  std::optional<Rng::State> rngState;          // ddl::Rng::state() of the training loop
  std::optional<std::int64_t> optimizerStep;   // filled in by the optimizer overloads, in [0, kMaxOptimizerStep]
  std::optional<std::int64_t> optimizerTensors;  // number of "optim." tensors the saver wrote
  int formatVersion = kCheckpointFormatVersion;  // of the file read (fromMetadata), 3 when written

  // Step counts beyond 2^53 are not exact in the double arithmetic of bias corrections and would
  // overflow soon after 2^63; no real run gets near either.
  static constexpr std::int64_t kMaxOptimizerStep = std::int64_t(1) << 53;
  static constexpr int kCheckpointFormatVersion = 3;
  std::map<std::string, std::string> extra;    // caller keys, kept verbatim

  static const std::set<std::string>& reservedKeys() {
    static const std::set<std::string> keys{"format",     "format_version", "ddl_version", "preset",
                                            "model_config", "epoch",        "step",        "rng_state",
                                            "optimizer_step", "optimizer_tensors"};
    return keys;
  }

  // The "__metadata__" map. Throws ValueError for an extra key that collides with a reserved one
  // or for a modelConfig that is not valid JSON.
  std::map<std::string, std::string> toMetadata() const {
    const char* fn = "ddl::CheckpointMeta::toMetadata";
    std::map<std::string, std::string> m;
    for (const auto& kv : extra) {
      require(reservedKeys().count(kv.first) == 0, fn, "extra key \"", kv.first, "\" is reserved");
      m[kv.first] = kv.second;
    }
    m["format"] = "ddl-checkpoint";
    m["format_version"] = std::to_string(kCheckpointFormatVersion);
    m["ddl_version"] = ddlVersion;
    if (!preset.empty()) m["preset"] = preset;
    if (!modelConfig.empty()) {
      require(jsonTooDeepAt(modelConfig) == std::string::npos && nlohmann::json::accept(modelConfig), fn,
              "modelConfig is not valid JSON nested at most ", kMaxJsonDepth, " levels: ", excerpt(modelConfig));
      m["model_config"] = modelConfig;
    }
    m["epoch"] = std::to_string(epoch);
    m["step"] = std::to_string(step);
    if (rngState) {
      nlohmann::json a = nlohmann::json::array();
      for (std::uint64_t w : *rngState) a.push_back(w);
      m["rng_state"] = a.dump();
    }
    if (optimizerStep) m["optimizer_step"] = std::to_string(*optimizerStep);
    if (optimizerTensors) m["optimizer_tensors"] = std::to_string(*optimizerTensors);
    return m;
  }

  // Parses a "__metadata__" map; missing keys keep their defaults (plain safetensors files load),
  // malformed ones throw IoError naming `source`, the key and the value found.
  static CheckpointMeta fromMetadata(const std::map<std::string, std::string>& m, const std::string& source) {
    const auto bad = [&](const std::string& key, const std::string& expected) {
      return IoError("ddl::CheckpointMeta::fromMetadata: " + source + ": metadata \"" + key + "\" must be " +
                     expected + ", found \"" + excerpt(m.at(key)) + "\"");
    };
    const auto toInt = [&](const std::string& key) {
      const std::string& s = m.at(key);
      std::int64_t v = 0;
      const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
      if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size()) throw bad(key, "a 64-bit integer");
      return v;
    };
    CheckpointMeta c;
    for (const auto& kv : m) {
      const std::string& key = kv.first;
      // Any value may be JSON someone parses (train_options, train_position, caller keys): none may nest so
      // deep that a dump or a message about it overflows the stack (core/json_text.hpp).
      if (jsonTooDeepAt(kv.second) != std::string::npos)
        throw bad(key, "text nested at most " + std::to_string(kMaxJsonDepth) + " levels of [ and {");
      if (!reservedKeys().count(key)) {
        c.extra[key] = kv.second;
      } else if (key == "format") {
        // "pt" is what PyTorch tools write into a plain state_dict file, which loads as well.
        if (kv.second != "ddl-checkpoint" && kv.second != "pt") throw bad(key, "\"ddl-checkpoint\" (or \"pt\")");
      } else if (key == "format_version") {
        if (kv.second != "1" && kv.second != "2" && kv.second != "3")
          throw bad(key, "\"1\", \"2\" or \"3\" (this ddl reads checkpoint format versions 1 to 3; a newer ddl wrote it)");
        c.formatVersion = kv.second[0] - '0';
      } else if (key == "ddl_version") {
        c.ddlVersion = kv.second;
      } else if (key == "preset") {
        c.preset = kv.second;
      } else if (key == "model_config") {
        if (!nlohmann::json::accept(kv.second)) throw bad(key, "JSON text");
        c.modelConfig = kv.second;
      } else if (key == "epoch") {
        c.epoch = toInt(key);
        if (c.epoch < 0) throw bad(key, "a count >= 0");
      } else if (key == "step") {
        c.step = toInt(key);
        if (c.step < 0) throw bad(key, "a count >= 0");
      } else if (key == "optimizer_step") {
        c.optimizerStep = toInt(key);
        if (*c.optimizerStep < 0 || *c.optimizerStep > kMaxOptimizerStep)
          throw bad(key, "a step count in [0, 2^53]");
      } else if (key == "optimizer_tensors") {
        c.optimizerTensors = toInt(key);
        if (*c.optimizerTensors < 0) throw bad(key, "a count >= 0");
      } else if (key == "rng_state") {
        const nlohmann::json a = nlohmann::json::parse(kv.second, nullptr, /*allow_exceptions=*/false);
        // 6 words (Rng::State incl. the Box-Muller spare); 4 words from older files mean no spare.
        const bool ok = a.is_array() && (a.size() == 4 || a.size() == std::tuple_size<Rng::State>::value) &&
                        std::all_of(a.begin(), a.end(), [](const nlohmann::json& e) { return e.is_number_unsigned(); });
        if (!ok) throw bad(key, "a JSON array of 6 (or legacy 4) unsigned 64-bit integers");
        Rng::State s{};
        for (std::size_t i = 0; i < a.size(); ++i) s[i] = a[i].get<std::uint64_t>();
        if (s[4] > 1) throw bad(key, "a spare flag (word 4) of 0 or 1");
        c.rngState = s;
      }
    }
    return c;
  }
};

// Reads only the header of a checkpoint (no tensor data) and returns its metadata.
inline CheckpointMeta readCheckpointMetadata(const std::string& path) {
  const SafetensorsHeader h = readSafetensorsHeader(path);
  return CheckpointMeta::fromMetadata(h.metadata, path);
}

}  // namespace ddl
