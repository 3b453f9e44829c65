#pragma once
// ddl/data/json_reader.hpp: a small strict JSON reader (RFC 8259) for the data files that come as JSON,
// the tokenizer's vocabularies (docs/tokenizer.md), so they load in builds without nlohmann-json.
//
// It builds a tree of JsonValue, each remembering the byte offset where it starts, so that a caller
// who finds a value of the wrong kind can name the file and the offset. Strict: one value, surrounded
// only by white space; no comments, trailing commas, NaN, leading zeros or control characters in
// strings; \u escapes must pair surrogates; duplicate object keys are refused. Numbers keep their text:
// the caller converts them with the range it expects (readJsonInteger). Nesting is limited to
// kMaxJsonDepth (core/json_text.hpp) so a hostile file cannot exhaust the stack; messages quote keys and
// numbers by a bounded excerpt.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/json_text.hpp"

namespace ddl {

struct JsonValue {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  std::string text;  // a string's decoded UTF-8 bytes, or a number's literal text
  std::vector<JsonValue> items;                              // Array
  std::vector<std::pair<std::string, JsonValue>> members;    // Object, in file order
  std::uint64_t offset = 0;                                  // of the value's first byte

  bool isObject() const { return kind == Kind::Object; }
  bool isArray() const { return kind == Kind::Array; }
  bool isString() const { return kind == Kind::String; }
  bool isNumber() const { return kind == Kind::Number; }
  bool isNull() const { return kind == Kind::Null; }
  // The member named key of an object, or nullptr.
  const JsonValue* find(std::string_view key) const {
    for (const auto& m : members)
      if (m.first == key) return &m.second;
    return nullptr;
  }
};

inline const char* jsonKindName(JsonValue::Kind k) {
  switch (k) {
    case JsonValue::Kind::Null: return "null";
    case JsonValue::Kind::Bool: return "a boolean";
    case JsonValue::Kind::Number: return "a number";
    case JsonValue::Kind::String: return "a string";
    case JsonValue::Kind::Array: return "an array";
    case JsonValue::Kind::Object: return "an object";
  }
  return "?";
}

// Throws IoError "fn: file 'source': byte offset N: parts...": how the readers of JSON and text files report a fault.
template <class... Parts>
[[noreturn]] void throwFileError(const char* fn, const std::string& source, std::uint64_t offset, const Parts&... parts) {
  throw IoError(message(fn, "file '", source, "': byte offset ", offset, ": ", parts...));
}

// A number value as an integer in [lo, hi]; refuses fractions, exponents and values out of range.
inline long long readJsonInteger(const JsonValue& v, long long lo, long long hi, const char* fn, const std::string& source,
                             const char* what) {
  if (!v.isNumber()) throwFileError(fn, source, v.offset, what, " must be an integer, found ", jsonKindName(v.kind));
  const std::string& t = v.text;
  bool ok = t.find_first_of(".eE") == std::string::npos && t.size() <= 18;  // 17 digits and a sign: no overflow below
  long long value = 0;
  if (ok) {
    std::size_t i = t[0] == '-' ? 1 : 0;
    for (; i < t.size(); ++i) value = value * 10 + (t[i] - '0');
    if (t[0] == '-') value = -value;
    ok = value >= lo && value <= hi;
  }
  if (!ok) throwFileError(fn, source, v.offset, what, " must be an integer in [", lo, ", ", hi, "], found ", excerpt(t));
  return value;
}

class JsonReader {
 public:
  // source names the text in messages (normally its file path).
  JsonReader(std::string_view text, std::string source) : m_text(text), m_source(std::move(source)) {}

  // The one value the text holds; IoError naming the source and the byte offset of the first fault.
  JsonValue parse() {
    m_pos = 0;
    skipSpace();
    JsonValue v = value(0);
    skipSpace();
    if (m_pos != m_text.size()) fail("expected the end of the text after the JSON value, found '", m_text[m_pos], "'");
    return v;
  }

 private:
  static constexpr const char* kFn = "ddl::JsonReader";

  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) const { throwFileError(kFn, m_source, m_pos, parts...); }

