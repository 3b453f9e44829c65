#pragma once
// examples/text_files.hpp: the text corpus as ddl-text and ddl-ablation --net lm read it: one file, or
// every regular file of a folder but fortune's *.dat indexes, in name order, read as one byte text
// and split by position (data/text_corpus.hpp); the validation figure is the first evalBytes bytes of
// the validation split (0 = all of it). Errors are ddl::IoError naming the path.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/text_corpus.hpp"

namespace ddl::example {

// Debian's fortunes package: 43 text files, 2.6 MB.
inline constexpr const char* kFortunes = "/usr/share/games/fortunes";

// The files of the corpus: one file, or every regular file of a folder but fortune's *.dat, by name.
inline std::vector<std::string> corpusFiles(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return {path};
  std::vector<std::string> files;
  for (const fs::directory_entry& e : fs::directory_iterator(path, ec))
    if (e.is_regular_file(ec) && !e.is_symlink(ec) && e.path().extension() != ".dat") files.push_back(e.path().string());
  if (ec) throw IoError(path + ": cannot list the folder: " + ec.message());
  if (files.empty()) throw IoError(path + ": the folder holds no text files");
  std::sort(files.begin(), files.end());
  return files;
}

inline TextCorpus readCorpus(const std::string& path) { return readTextCorpusFiles(corpusFiles(path)); }

// The evaluated part of a held-out split: its first evalBytes bytes (0 = all).
inline std::vector<std::uint8_t> evaluatedPrefix(const std::vector<std::uint8_t>& split, Index evalBytes) {
  const std::size_t n = evalBytes > 0 ? std::min<std::size_t>(split.size(), static_cast<std::size_t>(evalBytes)) : split.size();
  return std::vector<std::uint8_t>(split.begin(), split.begin() + static_cast<std::ptrdiff_t>(n));
}

}  // namespace ddl::example
