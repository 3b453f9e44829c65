// Tests for include/ddl/data/token_files.hpp: nanoGPT's flat uint16 files and llm.c's shards written
// here byte by byte, their header errors, a glob of shards read as one sequence, tokens outside the
// vocabulary named by file and offset; and the LM task and its windows over token files
// (train/next_token_task.hpp, train/text_windows.hpp), the same on 1 rank as on 2 ranks together.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/data/token_files.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/train/next_token_task.hpp"
#include "ddl/train/text_windows.hpp"

namespace test_token_files {  // each test file in its own namespace: a group of files compiles as one unit

namespace {

using Bytes = std::vector<std::uint8_t>;
using ddl::Index;
using ddl_test::contains;
using ddl_test::thrownMessage;

std::string freshDir(const std::string& name) { return ddl_test::freshTestDir("tokens_" + name); }

void putLe32(Bytes& b, std::int32_t v) {
  for (int k = 0; k < 4; ++k) b.push_back(static_cast<std::uint8_t>(static_cast<std::uint32_t>(v) >> (8 * k)));
}
void putTokens(Bytes& b, const std::vector<int>& tokens) {
  for (int t : tokens) {
    b.push_back(static_cast<std::uint8_t>(t & 0xff));
    b.push_back(static_cast<std::uint8_t>(t >> 8));
  }
}
// nanoGPT: the tokens alone.
Bytes flatFile(const std::vector<int>& tokens) {
  Bytes b;
  putTokens(b, tokens);
  return b;
}
// llm.c: 256 int32 (magic, version, count, zeros), then the tokens.
Bytes shardFile(const std::vector<int>& tokens, std::int32_t magic = 20240520, std::int32_t version = 1,
                std::int64_t count = -1) {
  Bytes b;
  putLe32(b, magic);
  putLe32(b, version);
  putLe32(b, static_cast<std::int32_t>(count < 0 ? static_cast<std::int64_t>(tokens.size()) : count));
  b.resize(1024, 0);
  putTokens(b, tokens);
  return b;
}
// n tokens that depend on their position (and on `salt`), below vocab, some above 255.
std::vector<int> tokensOf(std::size_t n, int vocab, int salt = 0) {
  std::vector<int> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<int>((i * 7919 + static_cast<std::size_t>(salt) * 131 + 3) % static_cast<std::size_t>(vocab));
  return t;
}
std::vector<int> all(const ddl::TokenFiles& f) {
  std::vector<int> out(static_cast<std::size_t>(f.size()));
  f.read(0, out.size(), out.data());
  return out;
}

}  // namespace

TEST_CASE("TokenFiles reads nanoGPT's flat uint16 and llm.c's shards, little-endian", "[tokens]") {
  const std::string dir = freshDir("formats");
  const std::vector<int> tokens = {0, 1, 255, 256, 50256, 65535, 300, 7};
  ddl_test::writeBytes(dir + "/train.bin", flatFile(tokens));
  ddl_test::writeBytes(dir + "/shard.bin", shardFile(tokens));
  const ddl::TokenFiles flat = ddl::openTokenFiles(dir + "/train.bin", 65536);
  const ddl::TokenFiles shard = ddl::openTokenFiles(dir + "/shard.bin", 65536);
  CHECK(flat.files().at(0).format() == ddl::TokenFileFormat::NanoGpt);
  CHECK(shard.files().at(0).format() == ddl::TokenFileFormat::LlmC);
  CHECK(flat.size() == tokens.size());
  CHECK(shard.size() == tokens.size());
  CHECK(all(flat) == tokens);
  CHECK(all(shard) == tokens);
  CHECK(shard.files()[0].dataOffset() == 1024);
  CHECK(flat.prefix(3).size() == 3);
  std::vector<int> three(3);
  flat.prefix(3).read(0, 3, three.data());
  CHECK(three == std::vector<int>(tokens.begin(), tokens.begin() + 3));
}

TEST_CASE("TokenFiles: llm.c header errors name the file, the offset and the values", "[tokens][errors]") {
  const std::string dir = freshDir("headers");
  const std::vector<int> tokens = tokensOf(10, 1000);
  const auto refused = [&](const std::string& name, const Bytes& b) {
    ddl_test::writeBytes(dir + "/" + name, b);
    return thrownMessage<ddl::IoError>([&] { ddl::openTokenFiles(dir + "/" + name, 1000); });
  };
  // A wrong magic is not a shard: read flat, its header words become tokens >= vocab.
  ddl_test::writeBytes(dir + "/magic.bin", shardFile(tokens, 20240521));
  ddl::TokenFiles flat = ddl::openTokenFiles(dir + "/magic.bin", 65536);
  CHECK(flat.files()[0].format() == ddl::TokenFileFormat::NanoGpt);
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::openTokenFiles(dir + "/magic.bin", 1000).scan([](const unsigned char*, std::size_t) {}); }),
                 "magic.bin': byte offset 0: token 55433 is outside the vocabulary of 1000"));
  CHECK(contains(refused("llama3.bin", shardFile(tokens, 20240801, 7)), "llama3.bin': byte offset 0: magic 20240801: an llm.c Llama 3 shard"));
  CHECK(contains(refused("eval.bin", shardFile(tokens, 20240522, 1)), "magic 20240522: an llm.c evaluation file"));
  const std::string version = refused("version.bin", shardFile(tokens, 20240520, 2));
  CHECK(contains(version, "version.bin': byte offset 4: llm.c shard version 2, expected 1"));
  const std::string larger = refused("larger.bin", shardFile(tokens, 20240520, 1, 11));
  CHECK(contains(larger, "larger.bin': byte offset 8: the header counts 11 tokens"));
  CHECK(contains(larger, "the file holds 1044 bytes"));
  const std::string smaller = refused("smaller.bin", shardFile(tokens, 20240520, 1, 9));
  CHECK(contains(smaller, "the header counts 9 tokens"));
  CHECK(contains(refused("zero.bin", shardFile({}, 20240520, 1, 0)), "the header counts 0 tokens"));
  Bytes odd = shardFile(tokens);
  odd.push_back(1);
  CHECK(contains(refused("odd.bin", odd), "the header counts 10 tokens"));
  Bytes truncated = shardFile(tokens);
  truncated.resize(600);
  CHECK(contains(refused("truncated.bin", truncated), "truncated.bin': byte offset 600: an llm.c shard header is 1024 bytes"));
  CHECK(contains(refused("empty.bin", Bytes{}), "empty.bin': byte offset 0: expected tokens, found an empty file"));
  CHECK(contains(refused("flat_odd.bin", Bytes{1, 2, 3}), "flat_odd.bin': byte offset 2: a file of uint16 tokens has an even size"));
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::openTokenFiles(dir + "/missing.bin", 1000); }), "missing.bin': not found"));
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::TokenFiles({dir}, 1000); }), "not a regular file"));
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::TokenFiles({dir + "/x"}, 1); }), "vocab must be >= 2"));
}

