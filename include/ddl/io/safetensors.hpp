#pragma once
// ddl/io/safetensors.hpp: the safetensors file format (https://github.com/huggingface/safetensors).
//
// Layout: 8 bytes little-endian u64 N, then N bytes of JSON (padded with spaces so that the data
// starts on an 8-byte boundary), then the raw little-endian tensor bytes. The JSON maps each tensor
// name to {"dtype": "F32", "shape": [r, c], "data_offsets": [begin, end]} (offsets relative to the
// data region) and may hold "__metadata__": {string: string}. Tensors are row-major; ddl's MatX is
// column-major, so a (r, c) matrix is written as shape [r, c] in row-major order and PyTorch sees
// the same matrix. Big-endian hosts byte-swap on the way in and out.
//
// This header knows nothing about models; io/checkpoint.hpp maps the parameter walk onto it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "ddl/core/requires_json.hpp"  // before nlohmann: a clear error without it
#include <nlohmann/json.hpp>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/io/atomic_file.hpp"

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

// A tensor of any rank held as a matrix, the convention of ddl::Param: shape [] -> (1, 1),
// [n] -> (n, 1), [a, b, c, ...] -> (a, b*c*...). The row-major order of the file is the row-major
// order of that matrix. Returns false when an extent product does not fit Index (a zero-element
// tensor may name huge extents).
inline bool matrixDimsOf(const std::vector<std::int64_t>& shape, Index& rows, Index& cols) {
  const auto maxIndex = static_cast<std::uint64_t>(std::numeric_limits<Index>::max());
  if (shape.empty()) {
    rows = cols = 1;
    return true;
  }
  if (static_cast<std::uint64_t>(shape[0]) > maxIndex) return false;
  std::uint64_t c = 1;
  const bool zero = std::find(shape.begin() + 1, shape.end(), std::int64_t{0}) != shape.end();
  for (std::size_t i = 1; i < shape.size() && !zero; ++i) {
    const auto e = static_cast<std::uint64_t>(shape[i]);
    if (c > maxIndex / e) return false;
    c *= e;
  }
  rows = static_cast<Index>(shape[0]);
  cols = zero ? 0 : static_cast<Index>(c);
  return true;
}

// "[any, 3]" style text of an expected shape (-1 = any extent).
inline std::string expectedShapeString(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + (shape[i] < 0 ? std::string("any") : std::to_string(shape[i]));
  return s + "]";
}

