// Tests for include/ddl/data/bpe_tokenizer.hpp and the headers it stands on: GPT-2's pre-tokenisation,
// the byte-to-unicode alphabet, BPE over a small vocabulary whose merges are checked by hand
// (tests/fixtures/bpe), round trips of any bytes, the JSON reader and the files' error messages, and
// (last, skipped with exit code 77 without the files) GPT-2's own vocabulary.
// Light on purpose: no Eigen types and no fixtures.hpp, so this file compiles in seconds.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "ddl/data/bpe_tokenizer.hpp"

namespace test_bpe_tokenizer {  // each test file in its own namespace: a group of files compiles as one unit

namespace {

using ddl::BpeTokenizer;
using ddl::SpecialTokens;
using ddl_test::contains;
using ddl_test::thrownMessage;
using Pieces = std::vector<std::string>;

const std::string kFixtures = DDL_TEST_FIXTURES "/bpe/";

Pieces pieces(const std::string& s) {
  Pieces out;
  for (std::string_view p : ddl::gpt2PreTokens(s)) out.emplace_back(p);
  return out;
}

// The tokenizer of tests/fixtures/bpe: ids 0..255 are the bytes themselves; merges 1..16 give ids
// 256..271 ("Ġt" "he" "Ġthe" "ll" "ell" "hell" "hello" "Ġw" "or" "Ġwor" "Ġworl" "Ġworld" "ĠĠ" "12"
// "'s" "é"), and 272 is "<|endoftext|>".
const BpeTokenizer& fixture() {
  static const BpeTokenizer tok = BpeTokenizer::fromFiles(kFixtures + "vocab.json", kFixtures + "merges.txt");
  return tok;
}

std::string tmpPath(const std::string& name) {
  std::filesystem::create_directories(DDL_TEST_TMPDIR);
  return std::string(DDL_TEST_TMPDIR) + "/bpe_" + name;
}
std::string writeText(const std::string& name, const std::string& text) {
  const std::string path = tmpPath(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}
std::string fixtureText(const std::string& name) {
  std::ifstream in(kFixtures + name, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string randomBytes(std::mt19937& gen, std::size_t n) {
  // Mostly bytes that make up text (ASCII, spaces, UTF-8 lead and continuation bytes), so that words,
  // runs of white space and broken sequences all occur.
  static const std::string alphabet = "ab 'sdtlle12\n\t.!\xC3\xA9\xE2\x82\xAC\xF0\x9F\xA4\x97\x80\xBF\xFF\xC0\xED\xA0";
  std::string s(n, ' ');
  for (char& c : s) {
    const int r = std::uniform_int_distribution<int>(0, 9)(gen);
    c = r < 8 ? alphabet[std::uniform_int_distribution<std::size_t>(0, alphabet.size() - 1)(gen)]
              : static_cast<char>(std::uniform_int_distribution<int>(0, 255)(gen));
  }
  return s;
}

}  // namespace

TEST_CASE("pre-tokens: contractions, leading spaces, digits and punctuation runs follow GPT-2's regex") {
  CHECK(pieces("I don't know") == Pieces{"I", " don", "'t", " know"});
  CHECK(pieces("we're they've I'm you'll he'd it's") ==
        Pieces{"we", "'re", " they", "'ve", " I", "'m", " you", "'ll", " he", "'d", " it", "'s"});
  CHECK(pieces("'sam") == Pieces{"'s", "am"});      // a contraction even inside a word
  CHECK(pieces("IT'S") == Pieces{"IT", "'", "S"});  // lower case only, as GPT-2
  CHECK(pieces("x '") == Pieces{"x", " '"});
  CHECK(pieces("abc123 4567 x9") == Pieces{"abc", "123", " 4567", " x", "9"});
  CHECK(pieces("Hi!!! ...?") == Pieces{"Hi", "!!!", " ...?"});
  CHECK(pieces("a-b_c") == Pieces{"a", "-", "b", "_", "c"});
  CHECK(pieces("") == Pieces{});
}

TEST_CASE("pre-tokens: white space gives its last character to what follows, except at the end") {
  CHECK(pieces("a   b") == Pieces{"a", "  ", " b"});
  CHECK(pieces("a\nb") == Pieces{"a", "\n", "b"});
  CHECK(pieces("a \n b") == Pieces{"a", " \n", " b"});
  CHECK(pieces("a  \tb") == Pieces{"a", "  ", "\t", "b"});
  CHECK(pieces("end   ") == Pieces{"end", "   "});    // \s+(?!\S) at the end keeps the run whole
  CHECK(pieces("end \n\n") == Pieces{"end", " \n\n"});
  CHECK(pieces("   ") == Pieces{"   "});
  CHECK(pieces(" x") == Pieces{" x"});
  CHECK(pieces("\xE3\x80\x80\xE3\x80\x80x") == Pieces{"\xE3\x80\x80", "\xE3\x80\x80", "x"});  // U+3000 is \s
  CHECK(pieces("a\xC2\xA0" "b") == Pieces{"a", "\xC2\xA0", "b"});  // U+00A0 too, but only ' ' joins a word
}

TEST_CASE("pre-tokens: non-ASCII letters and numbers, emojis and invalid UTF-8 bytes") {
  CHECK(pieces("h\xC3\xA9llo w\xC3\xB6rld") == Pieces{"h\xC3\xA9llo", " w\xC3\xB6rld"});
  CHECK(pieces("\xD0\x9C\xD0\xB8\xD1\x80 \xE4\xB8\x96\xE7\x95\x8C") ==
        Pieces{"\xD0\x9C\xD0\xB8\xD1\x80", " \xE4\xB8\x96\xE7\x95\x8C"});               // Мир 世界
  CHECK(pieces("x\xC2\xB2\xD9\xA3") == Pieces{"x", "\xC2\xB2\xD9\xA3"});               // ² and Arabic-Indic 3 are \p{N}
  CHECK(pieces("hi \xF0\x9F\xA4\x97\xF0\x9F\x91\x8D!") == Pieces{"hi", " \xF0\x9F\xA4\x97\xF0\x9F\x91\x8D!"});  // emojis are "other"
  CHECK(pieces("ab\xFF" "cd") == Pieces{"ab", "\xFF", "cd"});                          // a stray byte is "other"
  CHECK(pieces("a\xC3" "b") == Pieces{"a", "\xC3", "b"});                              // a truncated sequence too
  CHECK(pieces("\xC0\xAF" "a") == Pieces{"\xC0\xAF", "a"});                            // an overlong '/' is two bytes
  CHECK(pieces("\xED\xA0\x80") == Pieces{"\xED\xA0\x80"});                             // a surrogate: three "other" bytes
  CHECK(ddl::utf8CharAt("\xF4\x90\x80\x80", 0).len == 1);                              // above U+10FFFF
  CHECK(ddl::utf8CharAt("\xF0\x9F\xA4\x97", 0).cp == 0x1F917);
  CHECK(ddl::charClass(0x1F917) == ddl::CharClass::Other);
  CHECK(ddl::charClass(0x4E16) == ddl::CharClass::Letter);
  CHECK(ddl::charClass(0x2028) == ddl::CharClass::Space);
  CHECK(ddl::charClass(0x1C) == ddl::CharClass::Other);  // str.isspace() says yes, White_Space says no
}

TEST_CASE("pre-tokens: cutting a text where gpt2SafeCut says gives the pieces of the whole") {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 200; ++trial) {
    const std::string s = randomBytes(gen, 300);
    const std::size_t cut = ddl::gpt2SafeCut(s);
    if (cut == 0) continue;
    Pieces apart = pieces(s.substr(0, cut));
    const Pieces rest = pieces(s.substr(cut));
    apart.insert(apart.end(), rest.begin(), rest.end());
    REQUIRE(apart == pieces(s));
  }
  CHECK(ddl::gpt2SafeCut("ab\ncd") == 3);
  CHECK(ddl::gpt2SafeCut("ab \ncd") == 0);  // "\n" would join the space before it
  CHECK(ddl::gpt2SafeCut("ab\n\ncd\n") == 0);
}

TEST_CASE("byte-to-unicode: 188 printable bytes stand for themselves, the other 68 take U+0100 on") {
  const auto& table = ddl::gpt2ByteToUnicode();
  CHECK(table[' '] == 0x120);  // 'Ġ'
  CHECK(table['\n'] == 0x10A);
  CHECK(table['a'] == 'a');
  CHECK(table[0xAD] == 0x143);  // the soft hyphen is the last non-printable byte
  std::set<char32_t> seen(table.begin(), table.end());
  CHECK(seen.size() == 256);
  int identity = 0;
  for (unsigned b = 0; b < 256; ++b) {
    identity += table[b] == b;
    CHECK(ddl::gpt2UnicodeToByte(table[b]) == static_cast<int>(b));
  }
  CHECK(identity == 188);
  CHECK(ddl::gpt2UnicodeToByte(0x144) == -1);
}

TEST_CASE("BPE: the fixture vocabulary encodes by merge rank, as checked by hand") {
  const BpeTokenizer& tok = fixture();
  CHECK(tok.vocabSize() == 273);
  CHECK(tok.mergeCount() == 16);
  // " world": Ġw (8), or (9), Ġwor (10), Ġworl (11), Ġworld (12).
  CHECK(tok.encode(" world") == std::vector<int>{267});
  // "hello": h e (2) comes before l l (4), so e ll (5) never applies: he ll o, not hello.
  CHECK(tok.encode("hello") == std::vector<int>{257, 259, 'o'});
  CHECK(tok.encode("hello world") == std::vector<int>{257, 259, 'o', 267});
  CHECK(tok.encode(" the") == std::vector<int>{258});  // Ġt (1), he (2), Ġthe (3)
  CHECK(tok.encode("the") == std::vector<int>{'t', 257});
  CHECK(tok.encode("it's 123") == std::vector<int>{'i', 't', 270, ' ', 269, '3'});
  CHECK(tok.encode("     x") == std::vector<int>{268, 268, ' ', 'x'});  // "    " " x"; ĠĠ merges left first
  CHECK(tok.encode("caf\xC3\xA9") == std::vector<int>{'c', 'a', 'f', 271});
  CHECK(tok.encode("\xFF") == std::vector<int>{255});
  CHECK(tok.decode({257, 259, 'o', 267}) == "hello world");
  CHECK(tok.tokenBytes(271) == "\xC3\xA9");
  CHECK(tok.tokenId(" world") == 267);
  CHECK(tok.tokenId("nope") == -1);
}

TEST_CASE("BPE: <|endoftext|> is text unless encode is told to recognise it, and decode always spells it") {
  const BpeTokenizer& tok = fixture();
  CHECK(tok.specialId("<|endoftext|>") == 272);
  const std::string text = "the<|endoftext|> world";
  const std::vector<int> literal = tok.encode(text);
  CHECK(std::find(literal.begin(), literal.end(), 272) == literal.end());
  CHECK(tok.decode(literal) == text);
  CHECK(tok.encode(text, SpecialTokens::Recognised) == std::vector<int>{'t', 257, 272, 267});
  CHECK(tok.encode("<|endoftext|><|endoftext|>", SpecialTokens::Recognised) == std::vector<int>{272, 272});
  CHECK(tok.decode({272}) == "<|endoftext|>");
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { tok.specialId("<|pad|>"); }), "not a special token"));
}

