#pragma once
// ddl/io/safetensors_header.hpp: the safetensors file format (https://github.com/huggingface/safetensors),
// its element types and its header, parsed and validated.
//
// Layout: 8 bytes little-endian u64 N, then N bytes of JSON (padded with spaces so that the data
// starts on an 8-byte boundary), then the raw little-endian tensor bytes. The JSON maps each tensor
// name to {"dtype": "F32", "shape": [r, c], "data_offsets": [begin, end]} (offsets relative to the
// data region) and may hold "__metadata__": {string: string}. Tensors are row-major; ddl's MatX is
// column-major, so a (r, c) matrix is written as shape [r, c] in row-major order and PyTorch sees
// the same matrix. Big-endian hosts byte-swap on the way in and out.
//
// The tensors themselves are read and written by io/safetensors.hpp.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "ddl/core/requires_json.hpp"  // before nlohmann: a clear error without it
#include <nlohmann/json.hpp>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

// The element types of the safetensors specification.
enum class DType { BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 };

inline const char* dtypeName(DType t) {
  switch (t) {
    case DType::BOOL: return "BOOL";
    case DType::U8: return "U8";
    case DType::I8: return "I8";
    case DType::F8_E5M2: return "F8_E5M2";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::I16: return "I16";
    case DType::U16: return "U16";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::U32: return "U32";
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::U64: return "U64";
  }
  return "?";
}

// Bytes per element.
inline std::size_t dtypeSize(DType t) {
  switch (t) {
    case DType::BOOL: case DType::U8: case DType::I8: case DType::F8_E5M2: case DType::F8_E4M3: return 1;
    case DType::I16: case DType::U16: case DType::F16: case DType::BF16: return 2;
    case DType::I32: case DType::U32: case DType::F32: return 4;
    case DType::F64: case DType::I64: case DType::U64: return 8;
  }
  return 0;
}

// Parses "F32" etc.; returns false for an unknown name.
inline bool dtypeFromName(const std::string& name, DType& out) {
  static const DType all[] = {DType::BOOL, DType::U8,  DType::I8,  DType::F8_E5M2, DType::F8_E4M3,
                              DType::I16,  DType::U16, DType::F16, DType::BF16,    DType::I32,
                              DType::U32,  DType::F32, DType::F64, DType::I64,     DType::U64};
  for (DType t : all) {
    if (name == dtypeName(t)) {
      out = t;
      return true;
    }
  }
  return false;
}

// DTypeOf<T>::value: the dtype that stores a C++ scalar T.
template <class T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
template <> struct DTypeOf<std::int8_t> { static constexpr DType value = DType::I8; };
template <> struct DTypeOf<std::uint8_t> { static constexpr DType value = DType::U8; };
template <> struct DTypeOf<std::int16_t> { static constexpr DType value = DType::I16; };
template <> struct DTypeOf<std::uint16_t> { static constexpr DType value = DType::U16; };
template <> struct DTypeOf<std::int32_t> { static constexpr DType value = DType::I32; };
template <> struct DTypeOf<std::uint32_t> { static constexpr DType value = DType::U32; };
template <> struct DTypeOf<std::int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<std::uint64_t> { static constexpr DType value = DType::U64; };

// One entry of the header. begin/end are relative to the start of the data region.
struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;

  // Element count; overflow-free because a validated header's tensors fit in the file (and a
  // zero extent answers 0 at once, whatever the other extents).
  std::uint64_t numel() const {
    std::uint64_t n = 1;
    for (std::int64_t s : shape)
      if (s == 0) return 0;
    for (std::int64_t s : shape) n *= static_cast<std::uint64_t>(s);
    return n;
  }
};

