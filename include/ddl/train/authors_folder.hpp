#pragma once
// ddl/train/authors_folder.hpp: the files of the authors' model folders (docs/authors_models.md) as
// train/authors_model.hpp reads and replaces them: config.json and the shard index read as bounded JSON
// (regular files only, nesting limited by core/json_text.hpp), and which files make up the model.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <system_error>

#include "ddl/core/requires_json.hpp"  // before nlohmann: a clear error without it
#include <nlohmann/json.hpp>

#include "ddl/core/error.hpp"
#include "ddl/core/json_text.hpp"

namespace ddl {

namespace detail {

// The text of a small JSON file of a model folder (config.json, the shard index): a regular file of at most
// kMaxAuthorsJsonBytes; a missing file, a folder, FIFO, device or socket is an IoError naming it (a FIFO
// would block the read forever).
inline constexpr std::uintmax_t kMaxAuthorsJsonBytes = std::uintmax_t(64) << 20;
inline std::string readAuthorsJsonFile(const std::string& path, const char* fn) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) throw IoError(message(fn, path, ": cannot open for reading"));
  if (!fs::is_regular_file(st))
    throw IoError(message(fn, path, ": not a regular file (", fs::is_directory(st) ? "a folder" : "a FIFO, device or socket",
                          ")"));
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec) throw IoError(message(fn, path, ": cannot read its size: ", ec.message()));
  if (size > kMaxAuthorsJsonBytes)
    throw IoError(message(fn, path, ": ", size, " bytes, more than the ", kMaxAuthorsJsonBytes, " a JSON file of a model "
                          "folder may have"));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(message(fn, path, ": cannot open for reading"));
  std::string text(static_cast<std::size_t>(size), '\0');
  if (size > 0 && !in.read(text.data(), static_cast<std::streamsize>(size)))
    throw IoError(message(fn, path, ": cannot read its ", size, " bytes"));
  return text;
}

// The weight_map of a shard index's text (model.safetensors.index.json, named `source` in messages): tensor
// name -> shard file name, each a plain file name inside the folder. IoError for invalid JSON (nesting
// limited, core/json_text.hpp), a weight_map that is not an object of such names.
inline std::map<std::string, std::string> parseAuthorsShardIndex(std::string_view text, const std::string& source) {
  const char* fn = "ddl::loadAuthorsModel";
  const nlohmann::json j = parseJsonText<nlohmann::json>(text, fn, source);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw IoError(message(fn, source, ": expected an object with a \"weight_map\" object"));
  std::map<std::string, std::string> owner;  // tensor -> shard file name
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    const std::string file = it.value().is_string() ? it.value().get<std::string>() : std::string();
    if (file.empty() || file.find('/') != std::string::npos || file.find('\\') != std::string::npos ||
        file == "." || file == ".." || file.find('\0') != std::string::npos || file.size() > 255)
      throw IoError(message(fn, source, ": weight_map[\"", excerpt(it.key()), "\"] = ", jsonExcerpt(it.value()),
                            ": expected a file name inside the folder"));
    owner[it.key()] = file;
  }
  return owner;
}

}  // namespace detail

// The files of a model folder that make up its model, replaced together by saveAuthorsModel: config.json,
// model.safetensors, the shard index and the shards Hugging Face names model-00001-of-00002.safetensors, and
// the pickled forms of their save_pretrained (pytorch_model.bin, its shards and index). Any other file
// (a tokenizer, a README, a ddl checkpoint) is not part of the model.
inline bool isAuthorsModelFile(const std::string& name) {
  const auto shard = [&](const std::string& prefix, const std::string& suffix) {  // prefix-NNNNN-of-NNNNN.suffix
    if (name.size() != prefix.size() + 15 + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      return false;
    const std::string mid = name.substr(prefix.size(), 15);  // "-00001-of-00002"
    for (std::size_t i = 0; i < mid.size(); ++i) {
      const bool digit = mid[i] >= '0' && mid[i] <= '9';
      if ((i == 0 && mid[i] != '-') || (i >= 6 && i <= 9 && mid[i] != "-of-"[i - 6]) || ((i >= 1 && i <= 5) || i >= 10) != digit)
        return false;
    }
    return true;
  };
  return name == "config.json" || name == "model.safetensors" || name == "model.safetensors.index.json" ||
         name == "pytorch_model.bin" || name == "pytorch_model.bin.index.json" || shard("model", ".safetensors") ||
         shard("pytorch_model", ".bin");
}

// The files of folder `dir` that make up its model (isAuthorsModelFile, and the shards its index names);
// empty when it holds none (or does not exist).
inline std::set<std::string> authorsModelFiles(const std::string& dir) {
  namespace fs = std::filesystem;
  std::set<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (isAuthorsModelFile(e.path().filename().string())) out.insert(e.path().filename().string());
  const std::string index = (fs::path(dir) / "model.safetensors.index.json").string();
  if (out.count("model.safetensors.index.json")) {
    try {  // an index that cannot be read names no further shards
      for (const auto& kv : detail::parseAuthorsShardIndex(detail::readAuthorsJsonFile(index, "ddl::saveAuthorsModel"), index))
        if (fs::exists(fs::symlink_status(fs::path(dir) / kv.second, ec))) out.insert(kv.second);
    } catch (const IoError&) {
    }
  }
  return out;
}

}  // namespace ddl