TEST_CASE("BPE: an unknown id is refused by decode and tokenBytes, naming the id") {
  const BpeTokenizer& tok = fixture();
  const std::string m = thrownMessage<ddl::ValueError>([&] { tok.decode({1, 273}); });
  CHECK(contains(m, "ddl::BpeTokenizer::decode"));
  CHECK(contains(m, "ids[1] = 273 is not in the vocabulary (273 ids"));
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { tok.tokenBytes(-1); }), "token id -1 is not in the vocabulary"));
}

TEST_CASE("BPE: decode(encode(s)) == s for random bytes, valid UTF-8 or not, with and without a cache") {
  const BpeTokenizer& tok = fixture();
  std::mt19937 gen(42);
  ddl::BpeCache cache(64);  // small: it starts over several times
  for (int trial = 0; trial < 300; ++trial) {
    const std::string s = randomBytes(gen, std::uniform_int_distribution<std::size_t>(0, 200)(gen));
    const std::vector<int> ids = tok.encode(s);
    REQUIRE(tok.decode(ids) == s);
    REQUIRE(tok.encode(s, SpecialTokens::AsText, &cache) == ids);
  }
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  CHECK(tok.decode(tok.encode(all)) == all);
}

TEST_CASE("BPE: the rescan and the heap merge long and short pieces alike") {
  const BpeTokenizer& tok = fixture();
  std::mt19937 gen(3);
  for (int trial = 0; trial < 300; ++trial) {
    const std::string s = randomBytes(gen, std::uniform_int_distribution<std::size_t>(2, 64)(gen));
    std::vector<int> a, b;
    tok.bpeScan(s, a);
    tok.bpeHeap(s, b);
    REQUIRE(a == b);
  }
  const std::string spaces(1000, ' ');  // one pre-token: the heap's case
  const std::vector<int> ids = tok.encode(spaces);
  CHECK(ids == std::vector<int>(500, 268));
}