TEST_CASE("TokenFiles: a token >= vocab is an IoError naming its file and byte offset, where it is read", "[tokens][errors]") {
  const std::string dir = freshDir("vocab");
  std::vector<int> tokens = tokensOf(50, 100);
  tokens[37] = 100;
  ddl_test::writeBytes(dir + "/a_train.bin", shardFile(tokensOf(20, 100)));
  ddl_test::writeBytes(dir + "/b_train.bin", shardFile(tokens));
  const ddl::TokenFiles set = ddl::openTokenFiles(dir + "/*train*.bin", 100);  // opening maps, reads no token
  REQUIRE(set.size() == 70);
  const std::string scanned = thrownMessage<ddl::IoError>([&] { set.scan([](const unsigned char*, std::size_t) {}); });
  CHECK(contains(scanned, "b_train.bin': byte offset 1098: token 100 is outside the vocabulary of 100 (token 37 of the file)"));
  std::vector<int> out(5);
  CHECK(contains(thrownMessage<ddl::IoError>([&] { set.read(55, 5, out.data()); }), "b_train.bin': byte offset 1098: token 100"));
  set.read(20, 5, out.data());  // before it: fine
  CHECK(out == std::vector<int>(tokens.begin(), tokens.begin() + 5));
  ddl_test::writeBytes(dir + "/flat.bin", flatFile(tokens));
  CHECK(contains(thrownMessage<ddl::IoError>([&] { all(ddl::openTokenFiles(dir + "/flat.bin", 100)); }),
                 "flat.bin': byte offset 74: token 100"));
  CHECK_NOTHROW(all(ddl::openTokenFiles(dir + "/flat.bin", 101)));
}

