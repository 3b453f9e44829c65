#pragma once
// ddl/data/token_files.hpp: pre-tokenized training data as nanoGPT and llm.c write it, read without
// loading it: windows are read from the files by offset (pread), so a 10 GB set costs the bytes of the
// windows in flight, not 10 GB of memory (docs/text_defaults.md, "Token files").
//
// Two formats of little-endian uint16 tokens, told apart by the first four bytes:
//   llm.c shard:  a header of 256 int32 (magic 20240520, version 1, token count n, the rest unused),
//                 then exactly n tokens. Version 1 is the only one llm.c's dataloader reads for this
//                 magic (uint16 tokens); other versions are refused rather than guessed.
//   nanoGPT:      the tokens alone (train.bin, val.bin: numpy uint16 .tofile()), an even size.
// A flat file whose first two tokens read as the magic (0xd888, 0x0134 = 55432, 308) is taken for a
// shard; with GPT-2's vocabulary its first token could not be valid anyway. llm.c's other magics are
// refused by name rather than read as flat tokens: 20240801 (Llama 3 shards, uint32 tokens) and
// 20240522 (evaluation files of multiple-choice examples).
//
// A set is one file, every *.bin file of a folder, or a pattern whose last component holds `*` / `?`
// ('DIR/*train*.bin'), files in name order, read as one sequence (a window may span two shards, as
// the shards of a corpus continue each other). Tokens are checked against the vocabulary where they
// are read (read(): every window, every evaluation) and, for the whole set, by scan(); a token >= the
// vocabulary throws IoError naming its file and byte offset.
//
// The files must not change while a run reads them. They are read, not memory-mapped, so that a file
// truncated under a run (a re-tokenization writing in place) is an IoError naming the file at the next
// read, never a SIGBUS: every read compares the file's size with the size it was opened with.
//
// Errors: IoError naming the function, the file and the byte offset (missing or empty set, not a
// regular file, unreadable, bad magic or version, a count that disagrees with the file size, a
// truncated header, an odd size, a token outside the vocabulary, a file that changed size since it
// was opened); ValueError for bad arguments. POSIX only (open/pread/fstat), as io/atomic_file.hpp.
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddl/core/error.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/window_sampling.hpp"

namespace ddl {

inline constexpr std::int32_t kLlmcShardMagic = 20240520;
inline constexpr std::int32_t kLlmcShardVersion = 1;
inline constexpr std::uint64_t kLlmcHeaderBytes = 256 * 4;
inline constexpr std::int32_t kLlmcLlama3Magic = 20240801;  // uint32 tokens: not read here
inline constexpr std::int32_t kLlmcEvalMagic = 20240522;    // multiple-choice examples: not training tokens

enum class TokenFileFormat { NanoGpt, LlmC };
inline const char* toString(TokenFileFormat f) { return f == TokenFileFormat::LlmC ? "llm.c shard" : "nanoGPT uint16"; }

namespace detail {

// "fn: file 'path': byte offset N: ..." (the form of data/file_bytes.hpp's fileMessage, which this
// header does not include: it would pull zlib's reader in).
template <class... Parts>
std::string tokenFileMessage(const char* fn, const std::string& path, std::uint64_t offset, const Parts&... parts) {
  return message(fn, "file '", path, "': byte offset ", offset, ": ", parts...);
}

inline std::int32_t littleEndian32(const unsigned char* p) {
  return static_cast<std::int32_t>(std::uint32_t(p[0]) | (std::uint32_t(p[1]) << 8) | (std::uint32_t(p[2]) << 16) |
                                   (std::uint32_t(p[3]) << 24));
}

// A regular file opened for reading by offset. Each read first compares the file's size with the
// size it was opened with: a file truncated, extended or rewritten in place under a run is an IoError
// naming it, never a fault or silently other data. pread() is safe from several threads.
class ReadOnlyFile {
 public:
  ReadOnlyFile(const std::string& path, const char* fn) : m_path(path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (status.type() == fs::file_type::not_found) throw IoError(message(fn, "file '", path, "': not found"));
    if (ec) throw IoError(message(fn, "file '", path, "': cannot inspect: ", ec.message()));
    if (status.type() != fs::file_type::regular)
      throw IoError(message(fn, "file '", path, "': not a regular file (a folder, device, pipe or socket)"));
    // O_NONBLOCK: a path swapped for a FIFO since the check must not wait for a writer (fstat refuses it).
    m_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (m_fd < 0) {
      const int err = errno;
      throw IoError(message(fn, "file '", path, "': cannot open for reading: ", std::strerror(err)));
    }
    struct stat st {};
    const bool statted = ::fstat(m_fd, &st) == 0;
    if (!statted || !S_ISREG(st.st_mode)) {
      const int err = errno;
      ::close(m_fd);
      throw IoError(message(fn, "file '", path, "': ", statted ? std::string("not a regular file")
                                                               : std::string("cannot read its size: ") + std::strerror(err)));
    }
    m_size = static_cast<std::uint64_t>(st.st_size);
    m_device = static_cast<std::uint64_t>(st.st_dev);
    m_inode = static_cast<std::uint64_t>(st.st_ino);
#ifdef POSIX_FADV_RANDOM
    // Windows are drawn at random positions: read-ahead would only fetch pages no window asks for.
    ::posix_fadvise(m_fd, 0, 0, POSIX_FADV_RANDOM);
#endif
  }
  ~ReadOnlyFile() { ::close(m_fd); }
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  std::uint64_t size() const { return m_size; }  // bytes, when opened
  // The file's identity: two paths (links, other spellings) of one file have the same pair.
  std::uint64_t device() const { return m_device; }
  std::uint64_t inode() const { return m_inode; }