// Reads tensors out of a validated file. A tensor of any rank is read into a matrix as
// matrixDimsOf says (rank 2 [rows, cols] is the plain matrix).
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path) : m_header(readSafetensorsHeader(path, m_in)) {}

  const SafetensorsHeader& header() const { return m_header; }
  const std::string& path() const { return m_header.path; }

  // Throws IoError unless `name` exists, has `shape` (an extent < 0 matches any; rank must match)
  // and a dtype that can be read into T: exactly DTypeOf<T>, or F32/F64 into float/double when
  // allowConversion.
  template <class T>
  const TensorInfo& checkTensor(const std::string& name, const std::vector<std::int64_t>& shape,
                                bool allowConversion = false) const {
    const TensorInfo& t = find(name);
    bool shapeOk = t.shape.size() == shape.size();
    for (std::size_t i = 0; shapeOk && i < shape.size(); ++i) shapeOk = shape[i] < 0 || t.shape[i] == shape[i];
    if (!shapeOk)
      detail::ioFail(kFn, path(), where(t) + ": expected shape " + expectedShapeString(shape) + ", found " +
                                      shapeString(t.shape));
    checkDType<T>(t, allowConversion);
    return t;
  }

  // Throws IoError unless `name` has shape [rows, cols] (rows/cols < 0: any); see checkTensor.
  template <class T>
  const TensorInfo& checkMatrix(const std::string& name, Index rows = -1, Index cols = -1,
                                bool allowConversion = false) const {
    return checkTensor<T>(name, {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(cols)}, allowConversion);
  }

  // Reads a tensor of the given shape (see checkTensor) into a column-major matrix (matrixDimsOf).
  template <class T>
  MatX<T> readTensor(const std::string& name, const std::vector<std::int64_t>& shape, bool allowConversion = false) {
    return read<T>(checkTensor<T>(name, shape, allowConversion));
  }
  // Reads a tensor of any rank and shape (see matrixDimsOf for the matrix it becomes).
  template <class T>
  MatX<T> readAny(const std::string& name, bool allowConversion = false) {
    const TensorInfo& t = find(name);
    checkDType<T>(t, allowConversion);
    return read<T>(t);
  }
  // Reads a rank-2 tensor into a column-major matrix (see checkMatrix for the checks).
  template <class T>
  MatX<T> readMatrix(const std::string& name, Index rows = -1, Index cols = -1, bool allowConversion = false) {
    return read<T>(checkMatrix<T>(name, rows, cols, allowConversion));
  }

 private:
  static constexpr const char* kFn = "ddl::SafetensorsReader";

  const TensorInfo& find(const std::string& name) const {
    const TensorInfo* t = m_header.find(name);
    if (!t) detail::ioFail(kFn, path(), "tensor \"" + name + "\" is missing");
    return *t;
  }
  std::string where(const TensorInfo& t) const {
    return "tensor \"" + t.name + "\" at file byte " + std::to_string(m_header.dataStart() + t.begin);
  }
  template <class T>
  void checkDType(const TensorInfo& t, bool allowConversion) const {
    const DType want = DTypeOf<T>::value;
    const bool floats = (t.dtype == DType::F32 || t.dtype == DType::F64) && (want == DType::F32 || want == DType::F64);
    if (t.dtype != want && !(allowConversion && floats))
      detail::ioFail(kFn, path(), where(t) + ": expected dtype " + dtypeName(want) + ", found " + dtypeName(t.dtype) +
                                      (floats ? " (F32/F64 conversion is off; allow it explicitly to convert)" : ""));
  }
  template <class T>
  MatX<T> read(const TensorInfo& t) {
    Index r = 0, c = 0;
    if (!matrixDimsOf(t.shape, r, c))
      detail::ioFail(kFn, path(), where(t) + ": shape " + shapeString(t.shape) + " does not fit a matrix of Index extents");
    if (t.dtype == DType::F32) return readAs<float, T>(t, r, c);
    if (t.dtype == DType::F64) return readAs<double, T>(t, r, c);
    return readAs<T, T>(t, r, c);
  }
  template <class Stored, class T>
  MatX<T> readAs(const TensorInfo& t, Index r, Index c) {
    // A zero-element tensor is answered without touching its (possibly huge) other extent.
    if (r == 0 || c == 0) return MatX<T>(r, c);
    using RowMajor = Eigen::Matrix<Stored, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    RowMajor buf(r, c);
    const std::uint64_t bytes = t.end - t.begin;
    m_in.clear();
    m_in.seekg(static_cast<std::streamoff>(m_header.dataStart() + t.begin), std::ios::beg);
    if (bytes > 0 && !m_in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(bytes)))
      detail::ioFail(kFn, path(),
                     "tensor \"" + t.name + "\": cannot read file bytes " +
                         std::to_string(m_header.dataStart() + t.begin) + " to " +
                         std::to_string(m_header.dataStart() + t.end) + " (file changed or truncated?)");
    if (!detail::hostIsLittleEndian())
      detail::swapBytes(reinterpret_cast<char*>(buf.data()), static_cast<std::size_t>(buf.size()), sizeof(Stored));
    return buf.template cast<T>();
  }

  std::ifstream m_in;
  SafetensorsHeader m_header;
};

// Streams a safetensors file in two phases: declare every tensor (name, dtype, shape) and the
// metadata, then writeHeader() and writeMatrix() each declared tensor in declaration order.
// Streaming keeps memory flat: no copy of the model is made.
class SafetensorsWriter {
 public:
  void setMetadata(const std::map<std::string, std::string>& metadata) { m_metadata = metadata; }