TEST_CASE("TokenFiles: a glob or a folder of shards is one sequence in name order, scan sees every byte", "[tokens]") {
  const std::string dir = freshDir("glob");
  std::vector<int> expected;
  for (int s : {2, 0, 1}) {  // written out of order: read by name
    ddl_test::writeBytes(dir + "/data_train_00000" + std::to_string(s) + ".bin", shardFile(tokensOf(30 + 10 * static_cast<std::size_t>(s), 50304, s)));
  }
  for (int s : {0, 1, 2}) {
    const std::vector<int> t = tokensOf(30 + 10 * static_cast<std::size_t>(s), 50304, s);
    expected.insert(expected.end(), t.begin(), t.end());
  }
  ddl_test::writeBytes(dir + "/data_val_000000.bin", shardFile(tokensOf(25, 50304, 9)));
  const ddl::TokenFiles train = ddl::openTokenFiles(dir + "/*train*.bin", 50304);
  CHECK(train.files().size() == 3);
  CHECK(train.size() == 120);
  CHECK(all(train) == expected);
  // A read across the boundary of two shards.
  std::vector<int> across(10);
  train.read(25, 10, across.data());
  CHECK(across == std::vector<int>(expected.begin() + 25, expected.begin() + 35));
  CHECK(ddl::openTokenFiles(dir + "/data_val_??????.bin", 50304).size() == 25);
  CHECK(ddl::openTokenFiles(dir, 50304).files().size() == 4);  // a folder: every *.bin
  std::size_t seen = 0;
  train.scan([&](const unsigned char*, std::size_t n) { seen += n; });
  CHECK(seen == 240);
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::openTokenFiles(dir + "/*test*.bin", 50304); }),
                 "no file matches *test*.bin"));
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::openTokenFiles(dir + "/*/x.bin", 50304); }),
                 "wildcards only in the file name"));
}

TEST_CASE("drawWindows over token files draws as over bytes, TextWindows on 2 ranks is the 1-rank batch", "[tokens][windows]") {
  const std::string dir = freshDir("windows");
  std::vector<int> tokens = tokensOf(300, 256);  // ids < 256: the same data as bytes too
  ddl_test::writeBytes(dir + "/a.bin", shardFile(std::vector<int>(tokens.begin(), tokens.begin() + 120)));
  ddl_test::writeBytes(dir + "/b.bin", flatFile(std::vector<int>(tokens.begin() + 120, tokens.end())));
  const ddl::TokenFiles set = ddl::openTokenFiles(dir + "/?.bin", 50304);
  Bytes bytes(tokens.begin(), tokens.end());
  std::vector<int> xi, yi, xb, yb;
  ddl::drawWindows(set, 6, 16, 42, xi, yi);
  ddl::drawWindows(bytes, 6, 16, 42, xb, yb);
  CHECK(xi == xb);
  CHECK(yi == yb);

  ddl::TextWindows<float, ddl::TokenFiles> one(set, 4, 16, 3, 7), r0(set, 4, 16, 3, 7), r1(set, 4, 16, 3, 7);
  r0.shard(0, 2);
  r1.shard(1, 2);
  for (std::uint64_t epoch : {0u, 1u}) {
    one.startEpoch(epoch);
    r0.startEpoch(epoch);
    r1.startEpoch(epoch);
    ddl::TokenBatch x, x0, x1;
    std::vector<int> y, y0, y1;
    while (one.next(x, y)) {
      REQUIRE(r0.next(x0, y0));
      REQUIRE(r1.next(x1, y1));
      std::vector<int> joined = x0.ids, joinedY = y0;
      joined.insert(joined.end(), x1.ids.begin(), x1.ids.end());
      joinedY.insert(joinedY.end(), y1.begin(), y1.end());
      CHECK(joined == x.ids);
      CHECK(joinedY == y);
      CHECK(x0.layout == ddl::TokenLayout::sequence(2, 16));
    }
  }
  ddl::TextWindows<float> byteWindows(bytes, 4, 16, 3, 7);
  byteWindows.startEpoch(1);
  one.startEpoch(1);
  ddl::TokenBatch xa, xc;
  std::vector<int> ya, yc;
  REQUIRE(byteWindows.next(xa, ya));
  REQUIRE(one.next(xc, yc));
  CHECK(xa.ids == xc.ids);
  CHECK(ya == yc);
}

TEST_CASE("NextTokenTask over token files evaluates every token once, as over the same bytes", "[tokens][eval]") {
  const std::string dir = freshDir("eval");
  const std::vector<int> tokens = tokensOf(45, 256, 3);
  ddl_test::writeBytes(dir + "/v1.bin", shardFile(std::vector<int>(tokens.begin(), tokens.begin() + 20)));
  ddl_test::writeBytes(dir + "/v2.bin", shardFile(std::vector<int>(tokens.begin() + 20, tokens.end())));
  const ddl::TokenFiles set = ddl::openTokenFiles(dir + "/v*.bin", 256);
  const Bytes bytes(tokens.begin(), tokens.end());
  ddl::DeltaLMConfig cfg = ddl_test::deltaLMConfig(16, 2, 1, 5, 24, "dv1");
  ddl::DeltaLM<double> lm(cfg, 4);
  ddl::NextTokenTask<double, ddl::TokenFiles> task;
  ddl::NextTokenTask<double> byteTask;
  ddl::MatX<double> scratch;
  task.checkEvalData(lm, set, "test");
  const ddl::EvalResult a = task.evaluate(lm, set, 3, scratch);
  const ddl::EvalResult b = byteTask.evaluate(lm, bytes, 3, scratch);
  CHECK(a.count == 44);
  CHECK(a.loss == b.loss);
  CHECK(a.accuracy == b.accuracy);

  // A model smaller than the files' vocabulary is refused by the task and the windows.
  const ddl::TokenFiles wide = ddl::openTokenFiles(dir + "/v*.bin", 50304);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { task.checkEvalData(lm, wide, "test"); }), "vocabulary 50304"));
  ddl::TextWindows<float, ddl::TokenFiles> windows(wide, 2, 5, 1, 1);
  ddl::DeltaLM<float> lmf(cfg, 4);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { windows.checkModel(lmf, "test"); }), "vocabulary of 50304"));
}

