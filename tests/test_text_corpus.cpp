// Tests for include/ddl/data/text_corpus.hpp: a file read as bytes and split contiguously into
// train / validation / test, its error messages, and the seeded random windows drawn from a split.
#include "counting_new.hpp"  // operator new counts: drawWindows allocates nothing once sized

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/data/text_corpus.hpp"

namespace test_text_corpus {  // each test file in its own namespace: a group of files compiles as one unit

namespace {

using Bytes = std::vector<std::uint8_t>;
using ddl::Index;
using ddl_test::contains;
using ddl_test::thrownMessage;

// A fresh directory per test case under DDL_TEST_TMPDIR.
std::string freshDir(const std::string& name) { return ddl_test::freshTestDir("text_" + name); }

void writeFile(const std::string& path, const Bytes& b) { ddl_test::writeBytes(path, b); }

Bytes textBytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

// n bytes whose values depend on the position, so a misplaced slice shows.
Bytes pattern(std::size_t n) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>((i * 131 + 7) % 256);
  return b;
}

Bytes slice(const Bytes& b, std::size_t begin, std::size_t end) {
  return Bytes(b.begin() + static_cast<std::ptrdiff_t>(begin), b.begin() + static_cast<std::ptrdiff_t>(end));
}

}  // namespace

// ---------------------------------------------------------------- reading and splitting

TEST_CASE("readTextCorpus splits contiguously: train first, then validation, then test", "[text]") {
  const std::string dir = freshDir("split");
  const std::string path = dir + "/corpus.bin";
  const Bytes all = pattern(1000);
  writeFile(path, all);

  const ddl::TextCorpus c = ddl::readTextCorpus(path);  // defaults 0.05 / 0.05
  CHECK(c.path == path);
  CHECK(c.train.size() == 900);
  CHECK(c.validation.size() == 50);
  CHECK(c.test.size() == 50);
  CHECK(c.bytes() == 1000);
  CHECK(c.validationOffset() == 900);
  CHECK(c.testOffset() == 950);
  CHECK(c.train == slice(all, 0, 900));
  CHECK(c.validation == slice(all, 900, 950));
  CHECK(c.test == slice(all, 950, 1000));

  const ddl::TextCorpus d = ddl::readTextCorpus(path, ddl::TextSplit{0.1, 0.2});
  CHECK(d.train == slice(all, 0, 700));
  CHECK(d.validation == slice(all, 700, 800));
  CHECK(d.test == slice(all, 800, 1000));

  const ddl::TextCorpus none = ddl::readTextCorpus(path, ddl::TextSplit{0.0, 0.0});
  CHECK(none.train == all);
  CHECK(none.validation.empty());
  CHECK(none.test.empty());

  const ddl::TextCorpus onlyTest = ddl::readTextCorpus(path, ddl::TextSplit{0.0, 0.25});
  CHECK(onlyTest.train == slice(all, 0, 750));
  CHECK(onlyTest.validation.empty());
  CHECK(onlyTest.test == slice(all, 750, 1000));
}

TEST_CASE("readTextCorpus rounds each part to the nearest byte", "[text]") {
  const std::string dir = freshDir("rounding");
  const std::string path100 = dir + "/c100", path7 = dir + "/c7", path10 = dir + "/c10";
  writeFile(path100, pattern(100));
  writeFile(path7, pattern(7));
  writeFile(path10, pattern(10));
  // 100 * 0.29 is 28.999999999999996 in double: rounding, not truncation, gives the 29 asked for.
  const ddl::TextCorpus a = ddl::readTextCorpus(path100, ddl::TextSplit{0.29, 0.07});
  CHECK(a.validation.size() == 29);
  CHECK(a.test.size() == 7);
  CHECK(a.train.size() == 64);
  // A tiny file: 7 * 0.05 = 0.35 rounds to no held-out bytes at all.
  const ddl::TextCorpus b = ddl::readTextCorpus(path7);
  CHECK(b.train.size() == 7);
  CHECK(b.validation.empty());
  CHECK(b.test.empty());
  // Halves round away from zero: 10 * 0.25 = 2.5 -> 3.
  const ddl::TextCorpus h = ddl::readTextCorpus(path10, ddl::TextSplit{0.25, 0.15});
  CHECK(h.validation.size() == 3);
  CHECK(h.test.size() == 2);
  CHECK(h.train.size() == 5);
}