TEST_CASE("JSON reader: escapes, surrogate pairs and offsets of what it refuses") {
  const std::string text = R"( {"a\u00e9\ud83e\udd17\n": [1, -2.5e3, true, null], "b": {}} )";
  const ddl::JsonValue v = ddl::JsonReader(text, "t").parse();
  REQUIRE(v.isObject());
  CHECK(v.members[0].first == "a\xC3\xA9\xF0\x9F\xA4\x97\n");
  CHECK(v.members[0].second.items[1].text == "-2.5e3");
  CHECK(v.find("b")->offset == text.find("{}"));
  const auto err = [](const std::string& text) {
    return thrownMessage<ddl::IoError>([&] { ddl::JsonReader(text, "x.json").parse(); });
  };
  CHECK(contains(err(R"({"a": 1,})"), "file 'x.json': byte offset 8: expected a string key"));
  CHECK(contains(err(R"({"a": 1, "a": 2})"), "byte offset 9: duplicate key \"a\""));
  CHECK(contains(err(R"(["\ud800"])"), "byte offset 2: \\u escape is a high surrogate without its low surrogate"));
  CHECK(contains(err("[01]"), "byte offset 2: a number may not have a leading zero"));
  CHECK(contains(err("[1] x"), "byte offset 4: expected the end of the text"));
  CHECK(contains(err("\"a\tb\""), "byte offset 2: control character 9"));
  CHECK(contains(err(std::string(300, '[')), "nesting deeper than 128 levels"));  // core/json_text.hpp's limit
  CHECK(contains(err(std::string(129, '[') + std::string(129, ']')), "byte offset 128: nesting deeper than 128"));
  CHECK_NOTHROW(ddl::JsonReader(std::string(128, '[') + std::string(128, ']'), "x.json").parse());
  // Keys and numbers are quoted by a bounded excerpt: a 100 000-byte key makes a short message.
  const std::string key(100000, 'k');
  const std::string dup = err("{\"" + key + "\": 1, \"" + key + "\": 2}");
  CHECK(contains(dup, "duplicate key \"" + std::string(80, 'k') + "... (100000 bytes)\""));
  CHECK(dup.size() < 300);
  CHECK(contains(err("{\"a\": tru}"), "byte offset 6: expected 'true'"));
}

