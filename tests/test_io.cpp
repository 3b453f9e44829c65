// Tests for include/ddl/io: safetensors format, checkpoints, atomic writes, metrics CSV.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/stat.h>
#include <csignal>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/io/atomic_file.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/io/metrics_csv.hpp"
#include "ddl/io/safetensors.hpp"

namespace test_io {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::MatX;
using ddl_test::contains;
using ddl_test::thrownMessage;

namespace {

std::string tmpPath(const std::string& name) { return std::string(DDL_TEST_TMPDIR) + "/io_" + name; }

std::string readBytes(const std::string& path) { return ddl_test::fileBytes(path); }
void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
bool fileExists(const std::string& path) { return std::ifstream(path).good(); }

// A hand-made safetensors file: length prefix (or `length` when given), header text, data.
std::string makeFile(const std::string& header, const std::string& data, long long length = -1) {
  std::string out(8, '\0');
  const auto n = static_cast<std::uint64_t>(length < 0 ? static_cast<long long>(header.size()) : length);
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

// Two parameters of different scalar types; w is not symmetric so a transposed write shows.
struct TinyModel {
  ddl::Param<double> w{3, 2};
  ddl::Param<float> b{2, 1, /*withDecay=*/false};

  explicit TinyModel(std::uint64_t seed = 1) {
    ddl::Rng rng(seed);
    for (ddl::Index i = 0; i < w.value.size(); ++i) w.value(i) = rng.normal();
    for (ddl::Index i = 0; i < b.value.size(); ++i) b.value(i) = static_cast<float>(rng.normal());
  }
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    f(ddl::joinName(prefix, "w"), w);
    f(ddl::joinName(prefix, "b"), b);
  }
};

bool sameBits(const TinyModel& a, const TinyModel& b) {
  return a.w.value.size() == b.w.value.size() && a.b.value.size() == b.b.value.size() &&
         std::memcmp(a.w.value.data(), b.w.value.data(), sizeof(double) * 6) == 0 &&
         std::memcmp(a.b.value.data(), b.b.value.data(), sizeof(float) * 2) == 0;
}

// A model whose walk throws during the pass that streams data (the second walk of a save).
struct FailingModel {
  ddl::Param<double> w{400, 300};
  int walks = 0;
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    f(ddl::joinName(prefix, "w"), w);
    if (++walks == 2) throw std::runtime_error("walk failed mid-way");
  }
};

// The optimizer interface of io/checkpoint.hpp: moments per parameter plus a step count.
struct FakeOptimizer {
  std::int64_t t = 0;
  std::vector<std::string> names;
  std::vector<MatX<double>> m1;
  std::vector<MatX<float>> m2;

  std::int64_t stepCount() const { return t; }
  void setStepCount(std::int64_t s) { t = s; }
  template <class Model>
  void initState(Model& model) {
    names.clear();
    m1.clear();
    m2.clear();
    model.visitParams("", [&](const std::string& name, auto& p) {
      names.push_back(name);
      m1.push_back(MatX<double>::Zero(p.value.rows(), p.value.cols()));
      m2.push_back(MatX<float>::Zero(p.value.rows(), p.value.cols()));
    });
  }
  template <class F>
  void visitState(F&& f) {
    for (std::size_t i = 0; i < names.size(); ++i) {
      f("m." + names[i], m1[i]);
      f("v." + names[i], m2[i]);
    }
  }
};

// A FakeOptimizer with zero moments for the model's parameters, at step t.
template <class Model>
FakeOptimizer optimizerAtStep(Model& model, std::int64_t t) {
  FakeOptimizer opt;
  opt.initState(model);
  opt.t = t;
  return opt;
}

// Loads path into TinyModel(9) with a live optimizer (step 2, first moments 3): the load must throw an
// IoError whose message contains `expected`, and leave the model and the optimizer as they were.
// Returns that optimizer for further checks.
FakeOptimizer checkOptimizerLoadRefused(const std::string& path, const std::string& expected) {
  TinyModel b(9);
  const TinyModel bBefore(9);
  FakeOptimizer live;
  live.initState(b);
  live.m1[0].setConstant(3.0);
  live.t = 2;
  const std::string msg = thrownMessage<ddl::IoError>([&] { ddl::loadCheckpoint(path, b, live); });
  CHECK(contains(msg, expected));
  CHECK(sameBits(b, bBefore));
  CHECK(live.t == 2);
  CHECK(live.m1[0](0, 0) == 3.0);
  return live;
}

}  // namespace

TEST_CASE("safetensors: model round trip is bit-identical", "[io][safetensors]") {
  const std::string path = tmpPath("roundtrip.safetensors");
  TinyModel a(7);
  a.w.value(0, 0) = -0.0;
  a.w.value(1, 1) = std::numeric_limits<double>::denorm_min();
  a.w.value(2, 0) = std::numeric_limits<double>::max();
  a.b.value(1) = -std::numeric_limits<float>::denorm_min();
  ddl::saveCheckpoint(path, a);
  TinyModel b(99);
  REQUIRE_FALSE(sameBits(a, b));
  ddl::loadCheckpoint(path, b);
  CHECK(sameBits(a, b));
  CHECK_FALSE(fileExists(ddl::atomicTempPath(path)));
}

