// libFuzzer target: the tokenizer's files (data/bpe_vocab.hpp, data/bpe_tokenizer.hpp) in their three
// forms. Input: one byte choosing the form (byte % 3: 0 a Hugging Face tokenizer.json, 1 vocab.json +
// merges.txt through fromFiles, 2 OpenAI's encoder.json + vocab.bpe in a folder through fromDirectory),
// for the pairs a u16 little-endian n (the first file's length), then the file bytes. Besides "only
// ddl::Error escapes", a tokenizer that loads must keep what it promises: every id encode() gives is
// defined and below vocabSize(), decode(encode(s)) == s for any bytes s (the input's own bytes here,
// special tokens recognised or not), and a cache changes no id.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/data/bpe_tokenizer.hpp"
#include "fuzz_input.hpp"

namespace {

// Checks the promises of a loaded tokenizer on the bytes `text`.
void checkRoundTrip(const ddl::BpeTokenizer& tok, std::string_view text) {
  for (const ddl::SpecialTokens specials : {ddl::SpecialTokens::AsText, ddl::SpecialTokens::Recognised}) {
    const std::vector<int> ids = tok.encode(text, specials);
    for (int id : ids)
      if (!tok.defines(id) || id >= tok.vocabSize()) std::abort();
    if (tok.decode(ids) != text) std::abort();
    ddl::BpeCache cache(4);  // small, so that it also starts over
    if (tok.encode(text, specials, &cache) != ids || tok.encode(text, specials, &cache) != ids) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const int form = data[0] % 3;
  ++data;
  --size;
  std::size_t n = size;  // tokenizer.json: all of it
  if (form != 0) {
    if (size < 2) return 0;
    n = data[0] | (std::size_t(data[1]) << 8);
    data += 2;
    size -= 2;
    if (n > size) n = size;
  }
  static const std::string folder = ddl_fuzz::tempPath("tokenizer");
  static const bool made = std::filesystem::create_directories(folder) || std::filesystem::is_directory(folder);
  if (!made) std::abort();
  const std::string first = folder + (form == 0 ? "/tokenizer.json" : form == 1 ? "/vocab.json" : "/encoder.json");
  const std::string second = folder + (form == 1 ? "/merges.txt" : "/vocab.bpe");
  ddl_fuzz::writeFile(first, data, n);
  if (form != 0) ddl_fuzz::writeFile(second, data + n, size - n);
  std::optional<ddl::BpeTokenizer> tok;
  try {
    if (form == 0)
      tok.emplace(ddl::BpeTokenizer::fromTokenizerJson(first));
    else if (form == 1)
      tok.emplace(ddl::BpeTokenizer::fromFiles(first, second));
    else
      tok.emplace(ddl::BpeTokenizer::fromDirectory(folder));
  } catch (const ddl::Error&) {
  }
  std::filesystem::remove(first);  // the folder holds one form at a time (fromDirectory prefers tokenizer.json)
  if (form != 0) std::filesystem::remove(second);
  if (!tok) return 0;
  if (tok->vocabSize() < 256 || tok->tokenId(std::string(1, 'a')) < 0) std::abort();  // byte-level: all 256 bytes
  checkRoundTrip(*tok, std::string_view(reinterpret_cast<const char*>(data), size));
  checkRoundTrip(*tok, "Hello world, the caf\xc3\xa9 <|endoftext|> 1234  \n\n\t x");
  return 0;
}
