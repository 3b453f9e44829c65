#pragma once
// ddl/io/checkpoint.hpp: model (and optimizer) checkpoints as safetensors files.
//
// The model is seen only through its parameter walk: visitParams(prefix, f) with
// f(const std::string& name, Param<S>& p). Each parameter becomes a tensor under its dotted name
// with its logical (PyTorch) shape p.shape (a bias [n], a Linear weight [out, in], a conv weight
// [out, in, kh, kw]) and the dtype of S, so a matching nn.Module's load_state_dict takes the file
// as it is. Format version 3; older versions are still read: version 2 named the two-layer gate's
// output bias "gate.bias" (now "gate.fc2.bias", as nn.Linear names it) and stored optimizer state as
// [rows, cols] (a bias's moments as [n, 1]; now with the parameter's shape); version 1 also stored
// every parameter as [rows, cols]. A structured compressor's kernel saved as one shared [K] loads as
// [d, K] of equal rows (detail::isSharedCompressorKernel). Optimizer state, when given, is stored under
// "optim." + name; the step count, epoch, RNG state, model configuration, preset and ddl version go into the
// "__metadata__" strings (structured values as JSON text), so that a resume is bit-identical.
//
// Loading validates everything (header, names, shapes, dtypes, metadata and its ranges, every
// value finite) into temporaries before a single parameter is written: it either loads the whole
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
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddl/core/requires_json.hpp"  // before nlohmann: a clear error without it
#include <nlohmann/json.hpp>

#include "ddl/core/config.hpp"
#include "ddl/core/detects.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/io/atomic_file.hpp"
#include "ddl/io/checkpoint_meta.hpp"
#include "ddl/io/safetensors.hpp"

