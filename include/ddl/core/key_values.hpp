#pragma once
// ddl/core/key_values.hpp: the string key/value form of a configuration (checkpoint metadata), both
// ways. KeyValueWriter prints numbers at full precision (17 digits round-trip a double);
// KeyValueReader refuses a missing key and checks every number completely (core/parse.hpp), naming
// the configuration and the key: "ddl::DeltaNetConfig::fromKeyValues: key 'd' expects an integer ...".
#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/parse.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

using KeyValues = std::map<std::string, std::string>;

class KeyValueWriter {
 public:
  explicit KeyValueWriter(KeyValues& kv) : m_kv(kv) {}

  template <class T>
  void put(const std::string& key, const T& value) {
    std::ostringstream os;
    os.precision(17);
    if constexpr (std::is_same<T, bool>::value) os << (value ? 1 : 0);
    else os << value;
    m_kv[key] = os.str();
  }

 private:
  KeyValues& m_kv;
};

class KeyValueReader {
 public:
  // fn names the reader in errors; sizes are capped at maxSize.
  KeyValueReader(const KeyValues& kv, const char* fn, Index maxSize) : m_kv(kv), m_fn(fn), m_maxSize(maxSize) {}

  const std::string& text(const std::string& key) const {
    auto it = m_kv.find(key);
    if (it == m_kv.end()) throw ValueError(message(m_fn, "missing key '", key, "'"));
    return it->second;
  }
  bool has(const std::string& key) const { return m_kv.count(key) != 0; }
  double number(const std::string& key) const { return parseNumber(what(key), text(key)); }
  Index size(const std::string& key, Index lo) const { return parseInteger<Index>(what(key), text(key), lo, m_maxSize); }
  bool flag(const std::string& key) const { return parseInteger<int>(what(key), text(key), 0, 1) != 0; }
  // A comma-separated list of sizes, each >= lo ("16,32,64").
  std::vector<Index> sizes(const std::string& key, Index lo) const {
    std::vector<Index> out;
    const std::string_view all = text(key);
    std::size_t start = 0;
    while (start <= all.size()) {
      const std::size_t comma = std::min(all.find(',', start), all.size());
      out.push_back(parseInteger<Index>(what(key), all.substr(start, comma - start), lo, m_maxSize));
      start = comma + 1;
    }
    return out;
  }

 private:
  std::string what(const std::string& key) const { return std::string(m_fn) + ": key '" + key + "'"; }
  const KeyValues& m_kv;
  const char* m_fn;
  Index m_maxSize;
};

}  // namespace ddl
