#pragma once
// ddl/data/text_corpus.hpp: a byte-level text corpus for a character-level language model and the
// seeded random windows it is trained on (docs/decisions.md, "Text as bytes").
//
// Any file is read as it is on disk, byte for byte: the token id of a byte is its value, so the
// vocabulary is always 256 and UTF-8 text, any other encoding and binary data need no tokenizer.
// Unlike the dataset readers (file_bytes.hpp), a file that starts with the gzip magic 1f 8b is NOT
// decompressed: it is data like any other.
//
// The split is contiguous by position, in this order:
//   train = bytes [0, nTrain), validation = the next nVal bytes, test = the last nTest bytes,
// with nVal = round(n * valFraction), nTest = round(n * testFraction), nTrain = n - nVal - nTest.
// Contiguous parts keep every held-out window made of text the model never saw inside a training
// window (a random split by position would put the same sentences on both sides).
//
// Errors: the file (missing, a directory or other non-regular file, unreadable, empty, too small to
// leave training bytes) and a split shorter than a window throw IoError naming the function, the
// file and the values; split fractions outside their domain and bad window arguments throw ValueError.
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/file_bytes.hpp"
#include "ddl/data/window_sampling.hpp"

namespace ddl {

// Token ids of a byte corpus are the byte values 0..255.
inline constexpr Index kByteVocabulary = 256;

// Fractions of the file held out, each in [0, 1), their sum < 1; the rest is training data.
struct TextSplit {
  double valFraction = 0.05;
  double testFraction = 0.05;
};

// A file's bytes cut into three contiguous parts (see the header comment). train is never empty;
// validation and test are empty when their fraction rounds to zero bytes.
struct TextCorpus {
  std::string path;
  std::vector<std::uint8_t> train, validation, test;

  // Total bytes of the file = train.size() + validation.size() + test.size().
  std::uint64_t bytes() const { return train.size() + validation.size() + test.size(); }
  // File offsets where validation and test start (train starts at 0).
  std::uint64_t validationOffset() const { return train.size(); }
  std::uint64_t testOffset() const { return train.size() + validation.size(); }

  // Throws unless every non-empty split holds a window of T + 1 bytes (T inputs and their T next
  // bytes): ValueError for T < 1, IoError "fn: file 'p': byte offset o: the <split> split holds L
  // bytes, a window of T = t needs at least t + 1" with o the split's first byte in the file.
  void requireWindow(Index T) const {
    const char* fn = "ddl::TextCorpus::requireWindow";
    require(T >= 1, fn, "window length T must be >= 1, got ", T);
    checkSplit(fn, "train", train, 0, T);
    checkSplit(fn, "validation", validation, validationOffset(), T);
    checkSplit(fn, "test", test, testOffset(), T);
  }

 private:
  void checkSplit(const char* fn, const char* name, const std::vector<std::uint8_t>& split, std::uint64_t offset,
                  Index T) const {
    if (split.empty() || split.size() > static_cast<std::uint64_t>(T)) return;
    throw IoError(fileMessage(fn, path, offset, "the ", name, " split holds ", split.size(),
                              " bytes, a window of T = ", T, " needs at least ", static_cast<std::uint64_t>(T) + 1));
  }
};

namespace detail {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// The file's bytes exactly as stored. The size on disk is only a first guess: a file that grows
// while it is read (or reports size 0, as /proc files do) is read to its end.
inline std::vector<std::uint8_t> readRawFileBytes(const std::string& path, const char* fn) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found) throw IoError(message(fn, "file '", path, "': not found"));
  if (ec) throw IoError(message(fn, "file '", path, "': cannot inspect: ", ec.message()));
  if (status.type() == fs::file_type::directory)
    throw IoError(message(fn, "file '", path, "': is a directory, expected a regular file"));
  if (status.type() != fs::file_type::regular)
    throw IoError(message(fn, "file '", path, "': not a regular file (a device, pipe or socket)"));
  const std::uintmax_t sizeOnDisk = fs::file_size(path, ec);

  const std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    const int err = errno;
    throw IoError(message(fn, "file '", path, "': cannot open for reading: ", std::strerror(err)));
  }
  std::vector<std::uint8_t> bytes(ec ? std::size_t(0) : static_cast<std::size_t>(sizeOnDisk));
  std::size_t got = bytes.empty() ? 0 : std::fread(bytes.data(), 1, bytes.size(), file.get());
  if (got < bytes.size()) {  // shorter than its size on disk: it shrank, or the read failed
    if (std::ferror(file.get())) throw IoError(fileMessage(fn, path, got, "read error: ", std::strerror(errno)));
    bytes.resize(got);
    return bytes;
  }
  std::uint8_t more[1 << 14];  // the rest, if any, through a small buffer: a full vector is not grown by a probe
  do {
    got = std::fread(more, 1, sizeof more, file.get());
    if (got < sizeof more && std::ferror(file.get()))
      throw IoError(fileMessage(fn, path, bytes.size() + got, "read error: ", std::strerror(errno)));
    bytes.insert(bytes.end(), more, more + got);
  } while (got == sizeof more);
  return bytes;
}

}  // namespace detail