TEST_CASE("readTextCorpus keeps a small UTF-8 file byte for byte", "[text]") {
  const std::string path = freshDir("utf8") + "/hello.txt";
  // "Grüße, 世界!" is 2 + 2 + 2 + 1 + 2 + 3 + 3 + 1 = 16 bytes of UTF-8; then "ab" and "cd": 20 bytes.
  const std::string text = "Gr\xC3\xBC\xC3\x9F" "e, \xE4\xB8\x96\xE7\x95\x8C!";
  REQUIRE(text.size() == 16);
  writeFile(path, textBytes(text + "abcd"));
  const ddl::TextCorpus c = ddl::readTextCorpus(path, ddl::TextSplit{0.1, 0.1});
  CHECK(c.train == textBytes(text));
  CHECK(c.validation == textBytes("ab"));
  CHECK(c.test == textBytes("cd"));
  CHECK(int(c.train[2]) == 0xC3);  // high bytes stay unsigned values >= 128
  CHECK(int(c.train[3]) == 0xBC);
}

TEST_CASE("readTextCorpus keeps binary bytes 0 and 255 and does not decompress gzip magic", "[text]") {
  const std::string dir = freshDir("binary");
  Bytes all;
  for (int r = 0; r < 2; ++r)
    for (int v = 0; v < 256; ++v) all.push_back(static_cast<std::uint8_t>(v));
  all.push_back(0);
  all.push_back(255);
  writeFile(dir + "/all_bytes", all);
  const ddl::TextCorpus c = ddl::readTextCorpus(dir + "/all_bytes", ddl::TextSplit{0.0, 0.0});
  CHECK(c.train == all);
  CHECK(c.train.front() == 0);
  CHECK(c.train.back() == 255);
  CHECK(std::count(c.train.begin(), c.train.end(), std::uint8_t{0}) == 3);

  // A file that starts like gzip (1f 8b 08) is data: read as stored, not inflated.
  const Bytes gzipLike = {0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0xff, 0x00, 0x03};
  writeFile(dir + "/looks_gzip.gz", gzipLike);
  const ddl::TextCorpus g = ddl::readTextCorpus(dir + "/looks_gzip.gz", ddl::TextSplit{0.0, 0.0});
  CHECK(g.train == gzipLike);
}