TEST_CASE("safetensors: header bytes, alignment, offsets and row-major order", "[io][safetensors]") {
  const std::string path = tmpPath("layout.safetensors");
  TinyModel a(3);
  a.w.value << 1, 2, 3, 4, 5, 6;  // rows (1,2) (3,4) (5,6): row-major bytes read 1..6
  ddl::CheckpointMeta meta;
  meta.preset = "tiny";
  ddl::saveCheckpoint(path, a, meta);

  const std::string bytes = readBytes(path);
  REQUIRE(bytes.size() >= 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  CAPTURE(n, bytes.size());
  CHECK((8 + n) % 8 == 0);
  REQUIRE(8 + n + 6 * 8 + 2 * 4 == bytes.size());
  const std::string header = bytes.substr(8, n);
  CHECK(header.front() == '{');
  const auto lastBrace = header.find_last_of('}');
  CHECK(header.find_first_not_of(' ', lastBrace + 1) == std::string::npos);  // padding is spaces only
  CHECK(n - lastBrace - 1 < 8);

  const auto j = nlohmann::json::parse(header);
  CHECK(j["w"]["dtype"] == "F64");
  CHECK(j["w"]["shape"] == nlohmann::json({3, 2}));
  CHECK(j["w"]["data_offsets"] == nlohmann::json({0, 48}));
  CHECK(j["b"]["dtype"] == "F32");
  CHECK(j["b"]["shape"] == nlohmann::json({2, 1}));
  CHECK(j["b"]["data_offsets"] == nlohmann::json({48, 56}));
  CHECK(j["__metadata__"]["preset"] == "tiny");
  CHECK(j["__metadata__"]["ddl_version"] == ddl::versionString());
  CHECK(j["__metadata__"]["format"] == "ddl-checkpoint");

  const std::size_t data = 8 + static_cast<std::size_t>(n);
  for (int i = 0; i < 6; ++i) {  // little-endian doubles in row-major order
    std::uint64_t bitsLE = 0;
    for (int k = 7; k >= 0; --k) bitsLE = (bitsLE << 8) | static_cast<unsigned char>(bytes[data + 8 * i + k]);
    double v = 0;
    std::memcpy(&v, &bitsLE, 8);
    CHECK(v == i + 1.0);
  }
  std::uint32_t bLE = 0;
  for (int k = 3; k >= 0; --k) bLE = (bLE << 8) | static_cast<unsigned char>(bytes[data + 48 + 4 + k]);
  float b1 = 0;
  std::memcpy(&b1, &bLE, 4);
  CHECK(b1 == a.b.value(1));
}

TEST_CASE("safetensors: byte swapping reverses each element", "[io][safetensors]") {
  char data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ddl::detail::swapBytes(data, 2, 4);
  CHECK(std::string(data, 8) == std::string("\4\3\2\1\10\7\6\5", 8));
#if defined(__BYTE_ORDER__)
  CHECK(ddl::detail::hostIsLittleEndian() == (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__));
#endif
}

namespace {
// A valid two-tensor file for TinyModel, as JSON and data, to corrupt one piece at a time.
const char* kGoodHeader =
    R"({"w":{"dtype":"F64","shape":[3,2],"data_offsets":[0,48]},"b":{"dtype":"F32","shape":[2,1],"data_offsets":[48,56]}})";
std::string goodData() { return std::string(56, '\0'); }

// Loads `bytes` into a fresh TinyModel, checks that it throws IoError, that the model is untouched,
// and returns the message.
std::string loadFails(const std::string& name, const std::string& bytes, ddl::CheckpointLoadOptions opt = {}) {
  const std::string path = tmpPath(name);
  writeBytes(path, bytes);
  TinyModel m(5);
  const TinyModel before(5);
  const std::string msg = thrownMessage<ddl::IoError>([&] { ddl::loadCheckpoint(path, m, opt); });
  CHECK(sameBits(m, before));  // no partial load
  CHECK(contains(msg, path));
  return msg;
}
}  // namespace

TEST_CASE("safetensors: a hand-made valid file loads", "[io][safetensors]") {
  const std::string path = tmpPath("handmade.safetensors");
  writeBytes(path, makeFile(kGoodHeader, goodData()));
  TinyModel m(5);
  ddl::loadCheckpoint(path, m);
  CHECK(m.w.value.isZero(0));
  CHECK(m.b.value.isZero(0));
}

TEST_CASE("safetensors: truncated or too short files are refused", "[io][safetensors]") {
  const std::string good = makeFile(kGoodHeader, goodData());
  const std::string m1 = loadFails("short.safetensors", good.substr(0, 5));
  CHECK(contains(m1, "5 bytes, expected at least 8"));
  const std::string m2 = loadFails("trunc.safetensors", good.substr(0, good.size() - 3));
  CHECK(contains(m2, "out of bounds"));
  CHECK(contains(m2, "\"b\""));
  const std::string m3 = loadFails("trunc_header.safetensors", good.substr(0, 20));
  CHECK(contains(m3, "header length at byte offset 0"));
}

TEST_CASE("safetensors: insane header lengths are refused", "[io][safetensors]") {
  const std::string msg = loadFails("len.safetensors", makeFile(kGoodHeader, goodData(), 1LL << 40));
  CHECK(contains(msg, "header length at byte offset 0 is 1099511627776"));
  // A header length under the file size but over the 100 MB limit (sparse file, no real data).
  const std::string path = tmpPath("huge.safetensors");
  writeBytes(path, makeFile(kGoodHeader, goodData(), 150LL * 1000 * 1000));
  std::filesystem::resize_file(path, 200u * 1000u * 1000u);
  TinyModel m(5);
  const std::string huge = thrownMessage<ddl::IoError>([&] { ddl::loadCheckpoint(path, m); });
  CHECK(contains(huge, "is 150000000, expected at most 100000000"));
  std::filesystem::remove(path);
}

TEST_CASE("safetensors: invalid JSON names the byte offset", "[io][safetensors]") {
  const std::string hdr = R"({"w":{"dtype":"F64","shape":[3,2],"data_offsets":[0,48]},,})";
  const std::string msg = loadFails("json.safetensors", makeFile(hdr, goodData()));
  CHECK(contains(msg, "invalid JSON header at byte offset 65"));  // 8 + index of the second ','
  const std::string dup = loadFails(
      "dup.safetensors",
      makeFile(R"({"w":{"dtype":"F64","shape":[3,2],"data_offsets":[0,48]},"w":{"dtype":"F32","shape":[2,1],"data_offsets":[48,56]}})",
               goodData()));
  CHECK(contains(dup, "duplicate key \"w\""));
  const std::string notObj = loadFails("arr.safetensors", makeFile("[1,2]   ", ""));
  CHECK(contains(notObj, "must start with '{'"));
}

TEST_CASE("safetensors: unknown dtype is refused", "[io][safetensors]") {
  std::string hdr = kGoodHeader;
  hdr.replace(hdr.find("F32"), 3, "F33");
  const std::string msg = loadFails("dtype.safetensors", makeFile(hdr, goodData()));
  CHECK(contains(msg, "tensor \"b\""));
  CHECK(contains(msg, "unknown dtype \"F33\""));
}

TEST_CASE("safetensors: shape and offsets must agree", "[io][safetensors]") {
  const std::string hdr =
      R"({"w":{"dtype":"F64","shape":[3,3],"data_offsets":[0,48]},"b":{"dtype":"F32","shape":[2,1],"data_offsets":[48,56]}})";
  const std::string msg = loadFails("shapeoff.safetensors", makeFile(hdr, goodData()));
  CHECK(contains(msg, "tensor \"w\""));
  CHECK(contains(msg, "need 72 bytes"));
  CHECK(contains(msg, "hold 48"));
  const std::string neg = loadFails(
      "neg.safetensors",
      makeFile(R"({"w":{"dtype":"F64","shape":[-3,2],"data_offsets":[0,48]}})", std::string(48, '\0')));
  CHECK(contains(neg, "non-negative"));
}

TEST_CASE("safetensors: overlapping, gapped and trailing data are refused", "[io][safetensors]") {
  const std::string overlap = loadFails(
      "overlap.safetensors",
      makeFile(R"({"w":{"dtype":"F64","shape":[3,2],"data_offsets":[0,48]},"b":{"dtype":"F32","shape":[2,1],"data_offsets":[44,52]}})",
               std::string(52, '\0')));
  CHECK(contains(overlap, "\"b\" starts at data offset 44"));
  CHECK(contains(overlap, "expected 48: overlaps \"w\""));
  const std::string gap = loadFails(
      "gap.safetensors",
      makeFile(R"({"w":{"dtype":"F64","shape":[3,2],"data_offsets":[0,48]},"b":{"dtype":"F32","shape":[2,1],"data_offsets":[52,60]}})",
               std::string(60, '\0')));
  CHECK(contains(gap, "expected 48: gap after \"w\""));
  const std::string trailing = loadFails("trailing.safetensors", makeFile(kGoodHeader, goodData() + "xyz"));
  CHECK(contains(trailing, "cover 56 bytes of the data region, but it holds 59"));
}

TEST_CASE("checkpoint: missing, extra and mis-shaped tensors are refused without partial load", "[io][checkpoint]") {
  const std::string missing = loadFails(
      "missing.safetensors", makeFile(R"({"w":{"dtype":"F64","shape":[3,2],"data_offsets":[0,48]}})",
                                      std::string(48, '\0')));
  CHECK(contains(missing, "tensor \"b\" is missing"));
  CHECK(contains(missing, "[2, 1]"));  // the shape it is stored with

  const std::string extraHdr =
      R"({"w":{"dtype":"F64","shape":[3,2],"data_offsets":[0,48]},"b":{"dtype":"F32","shape":[2,1],"data_offsets":[48,56]},"c":{"dtype":"I64","shape":[1],"data_offsets":[56,64]}})";
  const std::string extra = loadFails("extra.safetensors", makeFile(extraHdr, std::string(64, '\0')));
  CHECK(contains(extra, "unexpected tensor \"c\""));
  {
    const std::string path = tmpPath("extra_ok.safetensors");
    writeBytes(path, makeFile(extraHdr, std::string(64, '\0')));
    TinyModel m(5);
    ddl::CheckpointLoadOptions opt;
    opt.allowExtraTensors = true;
    ddl::loadCheckpoint(path, m, opt);
    CHECK(m.w.value.isZero(0));
  }

  const std::string shape = loadFails(
      "shape.safetensors",
      makeFile(R"({"w":{"dtype":"F64","shape":[3,2],"data_offsets":[0,48]},"b":{"dtype":"F32","shape":[1,2],"data_offsets":[48,56]}})",
               goodData()));
  CHECK(contains(shape, "tensor \"b\""));
  CHECK(contains(shape, "expected shape [2, 1], found [1, 2]"));
  CHECK(contains(shape, "file byte"));
}

TEST_CASE("checkpoint: F32/F64 conversion only when allowed", "[io][checkpoint]") {
  // b is stored as F64 here; the model's b is float.
  const std::string hdr =
      R"({"w":{"dtype":"F64","shape":[3,2],"data_offsets":[0,48]},"b":{"dtype":"F64","shape":[2,1],"data_offsets":[48,64]}})";
  std::string data(64, '\0');
  const double half = 0.5;
  std::memcpy(&data[48], &half, 8);  // this host is little-endian (checked in the byte-swap test)
  const std::string msg = loadFails("conv.safetensors", makeFile(hdr, data));
  CHECK(contains(msg, "expected dtype F32, found F64"));
  const std::string path = tmpPath("conv_ok.safetensors");
  writeBytes(path, makeFile(hdr, data));
  TinyModel m(5);
  ddl::CheckpointLoadOptions opt;
  opt.allowConversion = true;
  ddl::loadCheckpoint(path, m, opt);
  CHECK(m.b.value(0) == 0.5f);
}

TEST_CASE("safetensors: a double reader takes F32 only when conversion is allowed", "[io][safetensors]") {
  const std::string path = tmpPath("f32.safetensors");
  std::map<std::string, MatX<float>> t;
  t["x"] = MatX<float>(2, 2);
  t["x"] << 0.1f, -2.0f, 3.5f, 1e-30f;
  ddl::saveSafetensors(path, t);
  const std::string msg = thrownMessage<ddl::IoError>([&] { ddl::loadSafetensors<double>(path); });
  CHECK(contains(msg, "tensor \"x\""));
  CHECK(contains(msg, "expected dtype F64, found F32"));
  const auto d = ddl::loadSafetensors<double>(path, /*allowConversion=*/true);
  CHECK(d.at("x") == t["x"].cast<double>());
}

namespace {
// A model whose parameter changes shape between the declaring walk and the writing walk.
struct ShiftingModel {
  ddl::Param<double> w{2, 2};
  int walks = 0;
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    if (++walks == 2) w = ddl::Param<double>(3, 2);
    f(ddl::joinName(prefix, "w"), w);
  }
};
}  // namespace

