#pragma once
// ddl/nn/models/preset.hpp: the residual presets of docs/spec.md §7, the sets of options that
// applyPreset fixes on a net's configuration (nn/models/delta_net_config.hpp, conv_delta_net_config.hpp,
// delta_lm_config.hpp), which records the one it applied:
//   code   the authors' code: k-Map direction, linear gate, sigmoid value, structured compressor (default)
//   paper  the paper's text: the value is linear in c, free compressor
//   v1     the first DeltaNet design: auxiliary-MLP direction, two-layer tanh gate (DeltaNet only)
#include <string>

#include "ddl/core/enum_names.hpp"
#include "ddl/core/error.hpp"

namespace ddl {

enum class Preset { Code, Paper, V1 };

inline constexpr EnumName<Preset> kPresetNames[] = {{Preset::Code, "code"}, {Preset::Paper, "paper"}, {Preset::V1, "v1"}};
inline const char* toString(Preset p) { return nameOf(kPresetNames, p); }

// Throws ValueError naming fn and the accepted names for an unknown one.
inline Preset parsePreset(const std::string& name, const char* fn = "ddl::parsePreset") {
  return parseEnumName(kPresetNames, name, fn, "preset");
}

}  // namespace ddl
