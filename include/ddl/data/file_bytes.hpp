#pragma once
// ddl/data/file_bytes.hpp: reading data files as byte streams, raw or gzip-compressed.
// gzip is recognised by its magic bytes (1f 8b), never by the file name, so a renamed file still
// works; it is decompressed through zlib when ddl was built with it (DDL_WITH_ZLIB == 1) and
// refused with a clear IoError otherwise. Offsets in messages are offsets into the decompressed
// data, which is what the file formats describe.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <system_error>
#include <vector>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"

#if DDL_WITH_ZLIB
#include <zlib.h>
#endif

namespace ddl {

// Builds the IoError text "fn: file 'path': byte offset N: detail".
template <class... Parts>
std::string fileMessage(const char* fn, const std::string& path, std::uint64_t offset, const Parts&... parts) {
  return message(fn, "file '", path, "': byte offset ", offset, ": ", parts...);
}

// Deflate cannot expand more than 1032:1 (zlib's FAQ), so a gzip file of n bytes holds at most
// 1032 n bytes of data: a header that declares more is refused before anything is decompressed.
constexpr std::uint64_t kMaxDeflateRatio = 1032;

inline bool isRegularFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

// A forward-only reader over the (decompressed) bytes of one file.
class ByteReader {
 public:
  // Opens path; throws IoError when it is missing, not a regular file, unreadable, or gzip
  // without zlib. fn names the caller in messages.
  ByteReader(const std::string& path, const char* fn = "ddl::ByteReader") : m_path(path), m_fn(fn) {
    if (!isRegularFile(path)) throw IoError(message(fn, "file '", path, "': not found or not a regular file"));
    std::error_code ec;
    m_fileSize = std::filesystem::file_size(path, ec);
    if (ec) throw IoError(message(fn, "file '", path, "': cannot read its size: ", ec.message()));
    m_raw = std::fopen(path.c_str(), "rb");
    if (m_raw == nullptr) throw IoError(message(fn, "file '", path, "': cannot open for reading"));
    unsigned char head[2] = {0, 0};
    const std::size_t got = std::fread(head, 1, 2, m_raw);
    m_gzip = got == 2 && head[0] == 0x1f && head[1] == 0x8b;
    if (!m_gzip) {
      std::rewind(m_raw);
      return;
    }
    std::fclose(m_raw);
    m_raw = nullptr;
#if DDL_WITH_ZLIB
    m_gz = gzopen(path.c_str(), "rb");
    if (m_gz == nullptr) throw IoError(message(fn, "file '", path, "': cannot open as gzip"));
    gzbuffer(m_gz, 1u << 17);
#else
    throw IoError(fileMessage(fn, path, 0,
                              "gzip-compressed (found magic 1f 8b), but ddl was built without zlib "
                              "(DDL_WITH_ZLIB=0); install zlib1g-dev and rebuild, or gunzip the file"));
#endif
  }
  ~ByteReader() { close(); }
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;

  const std::string& path() const { return m_path; }
  bool gzip() const { return m_gzip; }
  // Bytes on disk (compressed size for gzip).
  std::uint64_t fileSize() const { return m_fileSize; }
  // Exact size of the data when it is known before reading (raw files), otherwise -1.
  std::int64_t knownSize() const { return m_gzip ? -1 : static_cast<std::int64_t>(m_fileSize); }
  // Upper bound of the (decompressed) data size: the file size, or kMaxDeflateRatio times it for gzip.
  std::uint64_t maxDataSize() const {
    if (!m_gzip) return m_fileSize;
    return m_fileSize > std::numeric_limits<std::uint64_t>::max() / kMaxDeflateRatio
               ? std::numeric_limits<std::uint64_t>::max()
               : m_fileSize * kMaxDeflateRatio;
  }
  // Bytes delivered so far = offset of the next byte in the (decompressed) data.
  std::uint64_t offset() const { return m_offset; }

