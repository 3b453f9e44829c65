#pragma once
// ddl/core/enum_names.hpp: an option's enumerators and their names in text (command lines, checkpoints,
// reports), written once as a table that serves both directions, so the name written and the name read
// cannot drift apart and the list of accepted names in an error is the table itself:
//   inline constexpr EnumName<Preset> kPresetNames[] = {{Preset::Code, "code"}, {Preset::Paper, "paper"}};
//   toString(p)      -> nameOf(kPresetNames, p)
//   parsePreset(s)   -> parseEnumName(kPresetNames, s, "ddl::parsePreset", "preset")
// A form whose every switch must be exhaustive (the gate, nn/layers/beta_gate.hpp) keeps its switch instead.
#include <cstddef>
#include <string>

#include "ddl/core/error.hpp"

namespace ddl {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// The name of value in table; a value missing from it (a cast from a number outside the enum) is a ValueError.
template <class E, std::size_t N>
const char* nameOf(const EnumName<E> (&table)[N], E value) {
  for (const EnumName<E>& entry : table)
    if (entry.value == value) return entry.name;
  throw ValueError(message("ddl::nameOf", "enumerator ", static_cast<long long>(value), " has no name in its table"));
}

// The enumerator named text (exact); anything else throws ValueError naming fn, what was read and the
// accepted names: "fn: unknown <what> '<text>', expected one of a, b, c".
template <class E, std::size_t N>
E parseEnumName(const EnumName<E> (&table)[N], const std::string& text, const char* fn, const char* what) {
  std::string names;
  for (const EnumName<E>& entry : table) {
    if (text == entry.name) return entry.value;
    names += (names.empty() ? "" : ", ") + std::string(entry.name);
  }
  throw ValueError(message(fn, "unknown ", what, " '", text, "', expected one of ", names));
}

}  // namespace ddl
