// libFuzzer target: token files (data/token_files.hpp). Input: one byte choosing the vocabulary
// (256 << (byte % 9), so 256 .. 65536: tokens above it occur and must be refused), one byte choosing
// where the file is cut in two shards (both read as one set when the cut leaves two valid files),
// then the file's bytes, an llm.c shard when they start with its magic, else nanoGPT's flat uint16.
// Besides "only ddl::Error escapes", it checks what the reader promises: the set's tokens are the
// file's little-endian uint16 after its header, read() and scan() agree on them and refuse the same
// (first) token >= vocab, and windows are slices of the set with targets one token later.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/data/token_files.hpp"
#include "fuzz_input.hpp"

namespace {

// The tokens the reader must find in bytes (header skipped), or false when it must refuse the file.
bool expectedTokens(const std::uint8_t* data, std::size_t size, std::vector<int>& tokens) {
  std::size_t offset = 0;
  const auto le32 = [&](std::size_t at) {
    return static_cast<std::int32_t>(std::uint32_t(data[at]) | (std::uint32_t(data[at + 1]) << 8) |
                                     (std::uint32_t(data[at + 2]) << 16) | (std::uint32_t(data[at + 3]) << 24));
  };
  if (size == 0) return false;
  if (size >= 4 && (le32(0) == 20240801 || le32(0) == 20240522)) return false;  // other llm.c files: refused
  if (size >= 4 && le32(0) == 20240520) {
    if (size < 1024 || le32(4) != 1 || le32(8) <= 0 || (size - 1024) % 2 != 0 ||
        static_cast<std::size_t>(le32(8)) != (size - 1024) / 2)
      return false;
    offset = 1024;
  } else if (size % 2 != 0) {
    return false;
  }
  tokens.clear();
  for (std::size_t i = offset; i + 1 < size; i += 2) tokens.push_back(data[i] | (data[i + 1] << 8));
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const ddl::Index vocab = ddl::Index(256) << (data[0] % 9);
  const std::size_t cut = data[1];
  data += 2;
  size -= 2;
  static const std::string one = ddl_fuzz::tempPath("tokens_a"), two = ddl_fuzz::tempPath("tokens_b");
  std::vector<int> want;
  std::vector<std::string> paths;
  if (cut > 0 && cut < size) {  // two shards: the first cut bytes, then the rest
    std::vector<int> a, b;
    ddl_fuzz::writeFile(one, data, cut);
    ddl_fuzz::writeFile(two, data + cut, size - cut);
    const bool okA = expectedTokens(data, cut, a), okB = expectedTokens(data + cut, size - cut, b);
    paths = {one, two};
    try {
      ddl::TokenFiles probe(paths, vocab);
    } catch (const ddl::IoError&) {
      if (okA && okB) std::abort();  // two valid files refused
      return 0;
    }
    if (!okA || !okB) std::abort();  // an invalid file accepted
    want = a;
    want.insert(want.end(), b.begin(), b.end());
  } else {
    ddl_fuzz::writeFile(one, data, size);
    const bool ok = expectedTokens(data, size, want);
    paths = {one};
    try {
      ddl::TokenFiles probe(paths, vocab);
    } catch (const ddl::IoError&) {
      if (ok) std::abort();
      return 0;
    }
    if (!ok) std::abort();
  }
  const ddl::TokenFiles set(paths, vocab);
  if (set.size() != want.size()) std::abort();
  std::size_t firstBad = want.size();
  for (std::size_t i = 0; i < want.size() && firstBad == want.size(); ++i)
    if (want[i] >= vocab) firstBad = i;

  std::vector<int> got(want.size());
  bool readRefused = false, scanRefused = false;
  try {
    set.read(0, got.size(), got.data());
  } catch (const ddl::IoError&) {
    readRefused = true;
  }
  std::size_t scanned = 0;
  try {
    set.scan([&](const unsigned char*, std::size_t n) { scanned += n; });
  } catch (const ddl::IoError&) {
    scanRefused = true;
  }
  const bool bad = firstBad < want.size();
  if (readRefused != bad || scanRefused != bad) std::abort();
  if (bad) return 0;
  if (got != want || scanned != 2 * want.size()) std::abort();

  const ddl::Index T = 1 + static_cast<ddl::Index>(want.size() % 7);
  std::vector<int> input, target;
  try {
    ddl::drawWindows(set, 3, T, want.size(), input, target);
  } catch (const ddl::ValueError&) {
    if (want.size() > static_cast<std::size_t>(T)) std::abort();  // a window fits: no error allowed
    return 0;
  }
  ddl::Rng starts(want.size());  // the documented draw: one start per window from Rng(seed)
  for (std::size_t b = 0; b < 3; ++b) {
    const std::size_t s = static_cast<std::size_t>(starts.below(want.size() - static_cast<std::size_t>(T)));
    for (std::size_t t = 0; t < static_cast<std::size_t>(T); ++t)
      if (input[b * static_cast<std::size_t>(T) + t] != want[s + t] || target[b * static_cast<std::size_t>(T) + t] != want[s + t + 1])
        std::abort();
  }
  return 0;
}
