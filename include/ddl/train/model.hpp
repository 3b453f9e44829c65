#pragma once
// ddl/train/model.hpp: what the training loop (train/training_loop.hpp) needs of a model, and how it
// describes one in a checkpoint without naming a net.
//
// A model trained by the loop has
//   forward(const Input& X, MatX<S>& out)          Input: what the batch source yields (a matrix here)
//   backward(const MatX<S>& dOut)                  adds its parameters' gradients; reads nothing of the
//                                                  out forward wrote (the step puts dOut in its place)
//   visitParams(prefix, f), f(const std::string&, Param<S>&)     the parameter walk
//   config()  whose result has toKeyValues() -> std::map<std::string, std::string>
//             and, optionally, a member `preset`: a std::string or an enum with toString
// and, optionally, forwardInference(X, out) (evaluation without caches), setGradientsReady(f)
// (core/gradients_ready.hpp: data-parallel overlap of communication with backward) and blocks(),
// blockInput(i), blockOutput(i) or sublayerCount(), sublayerResidual(i), sublayerInput(i),
// sublayerOutput(i) (the gate audit of the evaluation, diag/gated_sublayers.hpp).
// The checkpoint stores config().toKeyValues() as the JSON text model_config and the preset; a
// resume compares model_config with the model's own, so a model whose configuration differs is
// refused before any tensor is read.
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include "ddl/core/requires_json.hpp"  // before nlohmann: a clear error without it
#include <nlohmann/json.hpp>

#include "ddl/core/detects.hpp"
#include "ddl/core/gradients_ready.hpp"

namespace ddl {

// The model_config text of a configuration: its key-value pairs as one JSON object of strings.
template <class Config>
std::string configJson(const Config& c) {
  return nlohmann::json(c.toKeyValues()).dump();
}

namespace detail {
template <class Config>
using PresetProbe = decltype(std::declval<const Config&>().preset);
template <class Config>
using HasPreset = Detects<PresetProbe, Config>;

// Whether the evaluation can gather gate statistics of Model (NetGateAccumulator::add): a net of gated
// blocks (blocks(), blockInput(i), blockOutput(i)) or of gated sublayers (sublayerCount(),
// sublayerResidual(i), sublayerInput(i), sublayerOutput(i)); diag/gated_sublayers.hpp.
template <class M>
using GatedBlockStatesProbe = std::void_t<decltype(std::declval<const M&>().blocks().size()),
                                          decltype(std::declval<const M&>().blockInput(std::size_t{})),
                                          decltype(std::declval<const M&>().blockOutput(std::size_t{}))>;
template <class M>
using GatedSublayerStatesProbe = std::void_t<decltype(std::declval<const M&>().sublayerCount()),
                                             decltype(std::declval<const M&>().sublayerResidual(std::size_t{})),
                                             decltype(std::declval<const M&>().sublayerInput(std::size_t{})),
                                             decltype(std::declval<const M&>().sublayerOutput(std::size_t{}))>;
template <class Model>
using HasGateBlocks =
    std::bool_constant<Detects<GatedBlockStatesProbe, Model>::value || Detects<GatedSublayerStatesProbe, Model>::value>;

// Whether Model reports final gradients during backward (setGradientsReady, core/gradients_ready.hpp):
// data-parallel training then sends them while backward runs.
template <class Model>
using GradientsReadyProbe = decltype(std::declval<Model&>().setGradientsReady(GradientsReady()));
template <class Model>
using HasGradientsReady = Detects<GradientsReadyProbe, Model>;
}  // namespace detail

// The model_config metadata of model.
template <class Model>
std::string modelConfigJson(const Model& model) {
  return configJson(model.config());
}

// The preset metadata of model: the name of config().preset when the configuration has one, else empty.
template <class Model>
std::string modelPreset(const Model& model) {
  if constexpr (detail::HasPreset<std::decay_t<decltype(model.config())>>::value) {
    const auto& preset = model.config().preset;
    if constexpr (std::is_convertible<decltype(preset), std::string>::value)
      return preset;
    else
      return toString(preset);  // found by argument-dependent lookup, e.g. ddl::toString(Preset)
  } else {
    return std::string();
  }
}

}  // namespace ddl