  // Reads up to n bytes into dst; fewer only at the end of the data. Throws IoError on a read
  // error or a corrupt/truncated gzip stream.
  std::size_t read(std::uint8_t* dst, std::size_t n) {
    std::size_t total = 0;
    while (total < n) {
      const std::size_t want = std::min<std::size_t>(n - total, std::size_t(1) << 30);
      std::size_t got = 0;
      if (m_raw != nullptr) {
        got = std::fread(dst + total, 1, want, m_raw);
        if (got < want && std::ferror(m_raw))
          throw IoError(fileMessage(m_fn, m_path, m_offset + got, "read error"));
      } else {
#if DDL_WITH_ZLIB
        const int r = gzread(m_gz, dst + total, static_cast<unsigned>(want));
        if (r < 0) {
          int err = 0;
          const char* what = gzerror(m_gz, &err);
          throw IoError(fileMessage(m_fn, m_path, m_offset, "corrupt or truncated gzip data (zlib: ",
                                    what == nullptr ? "unknown error" : what, ")"));
        }
        got = static_cast<std::size_t>(r);
#endif
      }
      total += got;
      m_offset += got;
      if (got < want) break;
    }
    return total;
  }

  // Reads exactly n bytes or throws IoError "... byte offset X: expected n bytes of <what>, found m".
  void readExact(std::uint8_t* dst, std::size_t n, const char* what) {
    const std::uint64_t start = m_offset;
    const std::size_t got = read(dst, n);
    if (got != n)
      throw IoError(fileMessage(m_fn, m_path, start, "expected ", n, " bytes of ", what, ", found ", got,
                                " (file truncated)"));
  }

  // Appends the rest of the data to out, growing with the data actually present (never with a
  // declared size), and throws IoError once more than maxBytes would be needed. The capacity grows
  // geometrically but never beyond maxBytes, so memory stays within maxBytes plus one chunk.
  void readRest(std::vector<std::uint8_t>& out, std::uint64_t maxBytes) {
    const std::size_t chunk = std::size_t(1) << 20;
    for (;;) {
      const std::size_t have = out.size();
      if (out.capacity() < have + chunk && have < maxBytes)
        out.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(maxBytes, std::max<std::uint64_t>(2 * have, chunk))));
      if (have >= maxBytes) {
        std::uint8_t probe = 0;
        if (read(&probe, 1) == 1)
          throw IoError(fileMessage(m_fn, m_path, m_offset - 1, "expected the data to end after ", maxBytes,
                                    " more bytes, found more (trailing bytes)"));
        return;
      }
      const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, maxBytes - have));
      out.resize(have + want);
      const std::size_t got = read(out.data() + have, want);
      out.resize(have + got);
      if (got < want) return;
    }
  }

  // True when no byte follows the current offset (reads one byte to find out).
  bool atEnd() {
    std::uint8_t probe = 0;
    return read(&probe, 1) == 0;
  }

  void close() {
    if (m_raw != nullptr) std::fclose(m_raw);
    m_raw = nullptr;
#if DDL_WITH_ZLIB
    if (m_gz != nullptr) gzclose(m_gz);
    m_gz = nullptr;
#endif
  }

 private:
  std::string m_path;
  const char* m_fn;
  std::FILE* m_raw = nullptr;
#if DDL_WITH_ZLIB
  gzFile m_gz = nullptr;
#endif
  bool m_gzip = false;
  std::uint64_t m_fileSize = 0;
  std::uint64_t m_offset = 0;
};

// The whole (decompressed) content of a file; IoError when it holds more than maxBytes.
inline std::vector<std::uint8_t> readFileBytes(const std::string& path,
                                               std::uint64_t maxBytes = std::uint64_t(1) << 34,
                                               const char* fn = "ddl::readFileBytes") {
  ByteReader in(path, fn);
  std::vector<std::uint8_t> out;
  if (in.knownSize() >= 0) {
    const auto size = static_cast<std::uint64_t>(in.knownSize());
    if (size > maxBytes)
      throw IoError(fileMessage(fn, path, 0, "expected at most ", maxBytes, " bytes, found ", size));
    out.reserve(static_cast<std::size_t>(size));
  }
  in.readRest(out, maxBytes);
  return out;
}

namespace detail {
// a * b, or false when it overflows 64 bits.
inline bool mulNoOverflow(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return false;
  out = a * b;
  return true;
}
// Big-endian 32-bit value at p (IDX headers are big-endian on every platform).
inline std::uint32_t readBigEndian32(const std::uint8_t* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) |
         std::uint32_t(p[3]);
}
}  // namespace detail

}  // namespace ddl