  // dst[0, n) = bytes [offset, offset + n) (offset + n <= size()); IoError (naming fn) when the file's
  // size changed since it was opened or the read fails.
  void read(std::uint64_t offset, std::size_t n, unsigned char* dst, const char* fn) const {
    struct stat st {};
    if (::fstat(m_fd, &st) != 0) {
      const int err = errno;
      throw IoError(tokenFileMessage(fn, m_path, offset, "cannot inspect the open file: ", std::strerror(err)));
    }
    if (static_cast<std::uint64_t>(st.st_size) != m_size)
      throw IoError(tokenFileMessage(fn, m_path, offset, "the file changed size while in use: ", m_size,
                                     " bytes when opened, ", static_cast<std::uint64_t>(st.st_size),
                                     " now; token files must not be rewritten during a run (write new ones under "
                                     "another name, then start or resume the run)"));
    for (std::size_t done = 0; done < n;) {
      const ::ssize_t got = ::pread(m_fd, dst + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        const int err = got < 0 ? errno : 0;
        throw IoError(tokenFileMessage(fn, m_path, offset + done, "expected ", n - done, " more bytes, ",
                                       err != 0 ? std::string("read failed: ") + std::strerror(err)
                                                : std::string("the file ends (it shrank while in use)")));
      }
      done += static_cast<std::size_t>(got);
    }
  }

