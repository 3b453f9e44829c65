#pragma once
// ddl/io/atomic_file.hpp: replace a file all at once or not at all.
//
// writeFileAtomically(path, body) lets body stream into "<path>.ddl-tmp.<pid>" in the same directory,
// then flushes, fsyncs, renames over `path` and fsyncs the directory. A crash or an exception at
// any point before the rename leaves the previous file byte-identical; on failure the temporary
// is removed and an IoError names the file, the byte offset and the system's reason.
// prepareOutputFolder checks early that a folder takes new files.
// POSIX only (open/fsync/rename); ddl targets Linux and macOS.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <streambuf>
#include <string>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "ddl/core/error.hpp"

namespace ddl {
namespace detail {

inline std::string errnoText(int err) { return std::generic_category().message(err); }

// An output streambuf over a POSIX file descriptor that throws IoError (with the errno text and the
// byte offset) instead of silently setting badbit, so the caller learns why a write failed.
class FdStreamBuf : public std::streambuf {
 public:
  FdStreamBuf(int fd, std::string path) : m_fd(fd), m_path(std::move(path)), m_buf(1 << 16) {
    setp(m_buf.data(), m_buf.data() + m_buf.size());
  }
  FdStreamBuf(const FdStreamBuf&) = delete;
  FdStreamBuf& operator=(const FdStreamBuf&) = delete;

  // Writes out everything buffered; throws IoError on failure.
  void flushAll() {
    writeAll(pbase(), static_cast<std::size_t>(pptr() - pbase()));
    setp(m_buf.data(), m_buf.data() + m_buf.size());
  }
  std::uint64_t bytesWritten() const { return m_offset + static_cast<std::uint64_t>(pptr() - pbase()); }

 protected:
  int_type overflow(int_type ch) override {
    flushAll();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    if (n >= static_cast<std::streamsize>(m_buf.size())) {  // large blocks bypass the buffer
      flushAll();
      writeAll(s, static_cast<std::size_t>(n));
      return n;
    }
    return std::streambuf::xsputn(s, n);
  }
  int sync() override {
    flushAll();
    return 0;
  }

 private:
  void writeAll(const char* data, std::size_t n) {
    while (n > 0) {
      const ::ssize_t w = ::write(m_fd, data, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        throw IoError("ddl::writeFileAtomically: " + m_path + ": write failed at byte offset " +
                      std::to_string(m_offset) + ": " + errnoText(w < 0 ? errno : EIO));
      data += w;
      n -= static_cast<std::size_t>(w);
      m_offset += static_cast<std::uint64_t>(w);
    }
  }

  int m_fd;
  std::string m_path;
  std::vector<char> m_buf;
  std::uint64_t m_offset = 0;
};

inline std::string parentDirectory(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace detail

// The marker of ddl's temporaries: "<name>.ddl-tmp.<pid>", a name no other program's files take, so
// that a folder's leftovers can be told from files that merely end in ".tmp.<digits>".
inline constexpr const char* kAtomicTempMarker = ".ddl-tmp.";

// Temporary name used while writing `path` from this process.
inline std::string atomicTempPath(const std::string& path) {
  return path + kAtomicTempMarker + std::to_string(static_cast<long long>(::getpid()));
}

// The pid of the writer of a file named "<name>.ddl-tmp.<pid>" (a temporary of writeFileAtomically),
// else -1.
inline long atomicTempWriter(const std::string& fileName) {
  const std::string marker = kAtomicTempMarker;
  const std::size_t at = fileName.rfind(marker);
  if (at == std::string::npos || at == 0) return -1;
  const std::string digits = fileName.substr(at + marker.size());
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stol(digits);
}

// Creates folder (and its parents) and checks that a file can be created at `path` inside it, by
// creating and removing path's temporary name: a run learns of an unwritable output before it
// trains, not when it first saves. Throws IoError naming fn, the folder and the system's reason.
inline void prepareOutputFolder(const std::string& folder, const std::string& path, const char* fn) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) throw IoError(message(fn, "cannot create output folder '", folder, "': ", ec.message()));
  const std::string probe = atomicTempPath(path);
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(message(fn, "cannot write to output folder '", folder, "': ", detail::errnoText(errno)));
  ::close(fd);
  ::unlink(probe.c_str());
}

// Calls body(std::ostream&) to produce the new content of `path`, then replaces `path` atomically.
// Any exception from body, a failed write, fsync, close or rename removes the temporary and is
// rethrown (as IoError for system failures); the previous `path` is then untouched.
template <class Body>
void writeFileAtomically(const std::string& path, Body&& body) {
  const char* fn = "ddl::writeFileAtomically";
  const std::string tmp = atomicTempPath(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(message(fn, tmp, ": cannot create the temporary file: ", detail::errnoText(errno)));
  try {
    {
      detail::FdStreamBuf buf(fd, tmp);
      std::ostream os(&buf);
      os.exceptions(std::ios::badbit | std::ios::failbit);  // a throwing streambuf's IoError propagates
      body(os);
      buf.flushAll();
    }
    int rc = ::fsync(fd);
    while (rc != 0 && errno == EINTR) rc = ::fsync(fd);
    if (rc != 0) throw IoError(message(fn, tmp, ": fsync failed: ", detail::errnoText(errno)));
    const int closed = ::close(fd);
    fd = -1;
    if (closed != 0) throw IoError(message(fn, tmp, ": close failed: ", detail::errnoText(errno)));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw IoError(message(fn, "cannot rename ", tmp, " to ", path, ": ", detail::errnoText(errno)));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename itself durable. The new file is already in place, so a failure here only
  // means the directory entry may not survive a power loss.
  const std::string dir = detail::parentDirectory(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_CLOEXEC);
  if (dfd < 0) throw IoError(message(fn, path, ": written, but cannot open directory ", dir, " to fsync it: ",
                                     detail::errnoText(errno)));
  const int drc = ::fsync(dfd);
  const int derr = errno;
  ::close(dfd);
  if (drc != 0 && derr != EINVAL)  // some file systems do not support fsync on directories
    throw IoError(message(fn, path, ": written, but fsync of directory ", dir, " failed: ", detail::errnoText(derr)));
}

}  // namespace ddl