TEST_CASE("files: a malformed vocab.json or merges.txt is refused with the file and byte offset") {
  const std::string merges = kFixtures + "merges.txt";
  const auto loadError = [&](const std::string& vocabText, const std::string& mergesText) {
    const std::string v = writeText("vocab.json", vocabText), m = writeText("merges.txt", mergesText);
    return thrownMessage<ddl::IoError>([&] { BpeTokenizer::fromFiles(v, m); });
  };
  const std::string vocab = fixtureText("vocab.json"), goodMerges = fixtureText("merges.txt");
  const std::string vpath = tmpPath("vocab.json"), mpath = tmpPath("merges.txt");
  CHECK(contains(loadError("[1]", goodMerges), "file '" + vpath + "': byte offset 0: the vocabulary must be an object"));
  CHECK(contains(loadError(R"({"a": 1.5})", goodMerges), "byte offset 6: a token id must be an integer in [0,"));
  CHECK(contains(loadError(R"({"a": "1"})", goodMerges), "byte offset 6: a token id must be an integer, found a string"));
  CHECK(contains(loadError(R"({"a b": 1})", goodMerges), "byte offset 8: token \"a b\" has a character (code point 32)"));
  CHECK(contains(loadError(R"({"a": 1, "b": 1})", goodMerges), "byte offset 14: token id 1 is given to two tokens"));
  CHECK(contains(loadError(R"({"a": 1)", goodMerges), "byte offset 7: expected '}', found the end of the text"));
  CHECK(contains(loadError(R"({"a": 97})", goodMerges), "no token for the single byte 0"));
  // An id far beyond the token count is refused before the tables indexed by id are made (a fuzzer find:
  // 2147483646 asked for 64 GiB).
  const std::string huge = vocab.substr(0, vocab.rfind('}')) + ", \"zz\": 2147483646}";
  CHECK(contains(loadError(huge, goodMerges), "byte offset " + std::to_string(huge.size() - 11) +
                                                  ": token id 2147483646 leaves most ids below it without a token (274 tokens)"));
  CHECK_NOTHROW(BpeTokenizer::fromFiles(writeText("vocab.json", vocab.substr(0, vocab.rfind('}')) + ", \"zz\": 700}"), merges));
  // merges.txt: offsets of the offending line.
  CHECK(contains(loadError(vocab, "#version: 0.2\nh e\nhe\n"), "file '" + mpath + "': byte offset 18: expected a merge"));
  CHECK(contains(loadError(vocab, "h e\n\nl l\n"), "byte offset 4: expected a merge"));
  CHECK(contains(loadError(vocab, "h e\nx y\n"), "byte offset 4: merge 2: the merged token is not in the vocabulary"));
  CHECK(contains(loadError(vocab, "h  e\n"), "byte offset 0: expected a merge \"left right\""));
  CHECK(contains(loadError(vocab, "h\xFF" "e q\n"), "byte offset 0: token \"h\xFF" "e\" has a character"));
  // A special token that is not in the vocabulary, and a file that is not there.
  CHECK(contains(thrownMessage<ddl::IoError>([&] {
                   BpeTokenizer::fromFiles(kFixtures + "vocab.json", merges, {"<|pad|>"});
                 }),
                 "special token \"<|pad|>\" is not in the vocabulary"));
  CHECK(contains(thrownMessage<ddl::IoError>([&] { BpeTokenizer::fromFiles(tmpPath("missing.json"), merges); }),
                 "not found"));
}