namespace detail {
inline void checkTextSplit(const char* fn, const std::string& path, const TextSplit& split) {
  const double v = split.valFraction, t = split.testFraction;
  require(std::isfinite(v) && v >= 0 && v < 1, fn, "file '", path, "': valFraction must be in [0, 1), got ", v);
  require(std::isfinite(t) && t >= 0 && t < 1, fn, "file '", path, "': testFraction must be in [0, 1), got ", t);
  require(v + t < 1, fn, "file '", path, "': valFraction + testFraction must be < 1 (training needs bytes), got ", v,
          " + ", t, " = ", v + t);
}

// Cuts bytes (read from path) into the three contiguous parts.
inline TextCorpus splitTextBytes(const char* fn, const std::string& path, std::vector<std::uint8_t> bytes,
                                 const TextSplit& split) {
  const std::uint64_t n = bytes.size();
  if (n == 0) throw IoError(fileMessage(fn, path, 0, "expected at least one byte, found an empty file"));
  const auto part = [n](double fraction) {
    return static_cast<std::uint64_t>(std::llround(static_cast<double>(n) * fraction));
  };
  const std::uint64_t nVal = part(split.valFraction), nTest = part(split.testFraction);
  if (nVal + nTest >= n)  // rounding both parts up can take the last training byte of a tiny file
    throw IoError(fileMessage(fn, path, 0, "the file's ", n, " bytes leave none for training: validation ", nVal,
                              " (valFraction ", split.valFraction, ") + test ", nTest, " (testFraction ",
                              split.testFraction, ")"));
  const std::uint64_t nTrain = n - nVal - nTest;

  TextCorpus c;
  c.path = path;
  c.validation.assign(bytes.begin() + static_cast<std::ptrdiff_t>(nTrain),
                      bytes.begin() + static_cast<std::ptrdiff_t>(nTrain + nVal));
  c.test.assign(bytes.begin() + static_cast<std::ptrdiff_t>(nTrain + nVal), bytes.end());
  bytes.resize(static_cast<std::size_t>(nTrain));  // train keeps the file's buffer (capacity n): no third copy
  c.train = std::move(bytes);
  return c;
}
}  // namespace detail

// Reads the file at path as bytes and splits it contiguously (see the header comment).
// Throws ValueError for fractions outside [0, 1) or summing to >= 1 (before the file is touched) and
// IoError for a missing, non-regular, unreadable or empty file, or one too small to leave training bytes.
inline TextCorpus readTextCorpus(const std::string& path, const TextSplit& split = TextSplit()) {
  const char* fn = "ddl::readTextCorpus";
  detail::checkTextSplit(fn, path, split);
  return detail::splitTextBytes(fn, path, detail::readRawFileBytes(path, fn), split);
}

// The files at paths read one after another, in the given order, as one text, then split as
// readTextCorpus splits one file (so the held-out parts are the end of the last files). The corpus's
// path names the first file and the count. Throws as readTextCorpus, naming the file at fault, and
// ValueError for an empty list.
inline TextCorpus readTextCorpusFiles(const std::vector<std::string>& paths, const TextSplit& split = TextSplit()) {
  const char* fn = "ddl::readTextCorpusFiles";
  require(!paths.empty(), fn, "no files given");
  const std::string name = paths.size() == 1 ? paths[0] : paths[0] + " and " + std::to_string(paths.size() - 1) + " more files";
  detail::checkTextSplit(fn, name, split);
  std::vector<std::uint8_t> all;
  for (const std::string& p : paths) {
    const std::vector<std::uint8_t> bytes = detail::readRawFileBytes(p, fn);
    all.insert(all.end(), bytes.begin(), bytes.end());
  }
  return detail::splitTextBytes(fn, name, std::move(all), split);
}

// Draws B windows of T + 1 consecutive bytes of split, the same ones for the same seed: the window
// starts are Rng(seed).below(split.size() - T), one per sample in order.
//   input: B*T ids, window-major: sample b occupies [b*T, (b+1)*T)
//   target: B*T ids, target[i] the byte after input[i] in the split
// Both are resized to B*T, so once they have that size nothing is allocated. Throws ValueError for
// B < 1, T < 1, a split shorter than T + 1 bytes, or input and target being the same vector.
inline void drawWindows(const std::vector<std::uint8_t>& split, Index B, Index T, std::uint64_t seed,
                        std::vector<int>& input, std::vector<int>& target) {
  const auto len = static_cast<std::size_t>(T);
  detail::drawWindowsOf("ddl::drawWindows", split.size(), "bytes", "split", B, T, seed, input, target,
                        [&](std::uint64_t start, int* in, int* next) {
                          const std::uint8_t* src = split.data() + start;
                          for (std::size_t i = 0; i < len; ++i) {
                            in[i] = src[i];
                            next[i] = src[i + 1];
                          }
                        });
}

}  // namespace ddl