TEST_CASE("checkpoint: a walk that changes between passes is refused", "[io][checkpoint]") {
  const std::string path = tmpPath("shifting.safetensors");
  ShiftingModel m;
  const std::string msg = thrownMessage<ddl::ValueError>([&] { ddl::saveCheckpoint(path, m); });
  CHECK(contains(msg, "expected tensor \"w\" F64 [2, 2] next, found \"w\" F64 [3, 2]"));
  CHECK_FALSE(fileExists(path));
  CHECK_FALSE(fileExists(ddl::atomicTempPath(path)));
}

TEST_CASE("atomic write: a failed save leaves the previous checkpoint byte-identical", "[io][atomic]") {
  const std::string path = tmpPath("atomic.safetensors");
  TinyModel a(11);
  ddl::saveCheckpoint(path, a);
  const std::string before = readBytes(path);
  REQUIRE_FALSE(before.empty());

  SECTION("the model's walk throws while streaming") {
    FailingModel f;
    f.w.value.setOnes();
    const std::string msg = thrownMessage<std::runtime_error>([&] { ddl::saveCheckpoint(path, f); });
    CHECK(msg == "walk failed mid-way");
    CHECK(f.walks == 2);
  }
  SECTION("the file system refuses the bytes (file size limit)") {
    rlimit old{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    const auto oldHandler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old;
    small.rlim_cur = 100000;  // FailingModel's 960 kB cannot fit
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    FailingModel f;
    f.walks = 10;  // never throws itself
    const std::string msg = thrownMessage<ddl::IoError>([&] { ddl::saveCheckpoint(path, f); });
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, oldHandler);
    CHECK(contains(msg, "write failed at byte offset"));
    CHECK(contains(msg, ddl::atomicTempPath(path)));
  }
  SECTION("the directory does not exist") {
    const std::string bad = tmpPath("no_such_dir/x.safetensors");
    const std::string msg = thrownMessage<ddl::IoError>([&] { ddl::saveCheckpoint(bad, a); });
    CHECK(contains(msg, "cannot create the temporary file"));
    CHECK(contains(msg, "no_such_dir"));
  }
  CHECK(readBytes(path) == before);
  CHECK_FALSE(fileExists(ddl::atomicTempPath(path)));
}

