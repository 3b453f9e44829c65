#pragma once
// examples/text_files.hpp: the text corpus as ddl-text and ddl-ablation --net lm read it: one file, or
// every regular file of a folder but fortune's *.dat indexes, in name order, read as one byte text
// and split by position (data/text_corpus.hpp); the validation figure is the first evalBytes bytes of
// the validation split (0 = all of it). Errors are ddl::IoError naming the path. And the rule of the
// token sets (--tokens, --val-tokens, --test-tokens): no file in two of them.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/text_corpus.hpp"
#include "ddl/data/token_files.hpp"

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

// Training, validation and test tokens share no file, compared by identity (a link or another spelling
// is the same file): nanoGPT's folder of train.bin and val.bin given as --tokens would train on the
// validation tokens. sets: (option, set) pairs; ValueError naming the file and both options.
inline void requireDisjointTokenSets(const std::vector<std::pair<std::string, const TokenFiles*>>& sets) {
  for (std::size_t a = 0; a < sets.size(); ++a)
    for (std::size_t b = a + 1; b < sets.size(); ++b)
      for (const TokenFile& x : sets[a].second->files())
        for (const TokenFile& y : sets[b].second->files())
          if (x.sameFileAs(y))
            throw ValueError(sets[b].first + ": the file " + y.path() + " is also in " + sets[a].first + " (" + x.path() +
                             "): training, validation and test tokens must be different files (a folder as --tokens "
                             "takes every *.bin in it: name the training files, e.g. 'DIR/train*.bin')");
}

}  // namespace ddl::example
