// libFuzzer target: the byte-level text corpus (data/text_corpus.hpp). Input: one byte choosing the
// split (low nibble / 16 = valFraction, high nibble / 16 = testFraction, so sums >= 1 occur), one
// byte choosing the window length T = 1 + byte % 64, then the file's bytes. Besides "only ddl::Error
// escapes", it checks what the reader promises: the three splits are the file in order, their sizes
// are the rounded fractions, requireWindow agrees with the split sizes, and drawn windows are
// slices of the split with targets one byte later.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/data/text_corpus.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const ddl::TextSplit split{(data[0] & 0x0f) / 16.0, (data[0] >> 4) / 16.0};
  const ddl::Index T = 1 + data[1] % 64;
  data += 2;
  size -= 2;
  static const std::string path = ddl_fuzz::tempPath("text");
  ddl_fuzz::writeFile(path, data, size);
  ddl::TextCorpus c;
  try {
    c = ddl::readTextCorpus(path, split);
  } catch (const ddl::Error&) {
    return 0;
  }
  const std::size_t nVal = static_cast<std::size_t>(std::llround(size * split.valFraction));
  const std::size_t nTest = static_cast<std::size_t>(std::llround(size * split.testFraction));
  if (c.bytes() != size || c.train.empty() || c.validation.size() != nVal || c.test.size() != nTest) std::abort();
  std::vector<std::uint8_t> joined(c.train);
  joined.insert(joined.end(), c.validation.begin(), c.validation.end());
  joined.insert(joined.end(), c.test.begin(), c.test.end());
  for (std::size_t i = 0; i < size; ++i)
    if (joined[i] != data[i]) std::abort();

  const auto tooShort = [T](const std::vector<std::uint8_t>& s) {
    return !s.empty() && s.size() <= static_cast<std::size_t>(T);
  };
  bool refused = false;
  try {
    c.requireWindow(T);
  } catch (const ddl::IoError&) {
    refused = true;
  }
  if (refused != (tooShort(c.train) || tooShort(c.validation) || tooShort(c.test))) std::abort();

  std::vector<int> input, target;
  try {
    ddl::drawWindows(c.train, 3, T, size, input, target);
  } catch (const ddl::ValueError&) {
    if (c.train.size() > static_cast<std::size_t>(T)) std::abort();  // a window fits: no error allowed
    return 0;
  }
  if (input.size() != static_cast<std::size_t>(3 * T) || target.size() != input.size()) std::abort();
  ddl::Rng starts(size);  // the documented draw: one start per window from Rng(seed)
  for (std::size_t b = 0; b < 3; ++b) {
    const std::size_t w = b * static_cast<std::size_t>(T);
    const std::size_t s = static_cast<std::size_t>(starts.below(c.train.size() - static_cast<std::size_t>(T)));
    for (std::size_t t = 0; t < static_cast<std::size_t>(T); ++t)
      if (input[w + t] != c.train[s + t] || target[w + t] != c.train[s + t + 1]) std::abort();
  }
  return 0;
}