TEST_CASE("checkpoint: metadata round trip and header-only read", "[io][checkpoint]") {
  const std::string path = tmpPath("meta.safetensors");
  TinyModel a(2);
  ddl::CheckpointMeta meta;
  meta.preset = "mnist-small";
  meta.modelConfig = R"({"width":256,"depth":4,"residual":"delta"})";
  meta.epoch = 3;
  meta.step = 1234;
  ddl::Rng rng(42);
  rng.next();
  rng.normal();  // leaves a Box-Muller spare pending: it must travel through the checkpoint
  meta.rngState = rng.state();
  meta.extra["note"] = "with \"quotes\", commas";
  ddl::saveCheckpoint(path, a, meta);

  const ddl::CheckpointMeta r = ddl::readCheckpointMetadata(path);
  CHECK(r.ddlVersion == ddl::versionString());
  CHECK(r.preset == meta.preset);
  CHECK(r.modelConfig == meta.modelConfig);
  CHECK(r.epoch == 3);
  CHECK(r.step == 1234);
  REQUIRE(r.rngState.has_value());
  CHECK(*r.rngState == rng.state());
  ddl::Rng resumed;
  resumed.setState(*r.rngState);
  CHECK(resumed.normal() == rng.normal());
  CHECK(r.extra == meta.extra);
  CHECK_FALSE(r.optimizerStep.has_value());

  TinyModel b(8);
  const ddl::CheckpointMeta l = ddl::loadCheckpoint(path, b);
  CHECK(l.step == 1234);
  CHECK(sameBits(a, b));

  auto md = meta.toMetadata();
  md["epoch"] = "3x";
  const std::string m1 =
      thrownMessage<ddl::IoError>([&] { ddl::CheckpointMeta::fromMetadata(md, "file.safetensors"); });
  CHECK(contains(m1, "metadata \"epoch\" must be a 64-bit integer, found \"3x\""));
  md = meta.toMetadata();
  md["rng_state"] = "[1,2,3]";
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::CheckpointMeta::fromMetadata(md, "f"); }), "rng_state"));
  ddl::CheckpointMeta clash;
  clash.extra["step"] = "1";
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { clash.toMetadata(); }), "\"step\" is reserved"));
  ddl::CheckpointMeta badJson;
  badJson.modelConfig = "{width:";
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { badJson.toMetadata(); }), "not valid JSON"));
}