  // Declares a (rows, cols) matrix of scalar T.
  template <class T>
  void declare(const std::string& name, Index rows, Index cols) {
    declare(name, DTypeOf<T>::value, {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(cols)});
  }
  void declare(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape) {
    const char* fn = "ddl::SafetensorsWriter::declare";
    require(m_written == 0 && !m_headerWritten, fn, "cannot declare \"", name, "\" after writeHeader()");
    require(!name.empty() && name != "__metadata__", fn, "invalid tensor name \"", name, "\"");
    require(m_names.insert(name).second, fn, "tensor \"", name, "\" declared twice");
    TensorInfo t;
    t.name = name;
    t.dtype = dtype;
    t.shape = shape;
    std::uint64_t bytes = dtypeSize(dtype);
    for (std::int64_t d : shape) {
      require(d >= 0, fn, "tensor \"", name, "\" has negative shape ", shapeString(shape));
      bytes *= static_cast<std::uint64_t>(d);
    }
    t.begin = m_dataSize;
    t.end = m_dataSize + bytes;
    m_dataSize = t.end;
    m_tensors.push_back(std::move(t));
  }

  const std::vector<TensorInfo>& tensors() const { return m_tensors; }

  // The length prefix plus the JSON header padded with spaces to a multiple of 8 bytes.
  std::string headerBytes() const {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    if (!m_metadata.empty()) {
      nlohmann::ordered_json meta = nlohmann::ordered_json::object();
      for (const auto& kv : m_metadata) meta[kv.first] = kv.second;
      j["__metadata__"] = std::move(meta);
    }
    for (const auto& t : m_tensors)
      j[t.name] = {{"dtype", dtypeName(t.dtype)}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
    std::string text;
    try {
      text = j.dump();
    } catch (const nlohmann::json::exception& e) {  // invalid UTF-8 in a name or value
      throw ValueError(std::string("ddl::SafetensorsWriter: cannot encode the header: ") + e.what());
    }
    text.append((8 - text.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    detail::writeU64LE(text.size(), &out[0]);
    return out + text;
  }

  void writeHeader(std::ostream& os) {
    require(!m_headerWritten, "ddl::SafetensorsWriter::writeHeader", "called twice");
    const std::string h = headerBytes();
    os.write(h.data(), static_cast<std::streamsize>(h.size()));
    if (!os) throw IoError("ddl::SafetensorsWriter::writeHeader: writing the header failed");
    m_headerWritten = true;
  }

  // Writes the next declared tensor; its name, dtype and shape must match the declaration.
  template <class Derived>
  void writeMatrix(std::ostream& os, const std::string& name, const Eigen::MatrixBase<Derived>& m) {
    using T = typename Derived::Scalar;
    const char* fn = "ddl::SafetensorsWriter::writeMatrix";
    require(m_headerWritten, fn, "writeHeader() must come first");
    require(m_written < m_tensors.size(), fn, "tensor \"", name, "\" was not declared (", m_tensors.size(),
            " declared, all written)");
    const TensorInfo& t = m_tensors[m_written];
    const std::vector<std::int64_t> shape{static_cast<std::int64_t>(m.rows()), static_cast<std::int64_t>(m.cols())};
    require(t.name == name && t.dtype == DTypeOf<T>::value && t.shape == shape, fn, "expected tensor \"", t.name,
            "\" ", dtypeName(t.dtype), " ", shapeString(t.shape), " next, found \"", name, "\" ",
            dtypeName(DTypeOf<T>::value), " ", shapeString(shape), " (did the walk change between passes?)");
    Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rowMajor = m;
    if (!detail::hostIsLittleEndian())
      detail::swapBytes(reinterpret_cast<char*>(rowMajor.data()), static_cast<std::size_t>(rowMajor.size()), sizeof(T));
    os.write(reinterpret_cast<const char*>(rowMajor.data()), static_cast<std::streamsize>(t.end - t.begin));
    if (!os) throw IoError(std::string(fn) + ": writing tensor \"" + name + "\" failed");
    ++m_written;
  }

  // Writes the next declared tensor of logical `shape` held as matrix m (rows = shape[0], cols =
  // the product of the other extents; shape [] is a (1, 1) matrix), row-major as the file wants.
  template <class Derived>
  void writeTensor(std::ostream& os, const std::string& name, const std::vector<std::int64_t>& shape,
                   const Eigen::MatrixBase<Derived>& m) {
    using T = typename Derived::Scalar;
    const char* fn = "ddl::SafetensorsWriter::writeTensor";
    require(m_headerWritten, fn, "writeHeader() must come first");
    require(m_written < m_tensors.size(), fn, "tensor \"", name, "\" was not declared (", m_tensors.size(),
            " declared, all written)");
    Index rows = 0, cols = 0;
    require(matrixDimsOf(shape, rows, cols) && rows == m.rows() && cols == m.cols(), fn, "tensor \"", name,
            "\": shape ", shapeString(shape), " does not describe a (", m.rows(), ", ", m.cols(), ") matrix");
    const TensorInfo& t = m_tensors[m_written];
    require(t.name == name && t.dtype == DTypeOf<T>::value && t.shape == shape, fn, "expected tensor \"", t.name,
            "\" ", dtypeName(t.dtype), " ", shapeString(t.shape), " next, found \"", name, "\" ",
            dtypeName(DTypeOf<T>::value), " ", shapeString(shape), " (did the walk change between passes?)");
    Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rowMajor = m;
    if (!detail::hostIsLittleEndian())
      detail::swapBytes(reinterpret_cast<char*>(rowMajor.data()), static_cast<std::size_t>(rowMajor.size()), sizeof(T));
    os.write(reinterpret_cast<const char*>(rowMajor.data()), static_cast<std::streamsize>(t.end - t.begin));
    if (!os) throw IoError(std::string(fn) + ": writing tensor \"" + name + "\" failed");
    ++m_written;
  }

  // Checks that every declared tensor was written.
  void finish() const {
    require(m_headerWritten && m_written == m_tensors.size(), "ddl::SafetensorsWriter::finish", "wrote ",
            m_written, " of ", m_tensors.size(), " declared tensors");
  }

 private:
  std::map<std::string, std::string> m_metadata;
  std::vector<TensorInfo> m_tensors;
  std::set<std::string> m_names;
  std::uint64_t m_dataSize = 0;
  std::size_t m_written = 0;
  bool m_headerWritten = false;
};

// Writes named matrices (all of scalar T) to `path` atomically, in map order.
template <class T>
void saveSafetensors(const std::string& path, const std::map<std::string, MatX<T>>& tensors,
                     const std::map<std::string, std::string>& metadata = {}) {
  SafetensorsWriter w;
  w.setMetadata(metadata);
  for (const auto& kv : tensors) w.declare<T>(kv.first, kv.second.rows(), kv.second.cols());
  writeFileAtomically(path, [&](std::ostream& os) {
    w.writeHeader(os);
    for (const auto& kv : tensors) w.writeMatrix(os, kv.first, kv.second);
    w.finish();
  });
}

// Reads every tensor of a file, of any rank, as a matrix of T (see matrixDimsOf: a rank-1 tensor
// [n] becomes (n, 1), [a, b, c] becomes (a, b*c)); the header (readSafetensorsHeader) has the shapes.
template <class T>
std::map<std::string, MatX<T>> loadSafetensors(const std::string& path, bool allowConversion = false) {
  SafetensorsReader r(path);
  std::map<std::string, MatX<T>> out;
  for (const auto& t : r.header().tensors) out[t.name] = r.readAny<T>(t.name, allowConversion);
  return out;
}

}  // namespace ddl
