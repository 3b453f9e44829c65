#pragma once
// ddl/data/bpe_vocab.hpp: the files that define a byte-level BPE tokenizer (docs/tokenizer.md), read
// into plain lists for BpeTokenizer (data/bpe_tokenizer.hpp):
//   - GPT-2's pair: vocab.json (a flat JSON object token -> id; GPT-2's encoder.json) and merges.txt
//     (an optional "#version" line, then one merge "left right" per line, best first; GPT-2's vocab.bpe);
//   - a Hugging Face tokenizer.json whose model is BPE over GPT-2's byte-level pre-tokeniser.
// Tokens in these files are spelled in GPT-2's byte-to-unicode alphabet, where every byte is one
// printable character (a space is 'Ġ' U+0120); they are turned back into raw bytes here, so everything
// after this header works on bytes. Added tokens of tokenizer.json (and the special tokens named for
// vocab.json) are spelled as plain text instead. Every fault names the file and the byte offset.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/json_text.hpp"
#include "ddl/data/file_bytes.hpp"
#include "ddl/data/gpt2_pretokenizer.hpp"
#include "ddl/data/json_reader.hpp"

namespace ddl {

// GPT-2's bytes_to_unicode(): the printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for
// themselves; the other 68 bytes take U+0100, U+0101, ... in byte order. So no token contains a space
// or a control character, and merges.txt can separate its two tokens with a space.
inline const std::array<char32_t, 256>& gpt2ByteToUnicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 0x100;
    for (unsigned b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

// The byte that code point cp stands for in GPT-2's alphabet, or -1.
inline int gpt2UnicodeToByte(char32_t cp) {
  static const std::array<short, 0x144> inverse = [] {
    std::array<short, 0x144> inv{};
    inv.fill(-1);
    const auto& fwd = gpt2ByteToUnicode();
    for (unsigned b = 0; b < 256; ++b) inv[fwd[b]] = static_cast<short>(b);
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

// One vocabulary entry: the token's raw bytes, its id, and where the file spells it.
struct BpeVocabEntry {
  std::string bytes;
  int id;
  std::uint64_t offset;
};
// One merge: the raw bytes of the left and right token, and where the file spells it.
struct BpeMergeEntry {
  std::string left, right;
  std::uint64_t offset;
};

// What a tokenizer is made of. The merges are in rank order (the first is applied first).
struct BpeVocabulary {
  std::vector<BpeVocabEntry> tokens;
  std::vector<BpeMergeEntry> merges;
  std::vector<std::string> specials;  // raw text of the tokens that encode() may recognise in a text
  std::string vocabSource, mergesSource;  // file names for messages
};

// The raw bytes a token spelled in GPT-2's alphabet stands for; IoError naming source and offset
// when it holds a character outside the alphabet (or is not UTF-8).
inline std::string gpt2TokenBytes(std::string_view spelled, const char* fn, const std::string& source,
                                  std::uint64_t offset) {
  std::string out;
  out.reserve(spelled.size());
  for (std::size_t i = 0; i < spelled.size();) {
    const Utf8Char c = utf8CharAt(spelled, i);
    const int b = c.len == 1 && c.cp >= 0x80 ? -1 : gpt2UnicodeToByte(c.cp);  // a lone non-UTF-8 byte
    if (b < 0)
      throwFileError(fn, source, offset, "token \"", excerpt(spelled), "\" has a character (code point ",
                     static_cast<std::uint32_t>(c.cp), ") outside GPT-2's byte-level alphabet");
    out += static_cast<char>(b);
    i += c.len;
  }
  return out;
}

namespace detail {
inline const JsonValue& requireMember(const JsonValue& obj, const char* key, const char* fn, const std::string& source) {
  const JsonValue* v = obj.find(key);
  if (v == nullptr) throwFileError(fn, source, obj.offset, "expected a member \"", key, "\" in this object");
  return *v;
}
inline void requireKind(const JsonValue& v, JsonValue::Kind kind, const char* what, const char* fn,
                        const std::string& source) {
  if (v.kind != kind)
    throwFileError(fn, source, v.offset, what, " must be ", jsonKindName(kind), ", found ", jsonKindName(v.kind));
}
// Appends the members of a {token: id} object; `raw` holds tokens spelled as plain text.
inline void readVocabObject(const JsonValue& obj, const std::vector<std::string>& raw, const char* fn,
                            const std::string& source, BpeVocabulary& into) {
  requireKind(obj, JsonValue::Kind::Object, "the vocabulary", fn, source);
  into.tokens.reserve(into.tokens.size() + obj.members.size());
  for (const auto& m : obj.members) {
    const auto id = static_cast<int>(readJsonInteger(m.second, 0, (1LL << 31) - 2, fn, source, "a token id"));
    bool isRaw = false;
    for (const std::string& r : raw) isRaw = isRaw || r == m.first;
    into.tokens.push_back({isRaw ? m.first : gpt2TokenBytes(m.first, fn, source, m.second.offset), id, m.second.offset});
  }
}
inline void addMerge(std::string_view left, std::string_view right, std::uint64_t offset, const char* fn,
                     const std::string& source, BpeVocabulary& into) {
  into.merges.push_back({gpt2TokenBytes(left, fn, source, offset), gpt2TokenBytes(right, fn, source, offset), offset});
}
}  // namespace detail

// Reads vocab.json's text (named `source` in messages). specials: tokens spelled as plain text
// (empty: "<|endoftext|>" when the file has it, as GPT-2's encoder.json does).
inline void readVocabJson(std::string_view text, const std::string& source, BpeVocabulary& into,
                          std::vector<std::string> specials = {}) {
  const char* fn = "ddl::readVocabJson";
  const JsonValue root = JsonReader(text, source).parse();
  if (specials.empty() && root.find("<|endoftext|>") != nullptr) specials.push_back("<|endoftext|>");
  detail::readVocabObject(root, specials, fn, source, into);
  into.specials = std::move(specials);
  into.vocabSource = source;
}

// Reads merges.txt's text (named `source` in messages): "left right" per line, '\n' or "\r\n" line
// ends, an optional first line "#version...", no empty line but a final one.
inline void readMergesTxt(std::string_view text, const std::string& source, BpeVocabulary& into) {
  const char* fn = "ddl::readMergesTxt";
  std::size_t pos = 0;
  if (text.substr(0, 8) == "#version") pos = text.find('\n') == std::string_view::npos ? text.size() : text.find('\n') + 1;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::size_t space = line.find(' ');
    if (line.empty() || space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      throwFileError(fn, source, pos, "expected a merge \"left right\" (two tokens, one space), found \"",
                     excerpt(line), "\"");
    detail::addMerge(line.substr(0, space), line.substr(space + 1), pos, fn, source, into);
    pos = end + 1;
  }
  into.mergesSource = source;
}

// Reads a Hugging Face tokenizer.json's text: model.type "BPE" with vocab and merges (strings
// "left right" or pairs ["left", "right"]), the ByteLevel pre-tokeniser with its regex and without a
// prefix space, no normalizer and no dropout; the added tokens become the specials. Anything else is
// refused, since encoding would then differ from the tokenizer the file describes.
inline void readTokenizerJson(std::string_view text, const std::string& source, BpeVocabulary& into) {
  const char* fn = "ddl::readTokenizerJson";
  const JsonValue root = JsonReader(text, source).parse();
  detail::requireKind(root, JsonValue::Kind::Object, "the file", fn, source);
  const auto unsupported = [&](const JsonValue& v, const char* what) {
    throwFileError(fn, source, v.offset, what, " is not supported (ddl reads GPT-2-style byte-level BPE, docs/tokenizer.md)");
  };
  if (const JsonValue* norm = root.find("normalizer"); norm != nullptr && !norm->isNull()) unsupported(*norm, "a normalizer");
  const JsonValue& pre = detail::requireMember(root, "pre_tokenizer", fn, source);
  detail::requireKind(pre, JsonValue::Kind::Object, "pre_tokenizer", fn, source);
  const JsonValue& preType = detail::requireMember(pre, "type", fn, source);
  if (!preType.isString() || preType.text != "ByteLevel") unsupported(preType, "a pre_tokenizer other than ByteLevel");
  if (const JsonValue* p = pre.find("add_prefix_space"); p != nullptr && !(p->kind == JsonValue::Kind::Bool && !p->boolean))
    unsupported(*p, "add_prefix_space other than false");
  if (const JsonValue* r = pre.find("use_regex"); r != nullptr && !(r->kind == JsonValue::Kind::Bool && r->boolean))
    unsupported(*r, "use_regex other than true");

  std::vector<std::string> specials;
  std::vector<BpeVocabEntry> addedOnly;  // added tokens the model's vocabulary lacks: Hugging Face gives them their own ids
  if (const JsonValue* added = root.find("added_tokens"); added != nullptr) {
    detail::requireKind(*added, JsonValue::Kind::Array, "added_tokens", fn, source);
    for (const JsonValue& t : added->items) {
      detail::requireKind(t, JsonValue::Kind::Object, "an added token", fn, source);
      const JsonValue& content = detail::requireMember(t, "content", fn, source);
      detail::requireKind(content, JsonValue::Kind::String, "an added token's content", fn, source);
      if (content.text.empty()) throwFileError(fn, source, content.offset, "an added token's content is empty");
      specials.push_back(content.text);
      const auto id = static_cast<int>(readJsonInteger(detail::requireMember(t, "id", fn, source), 0, (1LL << 31) - 2, fn,
                                                   source, "an added token's id"));
      addedOnly.push_back({content.text, id, t.offset});
    }
  }

  const JsonValue& model = detail::requireMember(root, "model", fn, source);
  detail::requireKind(model, JsonValue::Kind::Object, "model", fn, source);
  const JsonValue& type = detail::requireMember(model, "type", fn, source);
  if (!type.isString() || type.text != "BPE") unsupported(type, "a model other than BPE");
  if (const JsonValue* d = model.find("dropout"); d != nullptr && !d->isNull()) unsupported(*d, "BPE dropout");
  const JsonValue& vocab = detail::requireMember(model, "vocab", fn, source);
  detail::readVocabObject(vocab, specials, fn, source, into);
  // An added token is model.vocab's token under the same id, or a token of its own under an id no
  // vocabulary token has: anything else would give one id two meanings.
  std::unordered_map<int, std::size_t> byId;  // index in into.tokens (which grows below)
  for (std::size_t i = 0; i < into.tokens.size(); ++i) byId.emplace(into.tokens[i].id, i);
  for (const BpeVocabEntry& a : addedOnly) {
    if (const JsonValue* same = vocab.find(a.bytes); same != nullptr) {
      const auto id = static_cast<int>(readJsonInteger(*same, 0, (1LL << 31) - 2, fn, source, "a token id"));
      if (id != a.id)
        throwFileError(fn, source, a.offset, "added token \"", a.bytes, "\" has id ", a.id, ", model.vocab gives it id ",
                       id, " (byte offset ", same->offset, "): one token, two ids");
      continue;
    }
    if (const auto it = byId.find(a.id); it != byId.end())
      throwFileError(fn, source, a.offset, "added token \"", a.bytes, "\" has id ", a.id, ", the id of model.vocab's token \"",
                     into.tokens[it->second].bytes, "\" (byte offset ", into.tokens[it->second].offset, "): one id, two tokens");
    into.tokens.push_back(a);
  }
  const JsonValue& merges = detail::requireMember(model, "merges", fn, source);
  detail::requireKind(merges, JsonValue::Kind::Array, "model.merges", fn, source);
  into.merges.reserve(merges.items.size());
  for (const JsonValue& m : merges.items) {
    if (m.isString()) {
      const std::size_t space = m.text.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == m.text.size() || m.text.find(' ', space + 1) != std::string::npos)
        throwFileError(fn, source, m.offset, "expected a merge \"left right\" (two tokens, one space), found \"", excerpt(m.text), "\"");
      detail::addMerge(std::string_view(m.text).substr(0, space), std::string_view(m.text).substr(space + 1), m.offset, fn,
                       source, into);
    } else if (m.isArray() && m.items.size() == 2 && m.items[0].isString() && m.items[1].isString()) {
      detail::addMerge(m.items[0].text, m.items[1].text, m.offset, fn, source, into);
    } else {
      throwFileError(fn, source, m.offset, "expected a merge, a string \"left right\" or a pair [\"left\", \"right\"]");
    }
  }
  into.specials = std::move(specials);
  into.vocabSource = into.mergesSource = source;
}

// The text of a file, for the readers above.
inline std::string readTextFile(const std::string& path, const char* fn) {
  const std::vector<std::uint8_t> bytes = readFileBytes(path, std::uint64_t(1) << 31, fn);
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace ddl
