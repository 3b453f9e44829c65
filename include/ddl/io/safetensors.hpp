#pragma once
// ddl/io/safetensors.hpp: tensors in and out of safetensors files: SafetensorsReader, SafetensorsWriter,
// saveSafetensors / loadSafetensors. The format and its header: io/safetensors_header.hpp.
//
// This header knows nothing about models; io/checkpoint.hpp maps the parameter walk onto it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ddl/core/requires_json.hpp"  // before nlohmann: a clear error without it
#include <nlohmann/json.hpp>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/io/atomic_file.hpp"
#include "ddl/io/safetensors_header.hpp"

namespace ddl {

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
    writeNext("ddl::SafetensorsWriter::writeMatrix", os, name,
              {static_cast<std::int64_t>(m.rows()), static_cast<std::int64_t>(m.cols())}, m);
  }

  // Writes the next declared tensor of logical `shape` held as matrix m (rows = shape[0], cols =
  // the product of the other extents; shape [] is a (1, 1) matrix), row-major as the file wants.
  template <class Derived>
  void writeTensor(std::ostream& os, const std::string& name, const std::vector<std::int64_t>& shape,
                   const Eigen::MatrixBase<Derived>& m) {
    writeNext("ddl::SafetensorsWriter::writeTensor", os, name, shape, m);
  }

  // Checks that every declared tensor was written.
  void finish() const {
    require(m_headerWritten && m_written == m_tensors.size(), "ddl::SafetensorsWriter::finish", "wrote ",
            m_written, " of ", m_tensors.size(), " declared tensors");
  }

 private:
  // writeMatrix and writeTensor (fn names the caller): the checks, then m row-major.
  template <class Derived>
  void writeNext(const char* fn, std::ostream& os, const std::string& name, const std::vector<std::int64_t>& shape,
                 const Eigen::MatrixBase<Derived>& m) {
    using T = typename Derived::Scalar;
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
