#pragma once
// ddl/train/authors_weights.hpp: the tensors of one of the authors' model folders (docs/authors_models.md) as
// train/authors_model.hpp reads them: model.safetensors, or the shards a model.safetensors.index.json lists
// (each tensor in exactly the shard the index names), looked up by name and read as a matrix of float or
// double, converted from F64, F32, BF16 or F16; a weight that is not finite or beyond S's range is refused.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "ddl/core/bf16.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/json_text.hpp"
#include "ddl/core/types.hpp"
#include "ddl/io/safetensors.hpp"
#include "ddl/io/safetensors_header.hpp"
#include "ddl/train/authors_folder.hpp"

namespace ddl {
namespace detail {

inline float f16ToFloat(std::uint16_t h) {
  const int sign = (h >> 15) & 1, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double v;
  if (exponent == 0) v = std::ldexp(static_cast<double>(mantissa), -24);  // zero and subnormals
  else if (exponent == 31) v = mantissa ? std::nan("") : HUGE_VAL;
  else v = std::ldexp(static_cast<double>(mantissa | 0x400), exponent - 25);
  return static_cast<float>(sign ? -v : v);
}

// The tensors of one model folder: model.safetensors, or the shards of model.safetensors.index.json.
class AuthorsWeights {
 public:
  explicit AuthorsWeights(const std::string& dir) {
    const char* fn = "ddl::loadAuthorsModel";
    namespace fs = std::filesystem;
    const std::string single = (fs::path(dir) / "model.safetensors").string();
    const std::string index = (fs::path(dir) / "model.safetensors.index.json").string();
    std::error_code ec;
    const bool hasSingle = fs::exists(fs::symlink_status(single, ec)), hasIndex = fs::exists(fs::symlink_status(index, ec));
    if (hasSingle && hasIndex)  // which one is the model? Refused rather than guessed
      throw IoError(message(fn, dir, ": holds both model.safetensors and model.safetensors.index.json; remove the "
                            "one that is not the model"));
    if (hasSingle) {
      add(single);
      return;
    }
    if (!hasIndex)
      throw IoError(message(fn, dir, ": neither model.safetensors nor model.safetensors.index.json (a "
                            "pytorch_model.bin must be converted to safetensors first)"));
    const std::map<std::string, std::string> owner = parseAuthorsShardIndex(readAuthorsJsonFile(index, fn), index);
    std::set<std::string> files;
    for (const auto& kv : owner) files.insert(kv.second);
    for (const auto& f : files) add((fs::path(dir) / f).string());
    for (const auto& kv : m_where) {
      const auto it = owner.find(kv.first);
      const std::string& path = m_shards[kv.second.shard]->header.path;
      if (it == owner.end() || (fs::path(dir) / it->second).string() != path)
        throw IoError(message(fn, path, ": tensor \"", excerpt(kv.first), "\" is not listed for this file in ", index));
    }
    for (const auto& kv : owner)
      if (m_where.count(kv.first) == 0)
        throw IoError(message(fn, index, ": tensor \"", excerpt(kv.first), "\" is listed for ", kv.second,
                              " but missing there"));
  }

  bool has(const std::string& name) const { return m_where.count(name) != 0; }
  std::vector<std::string> names() const {  // sorted
    std::vector<std::string> out;
    for (const auto& kv : m_where) out.push_back(kv.first);
    return out;
  }
  const std::string& fileOf(const std::string& name) const { return m_shards[m_where.at(name).shard]->header.path; }
  const TensorInfo& info(const std::string& name) const {
    const Where& w = m_where.at(name);
    return m_shards[w.shard]->header.tensors[w.index];
  }

  // The tensor as a matrix of S (matrixDimsOf), converted from F64, F32, BF16 or F16.
  template <class S>
  MatX<S> read(const std::string& name) {
    const char* fn = "ddl::loadAuthorsModel";
    const Where& w = m_where.at(name);
    Shard& sh = *m_shards[w.shard];
    const TensorInfo& t = sh.header.tensors[w.index];
    if (t.dtype != DType::F64 && t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
      throw IoError(message(fn, sh.header.path, ": tensor \"", name, "\" has dtype ", dtypeName(t.dtype),
                            ", which cannot convert to a float parameter (accepted: F64, F32, BF16, F16)"));
    Index r = 0, c = 0;
    if (!matrixDimsOf(t.shape, r, c))
      throw IoError(message(fn, sh.header.path, ": tensor \"", name, "\" has a shape too large for a matrix"));
    std::vector<char> bytes(static_cast<std::size_t>(t.end - t.begin));
    sh.in.clear();
    sh.in.seekg(static_cast<std::streamoff>(sh.header.dataStart() + t.begin), std::ios::beg);
    if (!bytes.empty() && !sh.in.read(bytes.data(), static_cast<std::streamsize>(bytes.size())))
      throw IoError(message(fn, sh.header.path, ": tensor \"", name, "\": cannot read its bytes (truncated?)"));
    const std::size_t size = dtypeSize(t.dtype);
    if (!hostIsLittleEndian()) swapBytes(bytes.data(), bytes.size() / size, size);
    MatX<S> m(r, c);
    for (Index i = 0; i < r; ++i)
      for (Index j = 0; j < c; ++j) {
        const char* p = bytes.data() + static_cast<std::size_t>(i * c + j) * size;
        double v;
        if (t.dtype == DType::F64) {
          std::memcpy(&v, p, 8);
        } else if (t.dtype == DType::F32) {
          float f;
          std::memcpy(&f, p, 4);
          v = f;
        } else {
          std::uint16_t h;
          std::memcpy(&h, p, 2);
          v = t.dtype == DType::BF16 ? fromBf16(h) : f16ToFloat(h);
        }
        // A NaN or Inf weight would reach the loss at the first step and read as a learning-rate problem.
        if (!std::isfinite(v) || std::abs(v) > static_cast<double>(std::numeric_limits<S>::max()))
          throw IoError(message(fn, sh.header.path, ": tensor \"", name, "\" holds ", v, " at flat index ", i * c + j,
                                std::isfinite(v) ? std::string(", beyond the range of ") + (sizeof(S) == 4 ? "float" : "double")
                                                 : std::string(), " (a model's weights must be finite)"));
        m(i, j) = static_cast<S>(v);
      }
    return m;
  }

 private:
  struct Shard {
    std::ifstream in;
    SafetensorsHeader header;
  };
  struct Where {
    std::size_t shard, index;
  };
  void add(const std::string& path) {
    auto sh = std::make_unique<Shard>();
    sh->header = readSafetensorsHeader(path, sh->in);
    for (std::size_t i = 0; i < sh->header.tensors.size(); ++i) {
      const std::string& name = sh->header.tensors[i].name;
      if (m_where.count(name))
        throw IoError(message("ddl::loadAuthorsModel", path, ": tensor \"", name, "\" is also in ",
                              m_shards[m_where[name].shard]->header.path));
      m_where[name] = Where{m_shards.size(), i};
    }
    m_shards.push_back(std::move(sh));
  }
  std::vector<std::unique_ptr<Shard>> m_shards;
  std::map<std::string, Where> m_where;
};

}  // namespace detail
}  // namespace ddl