TEST_CASE("checkpoint: optimizer state and step count round trip", "[io][checkpoint]") {
  const std::string path = tmpPath("optim.safetensors");
  TinyModel a(4);
  FakeOptimizer opt = optimizerAtStep(a, 17);
  for (auto& m : opt.m1) m.setRandom();
  for (auto& m : opt.m2) m.setRandom();
  ddl::saveCheckpoint(path, a, opt);
  CHECK(ddl::readCheckpointMetadata(path).optimizerStep == 17);
  const auto names = ddl::readSafetensorsHeader(path).tensors;
  CHECK(names.size() == 6);
  CHECK(ddl::readSafetensorsHeader(path).find("optim.m.w") != nullptr);
  CHECK(ddl::readSafetensorsHeader(path).find("optim.v.b") != nullptr);

  TinyModel b(9);
  FakeOptimizer fresh;
  ddl::loadCheckpoint(path, b, fresh);
  CHECK(sameBits(a, b));
  CHECK(fresh.t == 17);
  REQUIRE(fresh.names == opt.names);
  for (std::size_t i = 0; i < opt.names.size(); ++i) {
    CHECK(fresh.m1[i] == opt.m1[i]);
    CHECK(fresh.m2[i] == opt.m2[i]);
  }

  // The model alone loads from the same file: optimizer tensors are not "extra" for it.
  TinyModel c(10);
  ddl::loadCheckpoint(path, c);
  CHECK(sameBits(a, c));

  // A model-only checkpoint cannot restore an optimizer; nothing changes.
  const std::string plain = tmpPath("optim_plain.safetensors");
  ddl::saveCheckpoint(plain, a);
  TinyModel d(12);
  const TinyModel dBefore(12);
  FakeOptimizer keep = opt;
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::loadCheckpoint(plain, d, keep); }), "optimizer_step"));
  CHECK(sameBits(d, dBefore));
  CHECK(keep.m1 == opt.m1);
}

TEST_CASE("checkpoint: optimizer state mismatch leaves model and optimizer untouched", "[io][checkpoint]") {
  const std::string path = tmpPath("optim_bad.safetensors");
  TinyModel a(4);
  FakeOptimizer opt;
  opt.initState(a);
  opt.names[1] = "renamed";  // the file then holds optim.m.renamed instead of optim.m.b
  opt.t = 5;
  ddl::saveCheckpoint(path, a, opt);

  const FakeOptimizer live = checkOptimizerLoadRefused(path, "optimizer tensor \"optim.m.b\" is missing");
  CHECK(live.names[1] == "b");
}

TEST_CASE("checkpoint: an optimizer saved before its first step restores a fresh state", "[io][checkpoint]") {
  const std::string path = tmpPath("optim_empty.safetensors");
  TinyModel a(4);
  FakeOptimizer empty;
  ddl::saveCheckpoint(path, a, empty);
  TinyModel b(6);
  FakeOptimizer live;
  live.initState(b);
  live.m1[0].setConstant(1.0);
  live.t = 9;
  ddl::loadCheckpoint(path, b, live);
  CHECK(live.t == 0);
  CHECK(live.m1[0].isZero(0));
  CHECK(sameBits(a, b));
}

TEST_CASE("safetensors: free save/load of named integer and float tensors", "[io][safetensors]") {
  const std::string path = tmpPath("named.safetensors");
  std::map<std::string, MatX<std::int64_t>> ints;
  ints["idx"] = MatX<std::int64_t>(2, 3);
  ints["idx"] << -1, 2, 3, 4, 5, std::numeric_limits<std::int64_t>::min();
  ints["empty"] = MatX<std::int64_t>(0, 4);
  ddl::saveSafetensors(path, ints, {{"k", "v"}});
  const auto back = ddl::loadSafetensors<std::int64_t>(path);
  REQUIRE(back.size() == 2);
  CHECK(back.at("idx") == ints["idx"]);
  CHECK(back.at("empty").rows() == 0);
  CHECK(back.at("empty").cols() == 4);
  CHECK(ddl::readSafetensorsHeader(path).metadata.at("k") == "v");
  const std::string msg = thrownMessage<ddl::IoError>([&] { ddl::loadSafetensors<std::uint64_t>(path); });
  CHECK(contains(msg, "expected dtype U64, found I64"));
}

TEST_CASE("metrics csv: header once, quoting, append", "[io][csv]") {
  const std::string path = tmpPath("metrics.csv");
  {
    ddl::MetricsCsv csv(path, {"epoch", "loss", "note"});
    csv.row(1, 0.1, "plain");
    csv.row(2, 0.25f, "a,b \"c\"");
    CHECK(readBytes(path) == "epoch,loss,note\n1,0.1,plain\n2,0.25,\"a,b \"\"c\"\"\"\n");  // flushed per row
    CHECK(contains(thrownMessage<ddl::ValueError>([&] { csv.writeRow({"1"}); }), "got 1 fields, expected 3"));
  }
  {
    ddl::MetricsCsv csv(path, {"epoch", "loss", "note"}, /*append=*/true);
    csv.row(3, 1.0 / 3.0, "x\ny");
  }
  CHECK(readBytes(path) ==
        "epoch,loss,note\n1,0.1,plain\n2,0.25,\"a,b \"\"c\"\"\"\n3,0.3333333333333333,\"x\ny\"\n");
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::MetricsCsv(path, {"epoch", "acc"}, true); }),
                 "refusing to append"));
  {
    ddl::MetricsCsv csv(path, {"epoch", "acc"});  // no append: starts over
  }
  CHECK(readBytes(path) == "epoch,acc\n");
}

