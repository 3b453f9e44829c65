#pragma once
// ddl/core/json_text.hpp: the limits every reader of JSON text keeps (config.json and the shard index of
// the authors' folders, tokenizer.json and vocab.json, checkpoint metadata): nesting at most kMaxJsonDepth
// levels, checked on the text before any parser builds a tree (a deeper value would make a recursive dump,
// comparison or message overflow the stack), and values quoted in messages by a bounded excerpt.
// core/ includes no JSON library: parseJsonText and jsonExcerpt are templates on the JSON type
// (nlohmann::json where the caller has it).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ddl/core/error.hpp"

namespace ddl {

// No file ddl reads needs more than a handful of levels (tokenizer.json: 4; config.json: 2).
inline constexpr int kMaxJsonDepth = 128;
// How many bytes of a value a message quotes.
inline constexpr std::size_t kExcerptBytes = 80;

// text itself when it has at most max bytes, else its first max bytes (not cutting a UTF-8 character)
// followed by "... (N bytes)".
inline std::string excerpt(std::string_view text, std::size_t max = kExcerptBytes) {
  if (text.size() <= max) return std::string(text);
  std::size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // a continuation byte
  return std::string(text.substr(0, cut)) + "... (" + std::to_string(text.size()) + " bytes)";
}

// The byte offset of the first '[' or '{' that opens level maxDepth + 1 of the JSON text, or npos when
// the text nests no deeper than maxDepth. Brackets inside strings do not count. On text that is not valid
// JSON the count is that of the valid prefix a parser reads before it fails, so the bound holds for any
// parser of RFC 8259 text.
inline std::size_t jsonTooDeepAt(std::string_view text, int maxDepth = kMaxJsonDepth) {
  int depth = 0;
  bool inString = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      if (c == '\\') ++i;  // the escaped character, a quote included
      else if (c == '"') inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > maxDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

// Throws IoError "fn: source: byte offset N: JSON nested deeper than 128 levels" when the text nests
// deeper than kMaxJsonDepth.
inline void requireJsonDepth(std::string_view text, const char* fn, const std::string& source) {
  const std::size_t at = jsonTooDeepAt(text);
  if (at != std::string_view::npos)
    throw IoError(message(fn, source, ": byte offset ", at, ": JSON nested deeper than ", kMaxJsonDepth,
                          " levels"));
}

// The JSON value of text (Json: nlohmann::json), nesting checked first (requireJsonDepth); a syntax error
// is an IoError naming fn, source and the parser's message, bounded.
template <class Json>
Json parseJsonText(std::string_view text, const char* fn, const std::string& source) {
  requireJsonDepth(text, fn, source);
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const typename Json::exception& e) {
    throw IoError(message(fn, source, ": invalid JSON: ", excerpt(e.what(), 2 * kExcerptBytes)));
  }
}

// A parsed JSON value as a message quotes it: its compact text, bounded by excerpt.
template <class Json>
std::string jsonExcerpt(const Json& value, std::size_t max = kExcerptBytes) {
  return excerpt(value.dump(-1, ' ', false, Json::error_handler_t::replace), max);
}

}  // namespace ddl