  bool atEnd() const { return m_pos >= m_text.size(); }
  char peek() const { return m_text[m_pos]; }
  void skipSpace() {
    while (!atEnd() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++m_pos;
  }
  void expect(char c) {
    if (atEnd()) fail("expected '", c, "', found the end of the text");
    if (peek() != c) fail("expected '", c, "', found '", peek(), "'");
    ++m_pos;
  }
  void literal(std::string_view word) {
    if (m_text.substr(m_pos, word.size()) != word) fail("expected '", word, "'");
    m_pos += word.size();
  }

  JsonValue value(int depth) {
    if (atEnd()) fail("expected a JSON value, found the end of the text");
    JsonValue v;
    v.offset = m_pos;
    const char c = peek();
    if (c == '{' || c == '[') {
      if (depth >= kMaxJsonDepth) fail("nesting deeper than ", kMaxJsonDepth, " levels");
      if (c == '{') object(v, depth + 1);
      else array(v, depth + 1);
    } else if (c == '"') {
      v.kind = JsonValue::Kind::String;
      v.text = string();
    } else if (c == 't' || c == 'f') {
      v.kind = JsonValue::Kind::Bool;
      v.boolean = c == 't';
      literal(c == 't' ? "true" : "false");
    } else if (c == 'n') {
      literal("null");
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = JsonValue::Kind::Number;
      v.text = number();
    } else {
      fail("expected a JSON value, found '", c, "'");
    }
    return v;
  }

  void object(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::Object;
    std::unordered_set<std::string> keys;
    elements('}', [&] {
      const std::size_t keyAt = m_pos;
      if (atEnd() || peek() != '"') fail("expected a string key in the object");
      std::string key = string();
      if (!keys.insert(key).second) throwFileError(kFn, m_source, keyAt, "duplicate key \"", excerpt(key), "\" in the object");
      skipSpace();
      expect(':');
      skipSpace();
      v.members.emplace_back(std::move(key), value(depth));
    });
  }

  void array(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::Array;
    elements(']', [&] { v.items.push_back(value(depth)); });
  }

  // The comma-separated elements of an object or array, the opening bracket at m_pos, up to and with close;
  // element() reads one, starting at its first character.
  template <class Element>
  void elements(char close, Element&& element) {
    ++m_pos;
    skipSpace();
    if (!atEnd() && peek() == close) {
      ++m_pos;
      return;
    }
    for (;;) {
      skipSpace();
      element();
      skipSpace();
      if (!atEnd() && peek() == ',') {
        ++m_pos;
        continue;
      }
      expect(close);
      return;
    }
  }

  std::string number() {
    const std::size_t start = m_pos;
    auto digits = [&] {
      const std::size_t from = m_pos;
      while (!atEnd() && peek() >= '0' && peek() <= '9') ++m_pos;
      if (m_pos == from) fail("expected a digit in the number");
    };
    if (peek() == '-') ++m_pos;
    if (!atEnd() && peek() == '0') {
      ++m_pos;
      if (!atEnd() && peek() >= '0' && peek() <= '9') fail("a number may not have a leading zero");
    } else {
      digits();
    }
    if (!atEnd() && peek() == '.') {
      ++m_pos;
      digits();
    }
    if (!atEnd() && (peek() == 'e' || peek() == 'E')) {
      ++m_pos;
      if (!atEnd() && (peek() == '+' || peek() == '-')) ++m_pos;
      digits();
    }
    return std::string(m_text.substr(start, m_pos - start));
  }

  unsigned hex4() {
    unsigned v = 0;
    for (int i = 0; i < 4; ++i, ++m_pos) {
      if (atEnd()) fail("expected 4 hex digits after \\u, found the end of the text");
      const char c = peek();
      unsigned d;
      if (c >= '0' && c <= '9') d = static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') d = static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') d = static_cast<unsigned>(c - 'A' + 10);
      else fail("expected a hex digit after \\u, found '", c, "'");
      v = v * 16 + d;
    }
    return v;
  }

  static void appendUtf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // The string at m_pos (which holds '"'), decoded; raw bytes pass as they are (the caller decides
  // whether it needs valid UTF-8).
  std::string string() {
    ++m_pos;
    std::string out;
    for (;;) {
      if (atEnd()) fail("unterminated string");
      const char c = peek();
      if (c == '"') {
        ++m_pos;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character ", +static_cast<unsigned char>(c), " in a string");
      if (c != '\\') {
        out += c;
        ++m_pos;
        continue;
      }
      ++m_pos;
      if (atEnd()) fail("unterminated escape in a string");
      const char e = peek();
      ++m_pos;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          const std::size_t at = m_pos - 2;
          std::uint32_t cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) throwFileError(kFn, m_source, at, "\\u escape is a lone low surrogate");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (m_text.substr(m_pos, 2) != "\\u")
              throwFileError(kFn, m_source, at, "\\u escape is a high surrogate without its low surrogate");
            m_pos += 2;
            const std::uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF)
              throwFileError(kFn, m_source, at, "\\u escape is a high surrogate without its low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          appendUtf8(out, cp);
          break;
        }
        default:
          --m_pos;
          fail("unknown escape '\\", e, "' in a string");
      }
    }
  }

  std::string_view m_text;
  std::string m_source;
  std::size_t m_pos = 0;
};

}  // namespace ddl