// A FIFO named metrics.csv (in an --out that is resumed) would block the read of its rows forever.
TEST_CASE("metrics csv: appending to a FIFO is refused, not waited on", "[io][csv][hostile]") {
  const std::string fifo = tmpPath("fifo.csv");
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::MetricsCsv(fifo, {"epoch"}, /*append=*/true); }),
                 fifo + ": not a regular file; refusing to append to it"));
  std::filesystem::remove(fifo);
}

TEST_CASE("metrics csv: a full disk leaves the file as it was, never half a row", "[io][csv]") {
  const std::string path = tmpPath("metrics_full.csv");
  ddl::MetricsCsv csv(path, {"epoch", "note"});
  csv.row(1, "first");
  const std::string before = readBytes(path);
  {
    rlimit old{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    const auto oldHandler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old;
    small.rlim_cur = before.size() + 10;  // the next row needs more: writes fail with EFBIG as on a full disk
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    const std::string msg =
        thrownMessage<ddl::IoError>([&] { csv.row(2, std::string(100, 'x')); });
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, oldHandler);
    CHECK(contains(msg, ddl::atomicTempPath(path)));
  }
  CHECK(readBytes(path) == before);  // not "1,first\n2,xxx" cut at the limit
  csv.row(2, "second");              // the writer goes on once there is room again
  CHECK(readBytes(path) == "epoch,note\n1,first\n2,second\n");
  {
    std::ofstream(path, std::ios::binary | std::ios::app) << "3,cut";  // an older writer's torn row
  }
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::MetricsCsv(path, {"epoch", "note"}, true); }),
                 "is incomplete"));
}

// ---------------------------------------------------------------------------------------------
// Hostile files and tensors of any rank.

namespace {
// Rewrites the header of a safetensors file: edit(json) changes it, the data bytes stay.
template <class Edit>
void rewriteHeader(const std::string& path, Edit edit) {
  const std::string bytes = readBytes(path);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  nlohmann::json j = nlohmann::json::parse(bytes.substr(8, n));
  edit(j);
  std::string text = j.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  writeBytes(path, makeFile(text, bytes.substr(8 + n)));
}

std::string nested(const std::string& open, const std::string& close, int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += open;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

std::string genericLoadFails(const std::string& name, const std::string& bytes) {
  const std::string path = tmpPath(name);
  writeBytes(path, bytes);
  return thrownMessage<ddl::IoError>([&] { ddl::loadSafetensors<double>(path, true); });
}
}  // namespace

TEST_CASE("safetensors: deeply nested JSON is refused, not recursed into", "[io][safetensors][hostile]") {
  const std::string deep = nested("[", "]", 50000);
  for (const std::string& hdr :
       {R"({"w":{"dtype":"F64","shape":)" + deep + R"(,"data_offsets":[0,48]}})",
        R"({"w":{"dtype":)" + deep + R"(,"shape":[3,2],"data_offsets":[0,48]}})",
        R"({"w":{"dtype":"F64","shape":[3,2],"data_offsets":)" + deep + "}}",
        R"({"__metadata__":{"a":)" + nested("{\"k\":", "}", 50000) + "}}"}) {
    std::string padded = hdr;
    padded.append((8 - padded.size() % 8) % 8, ' ');
    const std::string msg = genericLoadFails("deep.safetensors", makeFile(padded, std::string(48, '\0')));
    CHECK(contains(msg, "nested more than 8 levels deep"));
  }
}

TEST_CASE("safetensors: a number beyond double's range is refused, not thrown past the reader",
          "[io][safetensors][hostile]") {
  // nlohmann reports such a number as out_of_range (406), not parse_error; found by fuzz_safetensors.
  for (const std::string& number : {std::string("1e400"), std::string("-7e7777777777777"), std::string(400, '7')}) {
    for (const std::string& hdr :
         {R"({"w":{"dtype":"F64","shape":[)" + number + R"(,2],"data_offsets":[0,48]}})",
          R"({"w":{"dtype":"F64","shape":[3,2],"data_offsets":[0,48],"x":)" + number + "}}",
          R"({"__metadata__":{"a":"b"},"z":)" + number + "}"}) {
      std::string padded = hdr;
      padded.append((8 - padded.size() % 8) % 8, ' ');
      const std::string msg = genericLoadFails("bignum.safetensors", makeFile(padded, std::string(48, '\0')));
      CHECK(contains(msg, "invalid JSON header"));
      CHECK(contains(msg, "number overflow"));
    }
  }
}

TEST_CASE("safetensors: NUL bytes and padding other than spaces are refused", "[io][safetensors][hostile]") {
  const std::string good = kGoodHeader;
  // NUL padding after the JSON (the old reader accepted it).
  const std::string nulPad = loadFails("nulpad.safetensors", makeFile(good + std::string(8, '\0'), goodData()));
  CHECK(contains(nulPad, "NUL byte in the header at byte offset " + std::to_string(8 + good.size())));
  // A NUL inside the JSON would hide what follows it from some parsers.
  std::string inner = good;
  inner.insert(inner.size() - 1, std::string("\0,\"x\":1", 7));
  CHECK(contains(loadFails("nulin.safetensors", makeFile(inner, goodData())), "NUL byte in the header"));
  // Tabs and newlines are JSON whitespace, but the format pads with spaces only.
  const std::string tab = loadFails("tabpad.safetensors", makeFile(good + "\t\n", goodData()));
  CHECK(contains(tab, "header padding at byte offset " + std::to_string(8 + good.size()) + " is byte 9"));
  // Spaces are fine.
  const std::string path = tmpPath("spacepad.safetensors");
  writeBytes(path, makeFile(good + std::string(13, ' '), goodData()));
  TinyModel m(5);
  ddl::loadCheckpoint(path, m);
  CHECK(m.w.value.isZero(0));
}

TEST_CASE("safetensors: zero-element tensors with huge other extents answer at once", "[io][safetensors][hostile]") {
  const std::string path = tmpPath("zero.safetensors");
  writeBytes(path, makeFile(R"({"a":{"dtype":"F32","shape":[0,4611686018427387904],"data_offsets":[0,0]},)"
                            R"("b":{"dtype":"F32","shape":[4611686018427387904,0],"data_offsets":[0,0]},)"
                            R"("c":{"dtype":"F64","shape":[2,0,4611686018427387904,4611686018427387904],"data_offsets":[0,0]}})",
                            ""));
  CHECK(ddl::readSafetensorsHeader(path).find("a")->numel() == 0);
  CHECK(ddl::readSafetensorsHeader(path).find("c")->numel() == 0);
  const auto t = ddl::loadSafetensors<float>(path, true);
  CHECK(t.at("a").rows() == 0);
  CHECK(t.at("a").cols() == std::int64_t(1) << 62);
  CHECK(t.at("b").rows() == std::int64_t(1) << 62);
  CHECK(t.at("b").cols() == 0);
  CHECK(t.at("c").size() == 0);
  // A zero-element tensor whose other extents overflow Index is refused instead of wrapping.
  const std::string over = genericLoadFails(
      "zero_over.safetensors",
      makeFile(R"({"c":{"dtype":"F64","shape":[0,4611686018427387904,4611686018427387904],"data_offsets":[0,0]}})", ""));
  CHECK(contains(over, "does not fit a matrix"));
}

TEST_CASE("safetensors: a FIFO, a directory or a missing file is refused without blocking", "[io][safetensors][hostile]") {
  const std::string fifo = tmpPath("fifo.safetensors");
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  TinyModel m(5);
  const std::string msg = thrownMessage<ddl::IoError>([&] { ddl::loadCheckpoint(m.w.value.size() ? fifo : fifo, m); });
  CHECK(contains(msg, "not a regular file (a FIFO)"));
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::readCheckpointMetadata(fifo); }), "a FIFO"));
  std::filesystem::remove(fifo);
  const std::string dir = tmpPath("dir.safetensors");
  std::filesystem::create_directories(dir);
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::loadCheckpoint(dir, m); }), "not a regular file (a directory)"));
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::loadCheckpoint("/dev/null", m); }), "a device or special file"));
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::loadCheckpoint(tmpPath("nope.safetensors"), m); }),
                 "no such file"));
}