TEST_CASE("readTextCorpus reads a file to its end even when its size on disk says 0", "[text]") {
  const std::string path = "/proc/version";  // Linux: reported size 0, content non-empty
  if (!std::filesystem::is_regular_file(path)) return;
  std::ifstream in(path, std::ios::binary);
  const Bytes expected((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(!expected.empty());
  const ddl::TextCorpus c = ddl::readTextCorpus(path, ddl::TextSplit{0.0, 0.0});
  CHECK(c.train == expected);
}

// ---------------------------------------------------------------- errors

TEST_CASE("readTextCorpus: a missing file, a directory, a pipe and an empty file are IoErrors naming the file",
          "[text][errors]") {
  const std::string dir = freshDir("errors");
  const std::string fn = "ddl::readTextCorpus";

  const std::string missing = dir + "/no_such_file.txt";
  const std::string m1 = thrownMessage<ddl::IoError>([&] { ddl::readTextCorpus(missing); });
  CHECK(contains(m1, fn));
  CHECK(contains(m1, "'" + missing + "'"));
  CHECK(contains(m1, "not found"));

  const std::string m2 = thrownMessage<ddl::IoError>([&] { ddl::readTextCorpus(dir); });
  CHECK(contains(m2, fn));
  CHECK(contains(m2, "'" + dir + "'"));
  CHECK(contains(m2, "is a directory"));

  const std::string fifo = dir + "/pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string m3 = thrownMessage<ddl::IoError>([&] { ddl::readTextCorpus(fifo); });
  CHECK(contains(m3, fn));
  CHECK(contains(m3, "'" + fifo + "'"));
  CHECK(contains(m3, "not a regular file"));

  const std::string empty = dir + "/empty.txt";
  writeFile(empty, {});
  const std::string m4 = thrownMessage<ddl::IoError>([&] { ddl::readTextCorpus(empty); });
  CHECK(m4 == fn + ": file '" + empty + "': byte offset 0: expected at least one byte, found an empty file");
}

TEST_CASE("readTextCorpus: an unreadable file is an IoError naming the file", "[text][errors]") {
  const std::string fn = "ddl::readTextCorpus";
  // A file without read permission; root may open it anyway, so that half runs for other users only.
  const std::string path = freshDir("unreadable") + "/secret.txt";
  writeFile(path, textBytes("hidden"));
  REQUIRE(::chmod(path.c_str(), 0) == 0);
  if (::geteuid() != 0) {
    const std::string m = thrownMessage<ddl::IoError>([&] { ddl::readTextCorpus(path); });
    CHECK(contains(m, fn));
    CHECK(contains(m, "'" + path + "'"));
    CHECK(contains(m, "cannot open for reading"));
  }
  ::chmod(path.c_str(), 0600);
  // A regular file whose read fails for everyone: this process's memory at address 0 (Linux).
  const std::string mem = "/proc/self/mem";
  if (!std::filesystem::is_regular_file(mem)) return;
  const std::string m = thrownMessage<ddl::IoError>([&] { ddl::readTextCorpus(mem); });
  CHECK(contains(m, fn));
  CHECK(contains(m, "'" + mem + "'"));
  CHECK((contains(m, "byte offset 0: read error") || contains(m, "cannot open for reading")));
}

TEST_CASE("readTextCorpus: split fractions below 0, from 1 on or summing to >= 1 are ValueErrors naming the values",
          "[text][errors]") {
  const std::string path = freshDir("fractions") + "/c.txt";
  writeFile(path, pattern(100));
  const std::string fn = "ddl::readTextCorpus";
  auto fails = [&](double v, double t) {
    return thrownMessage<ddl::ValueError>([&] { ddl::readTextCorpus(path, ddl::TextSplit{v, t}); });
  };
  const std::string negative = fails(-0.1, 0.05);
  CHECK(contains(negative, fn));
  CHECK(contains(negative, "'" + path + "'"));
  CHECK(contains(negative, "valFraction must be in [0, 1), got -0.1"));
  CHECK(contains(fails(1.0, 0.0), "valFraction must be in [0, 1), got 1"));
  CHECK(contains(fails(0.05, 1.5), "testFraction must be in [0, 1), got 1.5"));
  CHECK(contains(fails(0.05, std::nan("")), "testFraction must be in [0, 1), got nan"));
  CHECK(contains(fails(0.05, -std::numeric_limits<double>::infinity()), "testFraction must be in [0, 1), got -inf"));
  const std::string sum = fails(0.5, 0.5);
  CHECK(contains(sum, fn));
  CHECK(contains(sum, "'" + path + "'"));
  CHECK(contains(sum, "valFraction + testFraction must be < 1"));
  CHECK(contains(sum, "0.5 + 0.5 = 1"));
  CHECK(contains(fails(0.7, 0.6), "0.7 + 0.6 = 1.3"));
  // Checked before the file: a bad fraction on a missing file is still the fraction's error.
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::readTextCorpus("/no/such/file", ddl::TextSplit{2, 0}); }),
                 "valFraction must be in [0, 1), got 2"));
}

TEST_CASE("readTextCorpus: a file too small to leave training bytes is an IoError naming sizes and fractions",
          "[text][errors]") {
  const std::string path = freshDir("tiny") + "/two.txt";
  writeFile(path, textBytes("ab"));
  // 2 * 0.25 = 0.5 rounds up to 1 byte for each held-out part: nothing left to train on.
  const std::string m = thrownMessage<ddl::IoError>([&] { ddl::readTextCorpus(path, ddl::TextSplit{0.25, 0.25}); });
  CHECK(m == "ddl::readTextCorpus: file '" + path +
                 "': byte offset 0: the file's 2 bytes leave none for training: validation 1 (valFraction 0.25) + "
                 "test 1 (testFraction 0.25)");
}

