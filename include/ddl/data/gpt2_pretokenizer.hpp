#pragma once
// ddl/data/gpt2_pretokenizer.hpp: GPT-2's pre-tokenisation, the split of a text into the pieces that
// byte-pair encoding then works on one at a time (docs/tokenizer.md). GPT-2 splits with the regex
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// which std::regex cannot express (no \p{L}); this is that regex written out by hand over the classes
// of data/unicode_classes.hpp. The alternatives are tried in order at each position, so:
//   - a contraction ('s 't 're 've 'm 'll 'd, lower case only, as in GPT-2) is a piece of its own,
//     even inside a word ("'sam" -> "'s" "am");
//   - a run of letters, of numbers or of "other" characters takes one preceding ' ' (U+0020 only);
//   - a run of white space followed by a non-space gives up its last character, which then starts the
//     next piece (" b" of "a   b"), or is a piece alone when it is not ' ' ("\n" of "a\nb");
//     at the end of the text the run stays whole.
// GPT-2 works on Unicode text; here the input is bytes. A byte that does not start a well-formed UTF-8
// sequence (RFC 3629: no overlong forms, surrogates or values above U+10FFFF) is a character of its
// own of class Other, so any byte string splits into pieces whose concatenation is the input.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "ddl/data/unicode_classes.hpp"

namespace ddl {

// One character of a byte string: its code point (the byte itself when it is not valid UTF-8), its
// length in bytes and its class.
struct Utf8Char {
  char32_t cp;
  std::uint8_t len;
  CharClass cls;
};

// The character that starts at s[pos] (pos < s.size()).
inline Utf8Char utf8CharAt(std::string_view s, std::size_t pos) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(pos);
  if (b0 < 0x80) return {b0, 1, charClass(b0)};
  const std::size_t left = s.size() - pos;
  const auto cont = [&](std::size_t i, unsigned char lo, unsigned char hi) {
    return i < left && byte(pos + i) >= lo && byte(pos + i) <= hi;
  };
  std::uint8_t len = 0;
  char32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (cont(1, 0x80, 0xBF)) len = 2, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    const unsigned char lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;  // no overlongs, no surrogates
    if (cont(1, lo, hi) && cont(2, 0x80, 0xBF)) len = 3, cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    const unsigned char lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;  // no overlongs, <= U+10FFFF
    if (cont(1, lo, hi) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF)) len = 4, cp = b0 & 0x07;
  }
  if (len == 0) return {b0, 1, CharClass::Other};  // not UTF-8: a character of its own
  for (std::size_t i = 1; i < len; ++i) cp = (cp << 6) | (byte(pos + i) & 0x3F);
  return {cp, len, charClass(cp)};
}

namespace detail {
// The length of GPT-2's contraction at s[pos] ('s 't 're 've 'm 'll 'd), or 0.
inline std::size_t contractionAt(std::string_view s, std::size_t pos) {
  if (s[pos] != '\'' || pos + 1 >= s.size()) return 0;
  const char a = s[pos + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 >= s.size()) return 0;
  const char b = s[pos + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}
// The end of the run of class cls that starts at pos.
inline std::size_t runEnd(std::string_view s, std::size_t pos, CharClass cls) {
  while (pos < s.size()) {
    const Utf8Char c = utf8CharAt(s, pos);
    if (c.cls != cls) break;
    pos += c.len;
  }
  return pos;
}
}  // namespace detail

// The end of the pre-token that starts at s[pos] (pos < s.size()).
inline std::size_t gpt2PreTokenEnd(std::string_view s, std::size_t pos) {
  if (const std::size_t n = detail::contractionAt(s, pos)) return pos + n;
  const Utf8Char c0 = utf8CharAt(s, pos);
  if (c0.cls != CharClass::Space) return detail::runEnd(s, pos, c0.cls);  // \p{L}+ | \p{N}+ | [^\s\p{L}\p{N}]+
  if (c0.cp == ' ' && pos + 1 < s.size()) {  // ' ?' before a run
    const Utf8Char c1 = utf8CharAt(s, pos + 1);
    if (c1.cls != CharClass::Space) return detail::runEnd(s, pos + 1, c1.cls);
  }
  // \s+(?!\S) | \s+ : the white-space run, without its last character when a non-space follows it
  // and it has more than one.
  std::size_t end = pos, last = pos;
  while (end < s.size()) {
    const Utf8Char c = utf8CharAt(s, end);
    if (c.cls != CharClass::Space) break;
    last = end;
    end += c.len;
  }
  if (end == s.size() || last == pos) return end;
  return last;
}

// Calls f(std::string_view piece) for each pre-token of s, in order; the pieces concatenate to s.
template <class F>
void forEachGpt2PreToken(std::string_view s, F&& f) {
  std::size_t pos = 0;
  while (pos < s.size()) {
    const std::size_t end = gpt2PreTokenEnd(s, pos);
    f(s.substr(pos, end - pos));
    pos = end;
  }
}

// The pre-tokens of s (views into s).
inline std::vector<std::string_view> gpt2PreTokens(std::string_view s) {
  std::vector<std::string_view> out;
  forEachGpt2PreToken(s, [&](std::string_view piece) { out.push_back(piece); });
  return out;
}

// A place to cut s so that pre-tokenising the two parts apart gives the pieces of the whole: the end
// of the last '\n' in s that has an ASCII non-space byte on both sides (that '\n' is then a piece of
// its own, and no piece reaches across it), or 0 when there is none. Lets a reader pre-tokenise a large
// file chunk by chunk with the same result as all at once.
inline std::size_t gpt2SafeCut(std::string_view s) {
  const auto solid = [](unsigned char b) { return b < 0x80 && charClass(b) != CharClass::Space; };
  for (std::size_t i = s.size() >= 2 ? s.size() - 2 : 0; i >= 1 && i + 1 < s.size(); --i) {
    if (s[i] == '\n' && solid(static_cast<unsigned char>(s[i - 1])) && solid(static_cast<unsigned char>(s[i + 1])))
      return i + 1;
  }
  return 0;
}

}  // namespace ddl