TEST_CASE("safetensors: tensors of rank 0, 1 and 4 are read (PyTorch biases, scalars, conv weights)", "[io][safetensors]") {
  const std::string path = tmpPath("ranks.safetensors");
  std::string data;
  auto put = [&data](double v) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, 8);
    for (int k = 0; k < 8; ++k) data += static_cast<char>((bits >> (8 * k)) & 0xFF);
  };
  for (int i = 0; i < 3; ++i) put(i + 1);     // bias [3]
  put(42);                                     // scalar []
  for (int i = 0; i < 12; ++i) put(100 + i);  // conv [2, 3, 1, 2]
  writeBytes(path, makeFile(R"({"bias":{"dtype":"F64","shape":[3],"data_offsets":[0,24]},)"
                            R"("s":{"dtype":"F64","shape":[],"data_offsets":[24,32]},)"
                            R"("conv":{"dtype":"F64","shape":[2,3,1,2],"data_offsets":[32,128]}})",
                            data));
  const auto t = ddl::loadSafetensors<double>(path);
  REQUIRE(t.at("bias").rows() == 3);
  REQUIRE(t.at("bias").cols() == 1);
  CHECK(t.at("bias")(2, 0) == 3);
  REQUIRE(t.at("s").size() == 1);
  CHECK(t.at("s")(0, 0) == 42);
  REQUIRE(t.at("conv").rows() == 2);
  REQUIRE(t.at("conv").cols() == 6);
  CHECK(t.at("conv")(0, 5) == 105);  // row-major order of [2, 3*1*2]
  CHECK(t.at("conv")(1, 0) == 106);
  ddl::SafetensorsReader r(path);
  CHECK(r.readTensor<double>("conv", {2, 3, 1, 2})(1, 5) == 111);
  CHECK(contains(thrownMessage<ddl::IoError>([&] { r.readTensor<double>("conv", {2, 3, 2, 1}); }),
                 "expected shape [2, 3, 2, 1], found [2, 3, 1, 2]"));
  CHECK(contains(thrownMessage<ddl::IoError>([&] { r.readMatrix<double>("bias"); }), "expected shape [any, any], found [3]"));
}

namespace {
// Parameters of PyTorch shapes: a bias [3] held as (3, 1), a conv weight [2, 3, 2, 2] as (2, 12).
struct ShapedModel {
  ddl::Param<float> bias{std::vector<ddl::Index>{3}, false};
  ddl::Param<float> conv{std::vector<ddl::Index>{2, 3, 2, 2}};
  explicit ShapedModel(std::uint64_t seed) {
    ddl::Rng rng(seed);
    for (auto* p : {&bias, &conv})
      for (ddl::Index i = 0; i < p->value.size(); ++i) p->value(i) = static_cast<float>(rng.normal());
  }
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    f(ddl::joinName(prefix, "bias"), bias);
    f(ddl::joinName(prefix, "conv.weight"), conv);
  }
};
}  // namespace