TEST_CASE("TextCorpus::requireWindow names the split, its length and T, empty splits pass", "[text][errors]") {
  const std::string path = freshDir("window") + "/c.txt";
  writeFile(path, pattern(100));
  const ddl::TextCorpus c = ddl::readTextCorpus(path);  // 90 / 5 / 5
  const std::string fn = "ddl::TextCorpus::requireWindow";
  CHECK_NOTHROW(c.requireWindow(1));
  CHECK_NOTHROW(c.requireWindow(4));  // 5 bytes hold one window of 4 + 1
  const std::string val = thrownMessage<ddl::IoError>([&] { c.requireWindow(5); });
  CHECK(val == fn + ": file '" + path + "': byte offset 90: the validation split holds 5 bytes, a window of T = 5 needs at least 6");

  const ddl::TextCorpus noVal = ddl::readTextCorpus(path, ddl::TextSplit{0.0, 0.05});  // 95 / 0 / 5
  const std::string test = thrownMessage<ddl::IoError>([&] { noVal.requireWindow(5); });
  CHECK(test == fn + ": file '" + path + "': byte offset 95: the test split holds 5 bytes, a window of T = 5 needs at least 6");

  const ddl::TextCorpus all = ddl::readTextCorpus(path, ddl::TextSplit{0.0, 0.0});  // 100 / 0 / 0
  CHECK_NOTHROW(all.requireWindow(99));
  const std::string train = thrownMessage<ddl::IoError>([&] { all.requireWindow(100); });
  CHECK(train == fn + ": file '" + path + "': byte offset 0: the train split holds 100 bytes, a window of T = 100 needs at least 101");

  const std::string zero = thrownMessage<ddl::ValueError>([&] { c.requireWindow(0); });
  CHECK(zero == fn + ": window length T must be >= 1, got 0");
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { c.requireWindow(-3); }), "got -3"));
}

// ---------------------------------------------------------------- windows

TEST_CASE("drawWindows: window-major inputs, targets one byte later, starts from Rng(seed)", "[text][windows]") {
  const Bytes split = pattern(300);
  const Index B = 7, T = 11;
  const std::uint64_t seed = 42;
  std::vector<int> input, target;
  ddl::drawWindows(split, B, T, seed, input, target);
  REQUIRE(input.size() == static_cast<std::size_t>(B * T));
  REQUIRE(target.size() == input.size());
  ddl::Rng rng(seed);
  for (Index b = 0; b < B; ++b) {
    const std::size_t start = static_cast<std::size_t>(rng.below(split.size() - static_cast<std::size_t>(T)));
    for (Index t = 0; t < T; ++t) {
      CAPTURE(b, t, start);
      const std::size_t i = static_cast<std::size_t>(b * T + t);
      CHECK(input[i] == split[start + static_cast<std::size_t>(t)]);
      CHECK(target[i] == split[start + static_cast<std::size_t>(t) + 1]);
      if (t + 1 < T) CHECK(target[i] == input[i + 1]);
    }
  }
}

TEST_CASE("drawWindows is deterministic in the seed and reaches both ends of the split", "[text][windows]") {
  const Bytes split = pattern(64);
  std::vector<int> a, aNext, b, bNext, c, cNext;
  ddl::drawWindows(split, 16, 8, 7, a, aNext);
  ddl::drawWindows(split, 16, 8, 7, b, bNext);
  ddl::drawWindows(split, 16, 8, 8, c, cNext);
  CHECK(a == b);
  CHECK(aNext == bNext);
  CHECK(a != c);

  // A split of T + 3 bytes has exactly the starts 0, 1, 2; 300 windows see all of them and no other.
  const Index T = 5;
  const Bytes small = pattern(static_cast<std::size_t>(T) + 3);
  std::vector<int> in, next;
  ddl::drawWindows(small, 300, T, 1, in, next);
  std::set<int> firsts;
  for (Index w = 0; w < 300; ++w) firsts.insert(in[static_cast<std::size_t>(w * T)]);
  CHECK(firsts == std::set<int>{small[0], small[1], small[2]});
  // T + 1 bytes: one window, the whole split.
  const Bytes exact = pattern(static_cast<std::size_t>(T) + 1);
  ddl::drawWindows(exact, 3, T, 99, in, next);
  for (Index w = 0; w < 3; ++w)
    for (Index t = 0; t < T; ++t) {
      CHECK(in[static_cast<std::size_t>(w * T + t)] == exact[static_cast<std::size_t>(t)]);
      CHECK(next[static_cast<std::size_t>(w * T + t)] == exact[static_cast<std::size_t>(t) + 1]);
    }
}

TEST_CASE("drawWindows yields ids 0..255 as unsigned byte values", "[text][windows]") {
  Bytes split(50, 255);
  split[10] = 0;
  std::vector<int> in, next;
  ddl::drawWindows(split, 40, 20, 3, in, next);
  for (std::size_t i = 0; i < in.size(); ++i) {
    CHECK((in[i] == 255 || in[i] == 0));
    CHECK((next[i] == 255 || next[i] == 0));
  }
  CHECK(std::count(in.begin(), in.end(), 255) > 0);
  CHECK(std::count(in.begin(), in.end(), 0) > 0);  // 40 windows of 20 out of 30 starts: byte 10 is in most
}