TEST_CASE("files: a Hugging Face tokenizer.json gives the tokenizer of the vocab.json + merges.txt pair") {
  std::string vocab = fixtureText("vocab.json");
  std::string mergeStrings, mergePairs;
  {
    std::istringstream in(fixtureText("merges.txt"));
    std::string line;
    std::getline(in, line);  // #version
    while (std::getline(in, line)) {
      const std::size_t sp = line.find(' ');
      const std::string sep = mergeStrings.empty() ? "" : ", ";
      mergeStrings += sep + "\"" + line + "\"";
      mergePairs += sep + "[\"" + line.substr(0, sp) + "\", \"" + line.substr(sp + 1) + "\"]";
    }
  }
  const auto file = [&](const std::string& merges, const std::string& pre) {
    return R"({"version": "1.0", "added_tokens": [{"id": 272, "content": "<|endoftext|>", "special": true},
                                                  {"id": 280, "content": "<|pad|>", "special": true}],
               "normalizer": null, "pre_tokenizer": )" + pre + R"(,
               "model": {"type": "BPE", "dropout": null, "vocab": )" + vocab + R"(, "merges": [)" + merges + "]}}";
  };
  const std::string byteLevel = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";
  const std::string text = "hello world, it's the caf\xC3\xA9 \xFF<|endoftext|>   12";
  const std::vector<int> expected = fixture().encode(text, SpecialTokens::Recognised);
  for (const std::string& merges : {mergeStrings, mergePairs}) {
    const BpeTokenizer tok = BpeTokenizer::fromTokenizerJson(writeText("tokenizer.json", file(merges, byteLevel)));
    CHECK(tok.encode(text, SpecialTokens::Recognised) == expected);
    CHECK(tok.specialId("<|endoftext|>") == 272);
    CHECK(tok.specialId("<|pad|>") == 280);  // an added token outside model.vocab keeps its own id
    CHECK(tok.vocabSize() == 281);
    CHECK(tok.decode({280, 267}) == "<|pad|> world");
  }
  const std::string path = tmpPath("tokenizer.json");
  const std::string bad = file(mergeStrings, R"({"type": "Metaspace"})");
  writeText("tokenizer.json", bad);
  const std::string m = thrownMessage<ddl::IoError>([&] { BpeTokenizer::fromTokenizerJson(path); });
  CHECK(contains(m, "file '" + path + "': byte offset " + std::to_string(bad.find("\"Metaspace\"")) +
                        ": a pre_tokenizer other than ByteLevel is not supported"));
  writeText("tokenizer.json", file(mergeStrings, R"({"type": "ByteLevel", "add_prefix_space": true})"));
  CHECK(contains(thrownMessage<ddl::IoError>([&] { BpeTokenizer::fromTokenizerJson(path); }),
                 "add_prefix_space other than false is not supported"));
}