TEST_CASE("checkpoint: parameters are stored with their logical shape, version 1 files still load", "[io][checkpoint]") {
  const std::string path = tmpPath("shaped.safetensors");
  ShapedModel a(1);
  ddl::saveCheckpoint(path, a);
  const ddl::SafetensorsHeader h = ddl::readSafetensorsHeader(path);
  CHECK(h.find("bias")->shape == std::vector<std::int64_t>{3});
  CHECK(h.find("conv.weight")->shape == std::vector<std::int64_t>{2, 3, 2, 2});
  CHECK(h.metadata.at("format_version") == "3");
  ShapedModel b(2);
  ddl::loadCheckpoint(path, b);
  CHECK(b.bias.value == a.bias.value);
  CHECK(b.conv.value == a.conv.value);

  // Version 1 stored the bias as [3, 1] and the matrix as [2, 12]: read into the same matrices.
  const std::string old = tmpPath("shaped_v1.safetensors");
  std::filesystem::copy_file(path, old, std::filesystem::copy_options::overwrite_existing);
  rewriteHeader(old, [](nlohmann::json& j) {
    j["__metadata__"]["format_version"] = "1";
    j["bias"]["shape"] = {3, 1};
    j["conv.weight"]["shape"] = {2, 12};
  });
  ShapedModel c(3);
  ddl::loadCheckpoint(old, c);
  CHECK(c.bias.value == a.bias.value);
  CHECK(c.conv.value == a.conv.value);
  // The same [3, 1] bias in a version 2 file is a shape mismatch.
  rewriteHeader(old, [](nlohmann::json& j) { j["__metadata__"]["format_version"] = "2"; });
  ShapedModel d(4);
  const ShapedModel dBefore(4);
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::loadCheckpoint(old, d); }), "expected shape [3], found [3, 1]"));
  CHECK(d.bias.value == dBefore.bias.value);
  // A version from the future is refused by name.
  rewriteHeader(old, [](nlohmann::json& j) { j["__metadata__"]["format_version"] = "4"; });
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::loadCheckpoint(old, d); }),
                 "format_version\" must be \"1\", \"2\" or \"3\""));
  // A parameter whose shape does not describe its matrix cannot be saved.
  ShapedModel e(5);
  e.conv.shape = {2, 3, 2, 3};
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::saveCheckpoint(tmpPath("bad_shape.safetensors"), e); }),
                 "does not describe its value (2, 12)"));
}

TEST_CASE("checkpoint: an out-of-range optimizer_step is refused before anything is touched", "[io][checkpoint][hostile]") {
  const std::string path = tmpPath("optim_step.safetensors");
  TinyModel a(4);
  FakeOptimizer opt = optimizerAtStep(a, 5);
  for (auto& m : opt.m1) m.setConstant(0.25);
  for (const char* step : {"-1", "9223372036854775807", "9007199254740993"}) {
    CAPTURE(step);
    ddl::saveCheckpoint(path, a, opt);
    rewriteHeader(path, [&](nlohmann::json& j) { j["__metadata__"]["optimizer_step"] = step; });
    checkOptimizerLoadRefused(path, "optimizer_step\" must be a step count in [0, 2^53]");
  }
  ddl::saveCheckpoint(path, a, opt);
  rewriteHeader(path, [&](nlohmann::json& j) { j["__metadata__"]["epoch"] = "-3"; });
  TinyModel c(9);
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::loadCheckpoint(path, c); }), "\"epoch\" must be a count >= 0"));
}

TEST_CASE("checkpoint: NaN/Inf parameters or optimizer moments are refused with the tensor name", "[io][checkpoint][hostile]") {
  const std::string path = tmpPath("nonfinite.safetensors");
  TinyModel a(4);
  a.b.value(1) = std::numeric_limits<float>::quiet_NaN();
  ddl::saveCheckpoint(path, a);
  TinyModel b(9);
  const TinyModel bBefore(9);
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::loadCheckpoint(path, b); }),
                 "tensor \"b\" holds a non-finite value at (1, 0) = nan"));
  CHECK(sameBits(b, bBefore));

  TinyModel good(4);
  FakeOptimizer opt = optimizerAtStep(good, 3);
  opt.m2[0](2, 1) = std::numeric_limits<float>::infinity();
  ddl::saveCheckpoint(path, good, opt);
  FakeOptimizer live = optimizerAtStep(b, 1);
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::loadCheckpoint(path, b, live); }),
                 "optimizer tensor \"optim.v.w\" holds a non-finite value at (2, 1) = inf"));
  CHECK(sameBits(b, bBefore));
  CHECK(live.t == 1);
}

TEST_CASE("checkpoint: stripped optimizer tensors are refused, not restarted from zero", "[io][checkpoint][hostile]") {
  const std::string path = tmpPath("stripped.safetensors");
  TinyModel a(4);
  ddl::saveCheckpoint(path, a);  // the tensors of a model-only file: as if every "optim." tensor was removed
  TinyModel b(9);
  const TinyModel bBefore(9);
  FakeOptimizer live = optimizerAtStep(b, 1);
  for (const bool withCount : {false, true}) {
    CAPTURE(withCount);
    rewriteHeader(path, [&](nlohmann::json& j) {
      j["__metadata__"]["optimizer_step"] = "12";
      if (withCount) j["__metadata__"]["optimizer_tensors"] = "4";
    });
    const std::string msg = thrownMessage<ddl::IoError>([&] { ddl::loadCheckpoint(path, b, live); });
    CHECK(contains(msg, "the file holds 0 optimizer tensors"));
    CHECK(contains(msg, "stripped"));
    CHECK(sameBits(b, bBefore));
    CHECK(live.t == 1);
  }
}

}  // namespace test_io