// A token file rewritten in place under a run (truncated, extended) is found at the next read, with the
// file and the sizes named: read by offset, never a SIGBUS of a mapping that outlives the file's end.
TEST_CASE("TokenFiles: a file that changes size while open is an IoError naming it, not a fault", "[tokens][errors]") {
  const std::string dir = freshDir("resized");
  const std::string path = dir + "/train.bin";
  ddl_test::writeBytes(path, flatFile(tokensOf(20000, 50304)));
  const ddl::TokenFiles set = ddl::openTokenFiles(path, 50304);
  std::vector<int> window(16);
  set.read(19000, window.size(), window.data());
  std::filesystem::resize_file(path, 4096);  // as `: > train.bin` or a tokenizer writing in place would
  const std::string m = thrownMessage<ddl::IoError>([&] { set.read(19000, window.size(), window.data()); });
  CHECK(contains(m, "ddl::TokenFiles::read: file '" + path + "': byte offset 38000: the file changed size while in "
                    "use: 40000 bytes when opened, 4096 now"));
  CHECK(contains(thrownMessage<ddl::IoError>([&] { set.read(0, window.size(), window.data()); }),  // before the cut too
                 "40000 bytes when opened, 4096 now"));
  CHECK(contains(thrownMessage<ddl::IoError>([&] { set.scan([](const unsigned char*, std::size_t) {}); }),
                 "ddl::TokenFiles::scan: file '" + path + "': byte offset 0: the file changed size"));
  std::filesystem::resize_file(path, 50000);  // grown: the set it was opened as is gone too
  CHECK(contains(thrownMessage<ddl::IoError>([&] { set.read(0, 1, window.data()); }), "40000 bytes when opened, 50000 now"));
}

// Files are told apart by identity (device, inode): a hard link or another spelling is the same file.
TEST_CASE("TokenFile::sameFileAs compares files, not their paths", "[tokens]") {
  const std::string dir = freshDir("identity");
  ddl_test::writeBytes(dir + "/a.bin", flatFile(tokensOf(10, 512)));
  ddl_test::writeBytes(dir + "/b.bin", flatFile(tokensOf(10, 512)));
  std::filesystem::create_hard_link(dir + "/a.bin", dir + "/link.bin");
  const ddl::TokenFile a(dir + "/a.bin"), b(dir + "/b.bin"), link(dir + "/link.bin"), dotted(dir + "/./a.bin");
  CHECK(a.sameFileAs(link));
  CHECK(a.sameFileAs(dotted));
  CHECK_FALSE(a.sameFileAs(b));
}

// The fixture of the ddl-text smoke run (examples/CMakeLists.txt): a tiny set of vocabulary 512 in
// both formats, DDL_TEST_TMPDIR/token_files_tiny/{tiny_train_000000.bin, tiny_train_000001.bin (llm.c),
// val.bin, test.bin (nanoGPT)}; ids 256..511 in a cycle of 7 with a step that depends on the
// position, so a small model learns it well below the uniform ln 512 = 6.24 nats.
TEST_CASE("example path: write tiny token files", "[tokens][example]") {
  const std::string dir = ddl_test::freshTestDir("token_files_tiny");
  std::vector<int> tokens(6000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = 256 + static_cast<int>((i % 7) * 31 + (i / 7) % 5);
  const auto part = [&](std::size_t a, std::size_t b) {
    return std::vector<int>(tokens.begin() + static_cast<std::ptrdiff_t>(a), tokens.begin() + static_cast<std::ptrdiff_t>(b));
  };
  ddl_test::writeBytes(dir + "/tiny_train_000000.bin", shardFile(part(0, 2500)));
  ddl_test::writeBytes(dir + "/tiny_train_000001.bin", shardFile(part(2500, 5000)));
  ddl_test::writeBytes(dir + "/val.bin", flatFile(part(5000, 5500)));
  ddl_test::writeBytes(dir + "/test.bin", flatFile(part(5500, 6000)));
  CHECK(ddl::openTokenFiles(dir + "/*train*.bin", 512).size() == 5000);
}

}  // namespace test_token_files
