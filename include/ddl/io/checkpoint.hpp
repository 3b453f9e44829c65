#pragma once
// ddl/io/checkpoint.hpp: model (and optimizer) checkpoints as safetensors files.
//
// The model is seen only through its parameter walk: visitParams(prefix, f) with
// f(const std::string& name, Param<S>& p). Each parameter becomes a tensor under its dotted name
// (shape [rows, cols], dtype of S). Optimizer state, when given, is stored under "optim." + name;
// the step count, epoch, RNG state, model configuration, preset and ddl version go into the
// "__metadata__" strings (structured values as JSON text), so that a resume is bit-identical.
//
// Loading validates everything (header, names, shapes, dtypes, metadata, the data bytes
// themselves) into temporaries before a single parameter is written: it either loads the whole
// checkpoint or throws IoError and leaves the model and optimizer untouched.
//
// The optimizer interface (ddl::AdamW and friends; templated here so io/ includes no train/ header):
//   std::int64_t stepCount() const;   void setStepCount(std::int64_t);
//   template <class Model> void initState(Model&);       // allocate state shaped like the model
//   template <class F> void visitState(F&& f);           // f(const std::string& name, MatX<S>& tensor)
#include <algorithm>
#include <any>
#include <array>
#include <charconv>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/io/atomic_file.hpp"
#include "ddl/io/safetensors.hpp"

namespace ddl {

// Everything besides tensors that a checkpoint records. Metadata keys (all values are strings):
//   format "ddl-checkpoint", format_version "1", ddl_version, preset, model_config (JSON text),
//   epoch, step, rng_state (JSON array of 4 unsigned integers), optimizer_step, optimizer_tensors,
//   plus any caller keys in `extra`.
struct CheckpointMeta {
  std::string ddlVersion;                      // filled in by saveCheckpoint
  std::string preset;                          // e.g. "mnist-small"; empty if none
  std::string modelConfig;                     // JSON text of the model configuration; empty if none
  std::int64_t epoch = 0;                      // completed epochs
  std::int64_t step = 0;                       // completed training steps
  std::optional<Rng::State> rngState;          // ddl::Rng::state() of the training loop
  std::optional<std::int64_t> optimizerStep;   // filled in by the optimizer overloads
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
    m["format_version"] = "1";
    m["ddl_version"] = ddlVersion;
    if (!preset.empty()) m["preset"] = preset;
    if (!modelConfig.empty()) {
      require(nlohmann::json::accept(modelConfig), fn, "modelConfig is not valid JSON: ", modelConfig);
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
    return m;
  }

