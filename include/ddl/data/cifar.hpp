#pragma once
// ddl/data/cifar.hpp: the CIFAR-10 and CIFAR-100 binary formats (raw or gzip-compressed files).
// CIFAR-10 record: 1 label byte + 3072 pixel bytes (3073); CIFAR-100 record: coarse label byte +
// fine label byte + 3072 pixel bytes (3074). Pixels are three 32x32 planes R, G, B, each row-major:
// exactly ddl's CHW column layout, so a record's pixels become one column as they are.
// Checks before the images are allocated: size % record == 0 (for raw files before reading),
// at least one record, every label in range; IoError names the file, record, byte offset, expected
// and found values.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/dataset.hpp"
#include "ddl/data/file_bytes.hpp"

namespace ddl {

enum class CifarLabels { Fine, Coarse };  // CIFAR-100: 100 fine classes or 20 coarse superclasses

namespace detail {

constexpr Index kCifarPixels = 3 * 32 * 32;

struct CifarFormat {
  const char* fn;
  std::uint64_t labelBytes;  // 1 (CIFAR-10) or 2 (CIFAR-100: coarse, fine)
  int classes[2];            // label range per label byte
  const char* names[2];      // label byte names for messages
  std::uint64_t use;         // which label byte becomes Dataset::labels
  std::uint64_t recordBytes() const { return labelBytes + static_cast<std::uint64_t>(kCifarPixels); }
};

inline std::vector<std::uint8_t> readCifarFile(const std::string& path, const CifarFormat& f) {
  const std::uint64_t rec = f.recordBytes();
  ByteReader in(path, f.fn);
  auto checkSize = [&](std::uint64_t size) {
    if (size == 0)
      throw IoError(fileMessage(f.fn, path, 0, "expected at least one ", rec, "-byte record, found 0 bytes"));
    if (size % rec != 0)
      throw IoError(fileMessage(f.fn, path, size - size % rec, "expected a multiple of ", rec, " bytes (",
                                f.labelBytes, " label byte(s) + ", kCifarPixels, " pixel bytes per record), found ",
                                size, " bytes (", size / rec, " records + ", size % rec, " bytes)"));
  };
  std::vector<std::uint8_t> bytes;
  if (in.knownSize() >= 0) {
    checkSize(static_cast<std::uint64_t>(in.knownSize()));
    bytes.resize(static_cast<std::size_t>(in.knownSize()));
    in.readExact(bytes.data(), bytes.size(), "records");
  } else {
    in.readRest(bytes, std::min<std::uint64_t>(std::uint64_t(1) << 34, in.maxDataSize()));
    checkSize(bytes.size());
  }
  const std::uint64_t n = bytes.size() / rec;
  for (std::uint64_t r = 0; r < n; ++r)
    for (std::uint64_t k = 0; k < f.labelBytes; ++k) {
      const std::uint64_t off = r * rec + k;
      if (bytes[static_cast<std::size_t>(off)] >= f.classes[k])
        throw IoError(fileMessage(f.fn, path, off, "expected ", f.names[k], " < ", f.classes[k], " (record ", r,
                                  "), found ", unsigned(bytes[static_cast<std::size_t>(off)])));
    }
  return bytes;
}

template <class S>
Dataset<S> loadCifarFiles(const std::vector<std::string>& files, const CifarFormat& f, const LoadOptions& opts) {
  require(!files.empty(), f.fn, "expected at least one file, found none");
  require(opts.limit >= 0, f.fn, "limit must be >= 0, got ", opts.limit);
  const std::uint64_t rec = f.recordBytes();
  std::vector<std::vector<std::uint8_t>> parts;
  Index total = 0;
  for (const std::string& path : files) {
    if (opts.limit > 0 && total >= opts.limit) break;  // the rest is not needed
    parts.push_back(readCifarFile(path, f));
    total += static_cast<Index>(parts.back().size() / rec);
  }
  const Index keep = opts.limit > 0 ? std::min(opts.limit, total) : total;
  Dataset<S> d;
  d.shape = ImageShape{3, 32, 32};
  d.numClasses = f.classes[f.use];
  d.images.resize(kCifarPixels, keep);
  d.labels.resize(static_cast<std::size_t>(keep));
  using ByteVec = Eigen::Matrix<std::uint8_t, Eigen::Dynamic, 1>;
  Index j = 0;
  for (const auto& bytes : parts) {
    for (std::uint64_t r = 0; r < bytes.size() / rec && j < keep; ++r, ++j) {
      const std::uint8_t* p = bytes.data() + r * rec;
      d.labels[static_cast<std::size_t>(j)] = p[f.use];
      const Eigen::Map<const ByteVec> px(p + f.labelBytes, kCifarPixels);
      if (opts.scale)
        d.images.col(j) = px.template cast<S>() / S(255);
      else
        d.images.col(j) = px.template cast<S>();
    }
  }
  return d;
}

inline std::string findFileGz(const std::string& dir, const std::string& name) {
  if (isRegularFile(dir + "/" + name)) return dir + "/" + name;
  if (isRegularFile(dir + "/" + name + ".gz")) return dir + "/" + name + ".gz";
  return {};
}

// "data_batch_12.bin" / "data_batch_12.bin.gz" -> 12, anything else -> 0.
inline unsigned cifarBatchNumber(const std::string& name) {
  const std::string pre = "data_batch_";
  if (name.compare(0, pre.size(), pre) != 0) return 0;
  std::size_t i = pre.size();
  unsigned k = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && k < 100000) k = k * 10 + unsigned(name[i++] - '0');
  const std::string rest = name.substr(i);
  return (i > pre.size() && (rest == ".bin" || rest == ".bin.gz")) ? k : 0;
}

}  // namespace detail