TEST_CASE("drawWindows allocates nothing once input and target have their size", "[text][windows][alloc]") {
  const Bytes split = pattern(4096);
  std::vector<int> in, next;
  ddl::drawWindows(split, 32, 64, 1, in, next);
  const std::vector<int> firstDraw = in;
  const long before = ddl_test::operatorNewCount();
  for (std::uint64_t seed = 2; seed < 10; ++seed) ddl::drawWindows(split, 32, 64, seed, in, next);
  CHECK(ddl_test::operatorNewCount() == before);
  // The counter does count: a fresh vector allocates.
  std::vector<int> fresh, freshNext;
  ddl::drawWindows(split, 32, 64, 1, fresh, freshNext);
  CHECK(ddl_test::operatorNewCount() > before);
  CHECK(fresh == firstDraw);  // ... and seed 1 still gives the first call's windows
  CHECK(in != firstDraw);     // the reused vectors did receive the later draws
}

TEST_CASE("drawWindows: bad B, T, a short split and one vector for both are ValueErrors naming the values",
          "[text][windows][errors]") {
  const Bytes split = pattern(10);
  std::vector<int> in, next;
  const std::string fn = "ddl::drawWindows";
  auto fails = [&](Index B, Index T) {
    return thrownMessage<ddl::ValueError>([&] { ddl::drawWindows(split, B, T, 0, in, next); });
  };
  CHECK(fails(0, 3) == fn + ": need B >= 1 windows of T >= 1 tokens, got B = 0, T = 3");
  CHECK(fails(2, 0) == fn + ": need B >= 1 windows of T >= 1 tokens, got B = 2, T = 0");
  CHECK(fails(2, -1) == fn + ": need B >= 1 windows of T >= 1 tokens, got B = 2, T = -1");
  CHECK(fails(2, 10) == fn + ": a window of T + 1 = 11 bytes does not fit in a split of 10 bytes");
  CHECK_NOTHROW(ddl::drawWindows(split, 2, 9, 0, in, next));
  const std::string empty = thrownMessage<ddl::ValueError>([&] { ddl::drawWindows(Bytes{}, 1, 1, 0, in, next); });
  CHECK(empty == fn + ": a window of T + 1 = 2 bytes does not fit in a split of 0 bytes");
  const std::string huge = fails(std::numeric_limits<Index>::max(), 2);
  CHECK(contains(huge, fn + ": B * T overflows"));
  const std::string same = thrownMessage<ddl::ValueError>([&] { ddl::drawWindows(split, 1, 2, 0, in, in); });
  CHECK(same == fn + ": input and target must be different vectors");
}

TEST_CASE("readTextCorpusFiles reads files one after another as one text, split like one file", "[text]") {
  const std::string dir = freshDir("files");
  Bytes a, b, all;
  for (int i = 0; i < 300; ++i) a.push_back(static_cast<std::uint8_t>(i * 7));
  for (int i = 0; i < 100; ++i) b.push_back(static_cast<std::uint8_t>(255 - i));
  all = a;
  all.insert(all.end(), b.begin(), b.end());
  writeFile(dir + "/a", a);
  writeFile(dir + "/b", b);
  writeFile(dir + "/all", all);
  const ddl::TextCorpus joined = ddl::readTextCorpusFiles({dir + "/a", dir + "/b"}, ddl::TextSplit{0.1, 0.1});
  const ddl::TextCorpus one = ddl::readTextCorpus(dir + "/all", ddl::TextSplit{0.1, 0.1});
  CHECK(joined.train == one.train);
  CHECK(joined.validation == one.validation);
  CHECK(joined.test == one.test);
  CHECK(contains(joined.path, "and 1 more files"));
  const std::string missing = thrownMessage<ddl::IoError>([&] { ddl::readTextCorpusFiles({dir + "/a", dir + "/nope"}); });
  CHECK(contains(missing, "ddl::readTextCorpusFiles"));
  CHECK(contains(missing, dir + "/nope"));
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::readTextCorpusFiles({}); }), "no files given"));
}

}  // namespace test_text_corpus