namespace ddl {

// How strict loadCheckpoint is.
struct CheckpointLoadOptions {
  bool allowExtraTensors = false;  // ignore tensors the model does not have
  bool allowConversion = false;    // let a float model read F64 tensors and a double model F32
};

namespace detail {

constexpr const char* kOptimPrefix = "optim.";

inline bool isOptimName(const std::string& name) { return name.compare(0, 6, kOptimPrefix) == 0; }

// Tells the optimizer overloads apart from (path, model, meta/options).
template <class T>
using OptimizerProbe = std::void_t<decltype(std::declval<const T&>().stepCount()),
                                   decltype(std::declval<T&>().setStepCount(std::int64_t{}))>;
template <class T>
using IsOptimizer = Detects<OptimizerProbe, T>;

// A checkpoint writer that walks model and optimizer twice: once to declare, once to stream.
// The shape a parameter is stored with: p.shape, checked against the matrix it describes.
template <class P>
std::vector<std::int64_t> storedShape(const char* fn, const std::string& name, const P& p) {
  std::vector<std::int64_t> shape(p.shape.begin(), p.shape.end());
  if (shape.empty()) shape = {static_cast<std::int64_t>(p.value.rows()), static_cast<std::int64_t>(p.value.cols())};
  Index rows = 0, cols = 0;
  require(matrixDimsOf(shape, rows, cols) && rows == p.value.rows() && cols == p.value.cols(), fn, "parameter \"",
          name, "\": its shape ", shapeString(shape), " does not describe its value ", shapeOf(p.value));
  return shape;
}

// First non-finite entry of m as "(i, j) = nan", or empty.
template <class M>
std::string firstNonFinite(const M& m) {
  for (Index j = 0; j < m.cols(); ++j)
    for (Index i = 0; i < m.rows(); ++i)
      if (!std::isfinite(static_cast<double>(m(i, j))))
        return "(" + std::to_string(i) + ", " + std::to_string(j) + ") = " + std::to_string(static_cast<double>(m(i, j)));
  return {};
}

// Stored shapes of a model's parameters, by name.
template <class Model>
std::map<std::string, std::vector<std::int64_t>> parameterShapes(const char* fn, Model& model) {
  std::map<std::string, std::vector<std::int64_t>> shapes;
  model.visitParams("", [&](const std::string& name, auto& p) { shapes[name] = storedShape(fn, name, p); });
  return shapes;
}

// The shape an optimizer tensor is stored with: that of its parameter (the state "<param>.<slot>" of a
// tensor has the parameter's matrix), else [rows, cols].
template <class M>
std::vector<std::int64_t> optimizerStateShape(const std::map<std::string, std::vector<std::int64_t>>& shapes,
                                              const std::string& stateName, const M& t) {
  const std::size_t dot = stateName.rfind('.');
  if (dot != std::string::npos) {
    const auto it = shapes.find(stateName.substr(0, dot));
    Index rows = 0, cols = 0;
    if (it != shapes.end() && matrixDimsOf(it->second, rows, cols) && rows == t.rows() && cols == t.cols())
      return it->second;
  }
  return {static_cast<std::int64_t>(t.rows()), static_cast<std::int64_t>(t.cols())};
}

template <class Model, class VisitOptim>
void writeCheckpoint(const char* fn, const std::string& path, Model& model, VisitOptim&& visitOptim,
                     const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter w;
  w.setMetadata(metadata);
  std::map<std::string, std::vector<std::int64_t>> shapes;  // of the declaring walk, for the optimizer state
  model.visitParams("", [&](const std::string& name, auto& p) {
    using S = typename std::decay_t<decltype(p.value)>::Scalar;
    require(!isOptimName(name), fn, "parameter name \"", name, "\" uses the reserved prefix \"optim.\"");
    shapes[name] = storedShape(fn, name, p);
    w.declare(name, DTypeOf<S>::value, shapes[name]);
  });
  visitOptim([&](const std::string& name, auto& t) {
    using S = typename std::decay_t<decltype(t)>::Scalar;
    w.declare(kOptimPrefix + name, DTypeOf<S>::value, optimizerStateShape(shapes, name, t));
  });
  writeFileAtomically(path, [&](std::ostream& os) {
    w.writeHeader(os);
    model.visitParams("", [&](const std::string& name, auto& p) {
      w.writeTensor(os, name, storedShape(fn, name, p), p.value);
    });
    visitOptim([&](const std::string& name, auto& t) {
      w.writeTensor(os, kOptimPrefix + name, optimizerStateShape(shapes, name, t), t);
    });
    w.finish();
  });
}

// The name a format version 1 or 2 file gives a tensor: the two-layer gate's output bias was
// "gate.bias" (a parameter, or the "gate.bias." prefix of its optimizer state), now "gate.fc2.bias".
inline std::string legacyTensorName(const std::string& name) {
  static const std::string now = "gate.fc2.bias", then = "gate.bias";
  const std::size_t at = name.rfind(now);
  if (at == std::string::npos || (at > 0 && name[at - 1] != '.')) return name;
  const std::size_t end = at + now.size();
  if (end != name.size() && name[end] != '.') return name;
  return name.substr(0, at) + then + name.substr(end);
}

// The tensor of `name` in the file: the name itself, or in a version 1 or 2 file its legacy name.
inline std::string tensorNameInFile(const SafetensorsReader& r, const std::string& name, int formatVersion) {
  if (formatVersion >= 3 || r.header().find(name)) return name;
  const std::string legacy = legacyTensorName(name);
  return r.header().find(legacy) ? legacy : name;
}

// Before the structured compressor kept one kernel per feature (docs/decisions.md, "Structured compressor"),
// its kernel "<...>.conv.weight", now [d, K], was one [K] kernel shared by every feature: such a tensor
// reads as d equal rows, which compress exactly as the shared kernel did. param is the parameter's name (an
// optimizer state's without its slot); nothing else ddl wrote has a 1-D "conv.weight".
inline bool isSharedCompressorKernel(const SafetensorsHeader& h, const std::string& key, const std::string& param,
                                     const std::vector<std::int64_t>& shape) {
  static const std::string leaf = ".conv.weight";
  const TensorInfo* t = h.find(key);
  return t != nullptr && shape.size() == 2 && t->shape.size() == 1 && t->shape[0] == shape[1] &&
         param.size() > leaf.size() && param.compare(param.size() - leaf.size(), leaf.size(), leaf) == 0;
}

// The tensor `key` as a parameter (or its state) of `shape`, a shared compressor kernel broadcast to its rows.
template <class S>
MatX<S> readParamTensor(SafetensorsReader& r, const std::string& key, const std::string& param,
                        const std::vector<std::int64_t>& shape, bool allowConversion) {
  if (!isSharedCompressorKernel(r.header(), key, param, shape)) return r.template readTensor<S>(key, shape, allowConversion);
  const MatX<S> kernel = r.template readTensor<S>(key, {shape[1]}, allowConversion);  // (K, 1)
  return kernel.transpose().replicate(static_cast<Index>(shape[0]), 1);
}

// Reads and checks every model parameter into a temporary; returns the assignments to commit.
template <class Model>
std::vector<std::function<void()>> stageModel(SafetensorsReader& r, Model& model, const CheckpointLoadOptions& opt,
                                              std::set<std::string>& used, int formatVersion) {
  std::vector<std::function<void()>> commits;
  model.visitParams("", [&](const std::string& name, auto& p) {
    using S = typename std::decay_t<decltype(p.value)>::Scalar;
    if (!used.insert(name).second)
      throw IoError("ddl::loadCheckpoint: " + r.path() + ": the model visits parameter \"" + name + "\" twice");
    const std::string key = tensorNameInFile(r, name, formatVersion);
    used.insert(key);
    if (!r.header().find(key))
      throw IoError("ddl::loadCheckpoint: " + r.path() + ": tensor \"" + name + "\" is missing (model parameter " +
                    shapeString(storedShape("ddl::loadCheckpoint", name, p)) + ", dtype " +
                    dtypeName(DTypeOf<S>::value) + ")");
    // Version 1 stored every parameter as [rows, cols] (a bias as [n, 1]); it reads into the same matrix.
    const std::vector<std::int64_t> shape =
        formatVersion == 1 ? std::vector<std::int64_t>{static_cast<std::int64_t>(p.value.rows()),
                                                       static_cast<std::int64_t>(p.value.cols())}
                           : storedShape("ddl::loadCheckpoint", name, p);
    MatX<S> staged = readParamTensor<S>(r, key, name, shape, opt.allowConversion);
    const std::string bad = firstNonFinite(staged);
    if (!bad.empty())
      throw IoError("ddl::loadCheckpoint: " + r.path() + ": tensor \"" + name + "\" holds a non-finite value at " +
                    bad + " (a checkpoint of a diverged run?)");
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
  m.optimizerTensors.reset();
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
  m.optimizerTensors = count;
  const std::map<std::string, std::string> metadata = m.toMetadata();
  detail::writeCheckpoint("ddl::saveCheckpoint", path, model,
                          [&](auto&& f) { optimizer.visitState(f); }, metadata);
}

// Loads every model parameter from `path` and returns the metadata. All-or-nothing: on any
// mismatch (missing, extra, shape, dtype, corrupt file) it throws IoError before touching the
// model. Tensors under "optim." are optimizer state and are ignored here.
template <class Model>
CheckpointMeta loadCheckpoint(const std::string& path, Model& model, const CheckpointLoadOptions& options = CheckpointLoadOptions()) {
  SafetensorsReader r(path);
  CheckpointMeta meta = CheckpointMeta::fromMetadata(r.header().metadata, path);
  std::set<std::string> used;
  auto commits = detail::stageModel(r, model, options, used, meta.formatVersion);
  detail::checkNoExtras(r, used, /*optimInScope=*/false, options);
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
  CheckpointMeta meta = CheckpointMeta::fromMetadata(r.header().metadata, path);
  if (!meta.optimizerStep)
    throw IoError(std::string(fn) + ": " + path + ": no optimizer state (metadata \"optimizer_step\" is missing); " +
                  "load the model alone or save with the optimizer");
  std::set<std::string> used;
  auto commits = detail::stageModel(r, model, options, used, meta.formatVersion);
  std::int64_t stateTensors = 0;
  for (const auto& t : r.header().tensors) stateTensors += detail::isOptimName(t.name) ? 1 : 0;
  const bool fileHasState = stateTensors > 0;
  // A state with steps behind it has moments; restarting them from zero would silently change the
  // run (a resume is meant to be bit-identical), so stripped optimizer tensors are refused.
  if (meta.optimizerTensors ? *meta.optimizerTensors != stateTensors : (!fileHasState && *meta.optimizerStep > 0))
    throw IoError(std::string(fn) + ": " + path + ": the file holds " + std::to_string(stateTensors) +
                  " optimizer tensors (\"optim.*\"), but " +
                  (meta.optimizerTensors ? "its metadata says " + std::to_string(*meta.optimizerTensors)
                                         : "optimizer_step is " + std::to_string(*meta.optimizerStep)) +
                  ": the optimizer state was stripped or damaged; load the model alone to start a new optimizer");

  // Learn the expected state from initState(model) on a probe, stage it into temporaries, commit last.
  std::optional<Optimizer> copy;
  if constexpr (std::is_copy_constructible<Optimizer>::value) copy.emplace(optimizer);
  Optimizer& probe = copy ? *copy : optimizer;
  probe.initState(model);
  std::map<std::string, std::any> staged;
  if (fileHasState) {
    const auto shapes = detail::parameterShapes(fn, model);
    probe.visitState([&](const std::string& name, auto& t) {
      using S = typename std::decay_t<decltype(t)>::Scalar;
      const std::string key = detail::tensorNameInFile(r, detail::kOptimPrefix + name, meta.formatVersion);
      // Versions 1 and 2 stored optimizer state as [rows, cols]; version 3 with its parameter's shape.
      const std::vector<std::int64_t> shape =
          meta.formatVersion >= 3 ? detail::optimizerStateShape(shapes, name, t)
                                  : std::vector<std::int64_t>{static_cast<std::int64_t>(t.rows()),
                                                              static_cast<std::int64_t>(t.cols())};
      if (staged.count(name))
        throw IoError(std::string(fn) + ": " + path + ": the optimizer visits state \"" + name + "\" twice");
      if (!r.header().find(key))
        throw IoError(std::string(fn) + ": " + path + ": optimizer tensor \"" + key + "\" is missing (state " +
                      shapeString(shape) + ", dtype " + dtypeName(DTypeOf<S>::value) + ")");
      MatX<S> value = detail::readParamTensor<S>(r, key, name.substr(0, name.rfind('.')), shape, options.allowConversion);
      const std::string bad = detail::firstNonFinite(value);
      if (!bad.empty())
        throw IoError(std::string(fn) + ": " + path + ": optimizer tensor \"" + key +
                      "\" holds a non-finite value at " + bad);
      staged[name] = std::move(value);
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