// "[3, 4]"
inline std::string shapeString(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A validated header: every tensor has a known dtype, a size matching its shape, and the tensors
// tile the data region exactly (sorted by offset, no gap, no overlap, nothing left over).
struct SafetensorsHeader {
  std::string path;
  std::uint64_t fileSize = 0;
  std::uint64_t headerSize = 0;           // N, the JSON length including padding
  std::vector<TensorInfo> tensors;        // sorted by data offset
  std::map<std::string, std::string> metadata;

  std::uint64_t dataStart() const { return 8 + headerSize; }  // file offset of the data region
  const TensorInfo* find(const std::string& name) const {
    for (const auto& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
};

namespace detail {

constexpr std::uint64_t kMaxSafetensorsHeader = 100u * 1000u * 1000u;  // the reference implementation's limit
constexpr int kMaxSafetensorsDepth = 8;  // JSON nesting; a valid header needs 3 (root, tensor, shape)

// A JSON value as text for a message, cut to `limit` characters.
inline std::string shortDump(const nlohmann::json& j, std::size_t limit = 120) {
  std::string s = j.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
  if (s.size() > limit) s = s.substr(0, limit) + "...";
  return s;
}

inline bool hostIsLittleEndian() {
  const std::uint16_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

// Reverses the bytes of each of `count` elements of `size` bytes (little <-> big endian).
inline void swapBytes(char* data, std::size_t count, std::size_t size) {
  if (size <= 1) return;
  for (std::size_t i = 0; i < count; ++i) std::reverse(data + i * size, data + (i + 1) * size);
}

inline std::uint64_t readU64LE(const unsigned char* b) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

inline void writeU64LE(std::uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<unsigned char>((v >> (8 * i)) & 0xFFu));
}

[[noreturn]] inline void ioFail(const std::string& fn, const std::string& path, const std::string& what) {
  throw IoError(fn + ": " + path + ": " + what);
}

// Reads a JSON array of non-negative integers; false when it is anything else.
inline bool readUnsignedArray(const nlohmann::json& j, std::vector<std::uint64_t>& out) {
  if (!j.is_array()) return false;
  out.clear();
  for (const auto& e : j) {
    if (!e.is_number_unsigned()) return false;  // negative numbers parse as integer, fractions as float
    out.push_back(e.get<std::uint64_t>());
  }
  return true;
}

}  // namespace detail

// Validates the JSON header of a file of `fileSize` bytes; `json` holds the N header bytes.
inline SafetensorsHeader parseSafetensorsHeader(const std::string& path, const std::string& json,
                                                std::uint64_t fileSize) {
  const char* fn = "ddl::parseSafetensorsHeader";
  SafetensorsHeader h;
  h.path = path;
  h.fileSize = fileSize;
  h.headerSize = json.size();
  if (h.dataStart() > fileSize)
    detail::ioFail(fn, path, "header of " + std::to_string(json.size()) + " bytes does not fit in a file of " +
                                 std::to_string(fileSize) + " bytes");
  // A NUL would end the JSON text early for some parsers and hide what follows: refuse any.
  if (const std::size_t nul = json.find('\0'); nul != std::string::npos)
    detail::ioFail(fn, path, "NUL byte in the header at byte offset " + std::to_string(8 + nul) +
                                 " (the header is JSON text padded with spaces only)");
  if (json.empty() || json[0] != '{')
    detail::ioFail(fn, path, "header at byte offset 8 must start with '{', found " +
                                 (json.empty() ? std::string("an empty header") : "byte " + std::to_string(
                                     static_cast<unsigned>(static_cast<unsigned char>(json[0])))));

  // Padding after the JSON object may only be spaces (0x20), as the format says.
  const std::size_t close = json.find_last_of('}');
  if (close != std::string::npos)
    for (std::size_t i = close + 1; i < json.size(); ++i)
      if (json[i] != ' ')
        detail::ioFail(fn, path, "header padding at byte offset " + std::to_string(8 + i) + " is byte " +
                                     std::to_string(static_cast<unsigned>(static_cast<unsigned char>(json[i]))) +
                                     ", expected spaces (0x20) only after the JSON object");

  // Duplicate keys are an error in safetensors; nlohmann would silently keep the last one.
  // Nesting deeper than any valid header (object > tensor > shape) is refused while parsing, so a
  // hostile header cannot make anything recurse deeply (dump, compare, destroy).
  struct TooDeep {
    std::size_t offset;
  };
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(
        json.begin(), json.end(),
        [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
          using E = nlohmann::json::parse_event_t;
          if (depth > detail::kMaxSafetensorsDepth) throw TooDeep{0};
          if (ev == E::object_start) keys.emplace_back();
          else if (ev == E::object_end && !keys.empty()) keys.pop_back();
          else if (ev == E::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second &&
                   duplicate.empty())
            duplicate = parsed.get<std::string>();
          return true;
        });
  } catch (const nlohmann::json::parse_error& e) {
    detail::ioFail(fn, path, "invalid JSON header at byte offset " + std::to_string(8 + e.byte - (e.byte > 0)) +
                                 ": " + e.what());
  } catch (const nlohmann::json::exception& e) {  // out_of_range 406: a number beyond double
    detail::ioFail(fn, path, std::string("invalid JSON header: ") + e.what());
  } catch (const TooDeep&) {
    detail::ioFail(fn, path, "header JSON is nested more than " + std::to_string(detail::kMaxSafetensorsDepth) +
                                 " levels deep (a valid header needs 3)");
  }
  if (!duplicate.empty()) detail::ioFail(fn, path, "duplicate key \"" + duplicate + "\" in header");
  if (!root.is_object()) detail::ioFail(fn, path, "header is not a JSON object");

  const std::uint64_t dataSize = fileSize - h.dataStart();
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) detail::ioFail(fn, path, "\"__metadata__\" must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          detail::ioFail(fn, path, "\"__metadata__\" value of \"" + m.key() + "\" must be a string, found " +
                                       m.value().type_name());
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor \"" + name + "\": ";
    if (!v.is_object()) detail::ioFail(fn, path, where + "entry must be an object, found " + v.type_name());
    for (auto f = v.begin(); f != v.end(); ++f)
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets")
        detail::ioFail(fn, path, where + "unexpected field \"" + f.key() + "\"");
    if (!v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      detail::ioFail(fn, path, where + "needs the fields dtype, shape and data_offsets");
    TensorInfo t;
    t.name = name;
    if (!v["dtype"].is_string() || !dtypeFromName(v["dtype"].get<std::string>(), t.dtype))
      detail::ioFail(fn, path, where + "unknown dtype " + detail::shortDump(v["dtype"]) +
                                   " (expected one of BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 "
                                   "F64 I64 U64)");
    std::vector<std::uint64_t> dims, offsets;
    if (!detail::readUnsignedArray(v["shape"], dims))
      detail::ioFail(fn, path, where + "shape must be an array of non-negative integers, found " +
                                   detail::shortDump(v["shape"]));
    if (!detail::readUnsignedArray(v["data_offsets"], offsets) || offsets.size() != 2)
      detail::ioFail(fn, path, where + "data_offsets must be [begin, end] with non-negative integers, found " +
                                   detail::shortDump(v["data_offsets"]));
    // Element count and byte size, refusing overflow (a hostile shape must not wrap around).
    // A zero extent makes the tensor empty whatever the others are (no loop over any extent).
    const bool empty = std::find(dims.begin(), dims.end(), std::uint64_t{0}) != dims.end();
    std::uint64_t bytes = empty ? 0 : dtypeSize(t.dtype);
    for (std::uint64_t d : dims) {
      if (d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
          (d != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / d))
        detail::ioFail(fn, path, where + "shape " + detail::shortDump(v["shape"]) + " is too large");
      bytes *= d;
      t.shape.push_back(static_cast<std::int64_t>(d));
    }
    t.begin = offsets[0];
    t.end = offsets[1];
    if (t.begin > t.end || t.end > dataSize)
      detail::ioFail(fn, path, where + "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                                   "] (file bytes " + std::to_string(h.dataStart() + t.begin) + " to " +
                                   std::to_string(h.dataStart() + t.end) +
                                   ") are out of bounds: the data region holds " + std::to_string(dataSize) +
                                   " bytes");
    if (t.end - t.begin != bytes)
      detail::ioFail(fn, path, where + "dtype " + dtypeName(t.dtype) + " and shape " + shapeString(t.shape) +
                                   " need " + std::to_string(bytes) + " bytes, but data_offsets [" +
                                   std::to_string(t.begin) + ", " + std::to_string(t.end) + "] hold " +
                                   std::to_string(t.end - t.begin));
    h.tensors.push_back(std::move(t));
  }

  // The tensors must tile the data region: sorted by offset, each starts where the previous ended.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t expected = 0;
  std::string previous;
  for (const auto& t : h.tensors) {
    if (t.begin != expected)
      detail::ioFail(fn, path, "tensor \"" + t.name + "\" starts at data offset " + std::to_string(t.begin) +
                                   " (file byte " + std::to_string(h.dataStart() + t.begin) + "), expected " +
                                   std::to_string(expected) +
                                   (t.begin > expected ? ": gap after " : ": overlaps ") +
                                   (previous.empty() ? std::string("the start of the data") : "\"" + previous + "\""));
    expected = t.end;
    previous = t.name;
  }
  if (expected != dataSize)
    detail::ioFail(fn, path, "tensors cover " + std::to_string(expected) + " bytes of the data region, but it holds " +
                                 std::to_string(dataSize) + " (file size " + std::to_string(fileSize) + ")");
  return h;
}

// Reads and validates only the header of a safetensors file.
inline SafetensorsHeader readSafetensorsHeader(const std::string& path, std::ifstream& in) {
  const char* fn = "ddl::readSafetensorsHeader";
  // Only a regular file: a FIFO would block the open (or the read) forever, a directory or a
  // device is never a checkpoint.
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) detail::ioFail(fn, path, "cannot open for reading (no such file)");
  if (!std::filesystem::is_regular_file(st))
    detail::ioFail(fn, path, std::string("not a regular file (") +
                                 (std::filesystem::is_directory(st) ? "a directory"
                                  : std::filesystem::is_fifo(st)    ? "a FIFO"
                                  : std::filesystem::is_socket(st)  ? "a socket"
                                                                    : "a device or special file") +
                                 "); a checkpoint must be a regular file");
  in.open(path, std::ios::binary);
  if (!in) detail::ioFail(fn, path, "cannot open for reading");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (size < 0) detail::ioFail(fn, path, "cannot determine the file size");
  const auto fileSize = static_cast<std::uint64_t>(size);
  if (fileSize < 8)
    detail::ioFail(fn, path, "file has " + std::to_string(fileSize) + " bytes, expected at least 8 (header length)");
  unsigned char prefix[8];
  if (!in.read(reinterpret_cast<char*>(prefix), 8)) detail::ioFail(fn, path, "cannot read bytes 0 to 8");
  const std::uint64_t n = detail::readU64LE(prefix);
  if (n > fileSize - 8 || n > detail::kMaxSafetensorsHeader)
    detail::ioFail(fn, path, "header length at byte offset 0 is " + std::to_string(n) + ", expected at most " +
                                 std::to_string(std::min<std::uint64_t>(fileSize - 8, detail::kMaxSafetensorsHeader)) +
                                 " (file size " + std::to_string(fileSize) + ")");
  std::string json(static_cast<std::size_t>(n), '\0');
  if (n > 0 && !in.read(&json[0], static_cast<std::streamsize>(n)))
    detail::ioFail(fn, path, "cannot read the header bytes 8 to " + std::to_string(8 + n));
  return parseSafetensorsHeader(path, json, fileSize);
}
inline SafetensorsHeader readSafetensorsHeader(const std::string& path) {
  std::ifstream in;
  return readSafetensorsHeader(path, in);
}

}  // namespace ddl