// An added token of tokenizer.json is model.vocab's token under the same id or a token of its own under a
// free id; one that disagrees with the vocabulary is refused, naming the token, both ids and the offset.
TEST_CASE("files: a tokenizer.json whose added token disagrees with model.vocab on an id is refused") {
  const std::string vocab = fixtureText("vocab.json");
  const auto file = [&](const std::string& added) {
    return R"({"added_tokens": [)" + added + R"(], "normalizer": null,
               "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
               "model": {"type": "BPE", "vocab": )" + vocab + R"(, "merges": []}})";
  };
  const std::string path = tmpPath("tokenizer.json");
  const std::string moved = file(R"({"id": 5, "content": "<|endoftext|>"})");  // the vocabulary has it as 272
  writeText("tokenizer.json", moved);
  CHECK(contains(thrownMessage<ddl::IoError>([&] { BpeTokenizer::fromTokenizerJson(path); }),
                 "file '" + path + "': byte offset " + std::to_string(moved.find("{\"id\": 5")) +
                     ": added token \"<|endoftext|>\" has id 5, model.vocab gives it id 272"));
  writeText("tokenizer.json", file(R"({"id": 272, "content": "<|pad|>"})"));  // 272 is <|endoftext|>'s
  CHECK(contains(thrownMessage<ddl::IoError>([&] { BpeTokenizer::fromTokenizerJson(path); }),
                 "added token \"<|pad|>\" has id 272, the id of model.vocab's token \"<|endoftext|>\""));
  writeText("tokenizer.json", file(R"({"id": 272, "content": "<|endoftext|>"}, {"id": 280, "content": "<|pad|>"})"));
  const BpeTokenizer ok = BpeTokenizer::fromTokenizerJson(path);
  CHECK(ok.specialId("<|endoftext|>") == 272);
  CHECK(ok.specialId("<|pad|>") == 280);
}

// Last in the file: it ends the program with 77 (ctest: skipped) when GPT-2's files are absent.
TEST_CASE("GPT-2: encoder.json + vocab.bpe give the ids of the real tokenizer (skipped without the files)") {
  const char* env = std::getenv("DDL_GPT2_DIR");
  const std::string dir = env != nullptr ? env : DDL_GPT2_DIR;
  const std::string vocab = dir + "/encoder.json", merges = dir + "/vocab.bpe";
  if (dir.empty() || !std::filesystem::exists(vocab) || !std::filesystem::exists(merges)) {
    std::cerr << "skipped: set DDL_GPT2_DIR (or the CMake option DDL_GPT2_DIR) to a folder with GPT-2's encoder.json "
                 "and vocab.bpe (docs/tokenizer.md)\n";
    std::exit(77);
  }
  const BpeTokenizer tok = BpeTokenizer::fromFiles(vocab, merges);
  CHECK(tok.vocabSize() == 50257);
  CHECK(tok.mergeCount() == 50000);
  // Each id below was looked up by hand in encoder.json ("Hello" 15496, "\u0120world" 995, ...).
  CHECK(tok.encode("Hello world") == std::vector<int>{15496, 995});
  CHECK(tok.encode("I don't know") == std::vector<int>{40, 836, 470, 760});      // I Ġdon 't Ġknow
  CHECK(tok.encode("   x") == std::vector<int>{220, 220, 2124});                   // Ġ Ġ Ġx: GPT-2 has no ĠĠ
  CHECK(tok.encode("1234567") == std::vector<int>{10163, 2231, 3134});           // 123 45 67
  CHECK(tok.encode("h\xC3\xA9llo \xF0\x9F\xA4\x97") == std::vector<int>{71, 2634, 18798, 12520, 97, 245});  // h é llo ĠðŁ ¤ Ĺ
  CHECK(tok.encode("<|endoftext|>") == std::vector<int>{27, 91, 437, 1659, 5239, 91, 29});
  CHECK(tok.encode("<|endoftext|>", SpecialTokens::Recognised) == std::vector<int>{50256});
  CHECK(tok.decode({15496, 995, 50256}) == "Hello world<|endoftext|>");
}

}  // namespace test_bpe_tokenizer