// CIFAR-10 binary batch files in order. Result: images (3072, N) CHW, labels in [0, 10).
template <class S>
Dataset<S> loadCifar10Files(const std::vector<std::string>& files, const LoadOptions& opts = {}) {
  const detail::CifarFormat f{"ddl::loadCifar10", 1, {10, 0}, {"label", ""}, 0};
  return detail::loadCifarFiles<S>(files, f, opts);
}

// CIFAR-100 binary files in order. Result: images (3072, N) CHW, labels in [0, 100) (Fine) or
// [0, 20) (Coarse); both label bytes of every record are range-checked either way.
template <class S>
Dataset<S> loadCifar100Files(const std::vector<std::string>& files, CifarLabels which = CifarLabels::Fine,
                             const LoadOptions& opts = {}) {
  const detail::CifarFormat f{"ddl::loadCifar100", 2, {20, 100}, {"coarse label", "fine label"},
                              which == CifarLabels::Coarse ? 0u : 1u};
  return detail::loadCifarFiles<S>(files, f, opts);
}

// CIFAR-10 files of a folder (dir or dir/cifar-10-batches-bin): Train = data_batch_1..k.bin (all
// of them, numbered without gaps), Test = test_batch.bin; each raw or .gz.
inline std::vector<std::string> findCifar10Files(const std::string& dir, DataPart part) {
  const char* fn = "ddl::findCifar10Files";
  for (const std::string& d : {dir, dir + "/cifar-10-batches-bin"}) {
    if (part == DataPart::Test) {
      const std::string t = detail::findFileGz(d, "test_batch.bin");
      if (!t.empty()) return {t};
      continue;
    }
    std::error_code ec;
    std::vector<unsigned> found;
    for (std::filesystem::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec))
      if (const unsigned k = detail::cifarBatchNumber(it->path().filename().string())) found.push_back(k);
    if (found.empty()) continue;
    std::sort(found.begin(), found.end());
    found.erase(std::unique(found.begin(), found.end()), found.end());
    std::vector<std::string> files;
    for (unsigned k = 1; k <= found.back(); ++k) {
      const std::string name = "data_batch_" + std::to_string(k) + ".bin";
      const std::string p = detail::findFileGz(d, name);
      if (p.empty())
        throw IoError(message(fn, "in '", d, "': expected ", name, " (batches 1..", found.back(),
                              " without gaps), found it missing"));
      files.push_back(p);
    }
    return files;
  }
  throw IoError(message(fn, "expected ", part == DataPart::Train ? "data_batch_1.bin ..." : "test_batch.bin",
                        " in '", dir, "' or '", dir, "/cifar-10-batches-bin', found none"));
}

// CIFAR-100 file of a folder (dir or dir/cifar-100-binary): train.bin or test.bin, raw or .gz.
inline std::string findCifar100File(const std::string& dir, DataPart part) {
  const std::string name = part == DataPart::Train ? "train.bin" : "test.bin";
  for (const std::string& d : {dir, dir + "/cifar-100-binary"}) {
    const std::string p = detail::findFileGz(d, name);
    if (!p.empty()) return p;
  }
  throw IoError(message("ddl::findCifar100File", "expected ", name, " in '", dir, "' or '", dir,
                        "/cifar-100-binary', found none"));
}

template <class S>
Dataset<S> loadCifar10(const std::string& dir, DataPart part, const LoadOptions& opts = {}) {
  return loadCifar10Files<S>(findCifar10Files(dir, part), opts);
}

template <class S>
Dataset<S> loadCifar100(const std::string& dir, DataPart part, CifarLabels which = CifarLabels::Fine,
                        const LoadOptions& opts = {}) {
  return loadCifar100Files<S>({findCifar100File(dir, part)}, which, opts);
}

}  // namespace ddl