 private:
  std::string m_path;
  int m_fd = -1;
  std::uint64_t m_size = 0, m_device = 0, m_inode = 0;
};

// `*` (any run of characters) and `?` (one character) against a whole name.
inline bool wildcardMatch(const std::string& pattern, const std::string& name) {
  std::size_t p = 0, n = 0, star = std::string::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace detail

// One file of tokens, opened and checked (see the header comment).
class TokenFile {
 public:
  TokenFile(const std::string& path, const char* fn = "ddl::TokenFile")
      : m_path(path), m_file(std::make_shared<detail::ReadOnlyFile>(path, fn)) {
    const std::uint64_t size = m_file->size();
    if (size == 0) throw IoError(detail::tokenFileMessage(fn, path, 0, "expected tokens, found an empty file"));
    unsigned char p[12] = {};
    m_file->read(0, static_cast<std::size_t>(std::min<std::uint64_t>(size, sizeof p)), p, fn);
    const std::int32_t magic = size >= 4 ? detail::littleEndian32(p) : 0;
    if (magic == kLlmcLlama3Magic)
      throw IoError(detail::tokenFileMessage(fn, path, 0, "magic ", magic, ": an llm.c Llama 3 shard (uint32 tokens); ",
                                             "this reader takes uint16 tokens (magic ", kLlmcShardMagic, ")"));
    if (magic == kLlmcEvalMagic)
      throw IoError(detail::tokenFileMessage(fn, path, 0, "magic ", magic, ": an llm.c evaluation file (multiple-"
                                             "choice examples), not training tokens"));
    if (magic == kLlmcShardMagic) {
      m_format = TokenFileFormat::LlmC;
      if (size < kLlmcHeaderBytes)
        throw IoError(detail::tokenFileMessage(fn, path, size, "an llm.c shard header is ", kLlmcHeaderBytes,
                                               " bytes (256 int32), the file ends after ", size, " (truncated header)"));
      const std::int32_t version = detail::littleEndian32(p + 4), count = detail::littleEndian32(p + 8);
      if (version != kLlmcShardVersion)
        throw IoError(detail::tokenFileMessage(fn, path, 4, "llm.c shard version ", version, ", expected ",
                                               kLlmcShardVersion, " (uint16 tokens; the only version llm.c's "
                                               "dataloader reads for magic ", kLlmcShardMagic, ")"));
      const std::uint64_t stored = (size - kLlmcHeaderBytes) / 2;
      if (count <= 0 || static_cast<std::uint64_t>(count) != stored || (size - kLlmcHeaderBytes) % 2 != 0)
        throw IoError(detail::tokenFileMessage(fn, path, 8, "the header counts ", count, " tokens (", kLlmcHeaderBytes,
                                               " + 2 * ", count, " bytes), the file holds ", size, " bytes (",
                                               size - kLlmcHeaderBytes, " after the header)"));
      m_offset = kLlmcHeaderBytes;
      m_tokens = stored;
    } else {
      m_format = TokenFileFormat::NanoGpt;
      if (size % 2 != 0)
        throw IoError(detail::tokenFileMessage(fn, path, size - 1, "a file of uint16 tokens has an even size, found ",
                                               size, " bytes (neither an llm.c shard, magic ", kLlmcShardMagic,
                                               ", nor nanoGPT's flat uint16)"));
      m_tokens = size / 2;
    }
  }

  const std::string& path() const { return m_path; }
  TokenFileFormat format() const { return m_format; }
  std::uint64_t size() const { return m_tokens; }                   // tokens
  std::uint64_t dataOffset() const { return m_offset; }             // byte offset of token 0
  std::uint64_t byteOffset(std::uint64_t i) const { return m_offset + 2 * i; }
  // Whether o is this file under any path (a link, another spelling): same device and inode.
  bool sameFileAs(const TokenFile& o) const {
    return m_file->device() == o.m_file->device() && m_file->inode() == o.m_file->inode();
  }
  // dst[0, 2n) = the stored bytes of tokens [first, first + n) (first + n <= size(), little-endian);
  // IoError naming fn when the file changed size since it was opened.
  void readBytes(std::uint64_t first, std::size_t n, unsigned char* dst, const char* fn) const {
    m_file->read(byteOffset(first), 2 * n, dst, fn);
  }

 private:
  std::string m_path;
  std::shared_ptr<const detail::ReadOnlyFile> m_file;  // shared by copies and prefix() views
  TokenFileFormat m_format = TokenFileFormat::NanoGpt;
  std::uint64_t m_offset = 0, m_tokens = 0;
};

// A set of token files read as one sequence of ids in [0, vocabulary()) (see the header comment).
// Copies share the open files.
class TokenFiles {
 public:
  TokenFiles() = default;
  // paths: in order; vocab: ids must be < vocab (2 <= vocab).
  TokenFiles(const std::vector<std::string>& paths, Index vocab, const char* fn = "ddl::TokenFiles") : m_vocab(vocab) {
    require(vocab >= 2, fn, "vocab must be >= 2, got ", vocab);
    require(!paths.empty(), fn, "no token files given");
    m_starts.push_back(0);
    for (const std::string& p : paths) {
      m_files.emplace_back(p, fn);
      m_starts.push_back(m_starts.back() + m_files.back().size());
    }
    m_size = m_starts.back();
  }

  std::uint64_t size() const { return m_size; }  // tokens
  Index vocabulary() const { return m_vocab; }
  const std::vector<TokenFile>& files() const { return m_files; }
  // The first n tokens as a set of its own (the evaluated part of a validation set); n <= size().
  TokenFiles prefix(std::uint64_t n) const {
    require(n <= m_size, "ddl::TokenFiles::prefix", "n = ", n, " exceeds the set's ", m_size, " tokens");
    TokenFiles t(*this);
    t.m_size = n;
    return t;
  }

  // dst[i] = token first + i for i < n (first + n <= size()), across files; IoError naming the file and
  // byte offset of the first token >= vocabulary(), or a file that changed size since it was opened.
  void read(std::uint64_t first, std::size_t n, int* dst) const {
    require(first <= m_size && n <= m_size - first, "ddl::TokenFiles::read", "tokens [", first, ", ", first + n,
            ") exceed the set's ", m_size);
    constexpr std::size_t kPiece = 4096;  // tokens read at a time
    unsigned char buf[2 * kPiece];
    std::size_t f = fileOf(first);
    while (n > 0) {
      const TokenFile& file = m_files[f];
      const std::uint64_t i = first - m_starts[f];
      const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(std::min<std::uint64_t>(n, kPiece), file.size() - i));
      file.readBytes(i, take, buf, "ddl::TokenFiles::read");
      const unsigned char* q = buf;
      for (std::size_t k = 0; k < take; ++k, q += 2) {
        const int id = q[0] | (q[1] << 8);
        if (id >= m_vocab) badToken(file, i + k, id);
        dst[k] = id;
      }
      dst += take;
      first += take;
      n -= take;
      if (first == m_starts[f + 1]) ++f;
    }
  }

  // Every token of the set in order, checked against the vocabulary; onBytes(const unsigned char*, n)
  // sees the stored little-endian bytes of each piece (a content digest). Read in pieces of 8 MiB, so
  // scanning a set larger than memory takes 8 MiB.
  template <class OnBytes>
  void scan(OnBytes&& onBytes) const {
    constexpr std::uint64_t kPiece = std::uint64_t(1) << 22;  // tokens per piece: 8 MiB of a file
    std::vector<unsigned char> buf;
    for (std::size_t f = 0; f < m_files.size() && m_starts[f] < m_size; ++f) {
      const TokenFile& file = m_files[f];
      const std::uint64_t n = std::min(file.size(), m_size - m_starts[f]);
      for (std::uint64_t i = 0; i < n; i += kPiece) {
        const auto take = static_cast<std::size_t>(std::min(kPiece, n - i));
        buf.resize(2 * take);
        file.readBytes(i, take, buf.data(), "ddl::TokenFiles::scan");
        for (std::size_t k = 0; k < take; ++k) {
          const int id = buf[2 * k] | (buf[2 * k + 1] << 8);
          if (id >= m_vocab) badToken(file, i + k, id);
        }
        onBytes(static_cast<const unsigned char*>(buf.data()), 2 * take);
      }
    }
  }

 private:
  std::size_t fileOf(std::uint64_t token) const {
    return static_cast<std::size_t>(std::upper_bound(m_starts.begin(), m_starts.end(), token) - m_starts.begin()) - 1;
  }
  [[noreturn]] void badToken(const TokenFile& file, std::uint64_t i, int id) const {
    throw IoError(detail::tokenFileMessage("ddl::TokenFiles", file.path(), file.byteOffset(i), "token ", id,
                                           " is outside the vocabulary of ", m_vocab, " (token ", i, " of the file)"));
  }
  std::vector<TokenFile> m_files;
  std::vector<std::uint64_t> m_starts;  // token index of each file's first token, and the total
  std::uint64_t m_size = 0;
  Index m_vocab = 0;
};

// The files a set names: one file; every *.bin regular file of a folder; or every regular file whose
// name matches the last component of pattern (`*`, `?`; the folder part is literal). Name order.
// Throws IoError when nothing matches or the folder cannot be listed.
inline std::vector<std::string> tokenFilePaths(const std::string& pattern) {
  namespace fs = std::filesystem;
  const char* fn = "ddl::tokenFilePaths";
  std::error_code ec;
  const fs::path p(pattern);
  fs::path dir = p, name = "*.bin";
  const bool wild = pattern.find_first_of("*?") != std::string::npos;
  if (wild) {
    dir = p.parent_path();
    name = p.filename();
    if (dir.string().find_first_of("*?") != std::string::npos)
      throw IoError(message(fn, "'", pattern, "': wildcards only in the file name, not in the folder part"));
    if (dir.empty()) dir = ".";
  } else if (!fs::is_directory(p, ec)) {
    return {pattern};  // one file: TokenFile names it when it is missing
  }
  std::vector<std::string> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec) && detail::wildcardMatch(name.string(), it->path().filename().string()))
      files.push_back(it->path().string());
  if (ec) throw IoError(message(fn, "'", pattern, "': cannot list the folder '", dir.string(), "': ", ec.message()));
  if (files.empty())
    throw IoError(message(fn, "'", pattern, "': no file matches ", name.string(), " in the folder '", dir.string(), "'"));
  std::sort(files.begin(), files.end());
  return files;
}

// The set pattern names (tokenFilePaths), opened and checked.
inline TokenFiles openTokenFiles(const std::string& pattern, Index vocab) {
  return TokenFiles(tokenFilePaths(pattern), vocab, "ddl::openTokenFiles");
}

// B windows of T + 1 consecutive tokens of the set, drawn as drawWindows (data/text_corpus.hpp)
// draws them from bytes: window b starts at Rng(seed).below(size - T), one draw per window in order.
//   input: B*T ids, window-major; target: B*T ids, target[i] the token after input[i].
// Throws ValueError for B < 1, T < 1 or a set shorter than T + 1 tokens, IoError for a token >= vocab.
inline void drawWindows(const TokenFiles& tokens, Index B, Index T, std::uint64_t seed, std::vector<int>& input,
                        std::vector<int>& target) {
  const auto len = static_cast<std::size_t>(T);
  detail::drawWindowsOf("ddl::drawWindows", tokens.size(), "tokens", "set", B, T, seed, input, target,
                        [&](std::uint64_t start, int* in, int* next) {
                          tokens.read(start, len, in);
                          std::copy(in + 1, in + len, next);
                          tokens.read(start + len, 1, next + len - 1);
                        });
}

}  // namespace ddl