  // Parses a "__metadata__" map; missing keys keep their defaults (plain safetensors files load),
  // malformed ones throw IoError naming `source`, the key and the value found.
  static CheckpointMeta fromMetadata(const std::map<std::string, std::string>& m, const std::string& source) {
    const auto bad = [&](const std::string& key, const std::string& expected) {
      return IoError("ddl::CheckpointMeta::fromMetadata: " + source + ": metadata \"" + key + "\" must be " +
                     expected + ", found \"" + m.at(key) + "\"");
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
      if (!reservedKeys().count(key)) {
        c.extra[key] = kv.second;
      } else if (key == "format") {
        if (kv.second != "ddl-checkpoint") throw bad(key, "\"ddl-checkpoint\"");
      } else if (key == "format_version") {
        if (kv.second != "1") throw bad(key, "\"1\" (this ddl reads format version 1)");
      } else if (key == "ddl_version") {
        c.ddlVersion = kv.second;
      } else if (key == "preset") {
        c.preset = kv.second;
      } else if (key == "model_config") {
        if (!nlohmann::json::accept(kv.second)) throw bad(key, "JSON text");
        c.modelConfig = kv.second;
      } else if (key == "epoch") {
        c.epoch = toInt(key);
      } else if (key == "step") {
        c.step = toInt(key);
      } else if (key == "optimizer_step") {
        c.optimizerStep = toInt(key);
      } else if (key == "optimizer_tensors") {
        if (toInt(key) < 0) throw bad(key, "a count >= 0");
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

// How strict loadCheckpoint is.
struct CheckpointLoadOptions {
  bool allowExtraTensors = false;  // ignore tensors the model does not have
  bool allowConversion = false;    // let a float model read F64 tensors and a double model F32
};

// Reads only the header of a checkpoint (no tensor data) and returns its metadata.
inline CheckpointMeta readCheckpointMetadata(const std::string& path) {
  const SafetensorsHeader h = readSafetensorsHeader(path);
  return CheckpointMeta::fromMetadata(h.metadata, path);
}

namespace detail {

constexpr const char* kOptimPrefix = "optim.";

inline bool isOptimName(const std::string& name) { return name.compare(0, 6, kOptimPrefix) == 0; }

// Tells the optimizer overloads apart from (path, model, meta/options).
template <class T, class = void>
struct IsOptimizer : std::false_type {};
template <class T>
struct IsOptimizer<T, std::void_t<decltype(std::declval<const T&>().stepCount()),
                                  decltype(std::declval<T&>().setStepCount(std::int64_t{}))>> : std::true_type {};

// A checkpoint writer that walks model and optimizer twice: once to declare, once to stream.
template <class Model, class VisitOptim>
void writeCheckpoint(const char* fn, const std::string& path, Model& model, VisitOptim&& visitOptim,
                     const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter w;
  w.setMetadata(metadata);
  model.visitParams("", [&](const std::string& name, auto& p) {
    using S = typename std::decay_t<decltype(p.value)>::Scalar;
    require(!isOptimName(name), fn, "parameter name \"", name, "\" uses the reserved prefix \"optim.\"");
    w.template declare<S>(name, p.value.rows(), p.value.cols());
  });
  visitOptim([&](const std::string& name, auto& t) {
    using S = typename std::decay_t<decltype(t)>::Scalar;
    w.template declare<S>(kOptimPrefix + name, t.rows(), t.cols());
  });
  writeFileAtomically(path, [&](std::ostream& os) {
    w.writeHeader(os);
    model.visitParams("", [&](const std::string& name, auto& p) { w.writeMatrix(os, name, p.value); });
    visitOptim([&](const std::string& name, auto& t) { w.writeMatrix(os, kOptimPrefix + name, t); });
    w.finish();
  });
}

// Reads and checks every model parameter into a temporary; returns the assignments to commit.
template <class Model>
std::vector<std::function<void()>> stageModel(SafetensorsReader& r, Model& model, const CheckpointLoadOptions& opt,
                                              std::set<std::string>& used) {
  std::vector<std::function<void()>> commits;
  model.visitParams("", [&](const std::string& name, auto& p) {
    using S = typename std::decay_t<decltype(p.value)>::Scalar;
    if (!used.insert(name).second)
      throw IoError("ddl::loadCheckpoint: " + r.path() + ": the model visits parameter \"" + name + "\" twice");
    if (!r.header().find(name))
      throw IoError("ddl::loadCheckpoint: " + r.path() + ": tensor \"" + name + "\" is missing (model parameter " +
                    shapeOf(p.value) + ", dtype " + dtypeName(DTypeOf<S>::value) + ")");
    MatX<S> staged = r.template readMatrix<S>(name, p.value.rows(), p.value.cols(), opt.allowConversion);
    auto* target = &p.value;
    commits.emplace_back([target, staged = std::move(staged)]() mutable { *target = std::move(staged); });
  });
  return commits;
}

inline void checkNoExtras(const SafetensorsReader& r, const std::set<std::string>& used, bool optimInScope,
                          const CheckpointLoadOptions& opt) {
  if (opt.allowExtraTensors) return;
  for (const auto& t : r.header().tensors) {
    if (used.count(t.name) || (!optimInScope && isOptimName(t.name))) continue;
    throw IoError("ddl::loadCheckpoint: " + r.path() + ": unexpected tensor \"" + t.name + "\" " +
                  shapeString(t.shape) + " at file byte " + std::to_string(r.header().dataStart() + t.begin) +
                  (isOptimName(t.name) ? " is not part of the optimizer state"
                                       : " is not a model parameter (allow extra tensors to ignore it)"));
  }
}

}  // namespace detail

// Saves the model's parameters and `meta` to `path` (atomically; see writeFileAtomically).
template <class Model>
void saveCheckpoint(const std::string& path, Model& model, const CheckpointMeta& meta = CheckpointMeta()) {
  CheckpointMeta m = meta;
  m.ddlVersion = versionString();
  m.optimizerStep.reset();
  detail::writeCheckpoint("ddl::saveCheckpoint", path, model, [](auto&&) {}, m.toMetadata());
}

// Saves model, optimizer state (as "optim." + name tensors) and its step count.
template <class Model, class Optimizer, std::enable_if_t<detail::IsOptimizer<Optimizer>::value, int> = 0>
void saveCheckpoint(const std::string& path, Model& model, Optimizer& optimizer,
                    const CheckpointMeta& meta = CheckpointMeta()) {
  CheckpointMeta m = meta;
  m.ddlVersion = versionString();
  m.optimizerStep = optimizer.stepCount();
  std::int64_t count = 0;
  optimizer.visitState([&](const std::string&, auto&) { ++count; });
  std::map<std::string, std::string> metadata = m.toMetadata();
  metadata["optimizer_tensors"] = std::to_string(count);
  detail::writeCheckpoint("ddl::saveCheckpoint", path, model,
                          [&](auto&& f) { optimizer.visitState(f); }, metadata);
}

// Loads every model parameter from `path` and returns the metadata. All-or-nothing: on any
// mismatch (missing, extra, shape, dtype, corrupt file) it throws IoError before touching the
// model. Tensors under "optim." are optimizer state and are ignored here.
template <class Model>
CheckpointMeta loadCheckpoint(const std::string& path, Model& model, const CheckpointLoadOptions& options = CheckpointLoadOptions()) {
  SafetensorsReader r(path);
  std::set<std::string> used;
  auto commits = detail::stageModel(r, model, options, used);
  detail::checkNoExtras(r, used, /*optimInScope=*/false, options);
  CheckpointMeta meta = CheckpointMeta::fromMetadata(r.header().metadata, path);
  for (auto& c : commits) c();
  return meta;
}

// Loads model and optimizer (state tensors, step count). The optimizer's expected state comes
// from initState(model) on a copy when Optimizer is copyable (so a failed load leaves it as it
// was), else on the optimizer itself. A checkpoint saved before the optimizer allocated any state
// restores a freshly initialised state and the saved step count.
template <class Model, class Optimizer, std::enable_if_t<detail::IsOptimizer<Optimizer>::value, int> = 0>
CheckpointMeta loadCheckpoint(const std::string& path, Model& model, Optimizer& optimizer,
                              const CheckpointLoadOptions& options = CheckpointLoadOptions()) {
  const char* fn = "ddl::loadCheckpoint";
  SafetensorsReader r(path);
  std::set<std::string> used;
  auto commits = detail::stageModel(r, model, options, used);
  CheckpointMeta meta = CheckpointMeta::fromMetadata(r.header().metadata, path);
  if (!meta.optimizerStep)
    throw IoError(std::string(fn) + ": " + path + ": no optimizer state (metadata \"optimizer_step\" is missing); " +
                  "load the model alone or save with the optimizer");
  bool fileHasState = false;
  for (const auto& t : r.header().tensors) fileHasState = fileHasState || detail::isOptimName(t.name);

  // Learn the expected state from initState(model) on a probe, stage it into temporaries, commit last.
  std::optional<Optimizer> copy;
  if constexpr (std::is_copy_constructible<Optimizer>::value) copy.emplace(optimizer);
  Optimizer& probe = copy ? *copy : optimizer;
  probe.initState(model);
  std::map<std::string, std::any> staged;
  if (fileHasState) {
    probe.visitState([&](const std::string& name, auto& t) {
      using S = typename std::decay_t<decltype(t)>::Scalar;
      const std::string key = detail::kOptimPrefix + name;
      if (staged.count(name))
        throw IoError(std::string(fn) + ": " + path + ": the optimizer visits state \"" + name + "\" twice");
      if (!r.header().find(key))
        throw IoError(std::string(fn) + ": " + path + ": optimizer tensor \"" + key + "\" is missing (state " +
                      shapeOf(t) + ", dtype " + dtypeName(DTypeOf<S>::value) + ")");
      staged[name] = r.template readMatrix<S>(key, t.rows(), t.cols(), options.allowConversion);
      used.insert(key);
    });
  }
  detail::checkNoExtras(r, used, /*optimInScope=*/true, options);

  for (auto& c : commits) c();
  if (copy) optimizer.initState(model);
  if (fileHasState) {
    optimizer.visitState([&](const std::string& name, auto& t) {
      using M = std::decay_t<decltype(t)>;
      t = std::move(std::any_cast<M&>(staged.at(name)));
    });
  }
  optimizer.setStepCount(*meta.optimizerStep);
  return meta;
}

}  // namespace ddl
