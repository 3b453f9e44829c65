#pragma once
// ddl/io/atomic_folder.hpp: replace a set of files in a folder all at once or not at all.
//
// replaceFolderAtomically(dir, isReplaced, write) builds the new folder as a sibling "<dir>.tmp.<pid>":
// write(tmp) writes the new set into it (each file through writeFileAtomically), every entry of the old
// folder that isReplaced(name) does not claim is carried over (a hard link, or a copy across devices),
// then the two folders swap in one rename (Linux renameat2 RENAME_EXCHANGE) and the old set is removed.
// A crash before the swap leaves `dir` as it was; after it, `dir` is the new complete set. Either way at
// most the sibling "<dir>.tmp.<pid>" is left over (the unfinished new set, or the old one), never a stray
// file inside `dir`. Where the exchange is not supported the swap is two renames (dir -> "<dir>.old.<pid>",
// tmp -> dir): a crash between them leaves the old set complete as "<dir>.old.<pid>".
// fileIdentity names a file or folder by device and inode, so that a folder is recognised under any name.
// POSIX only, as io/atomic_file.hpp.
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddl/core/error.hpp"
#include "ddl/io/atomic_file.hpp"

namespace ddl {

// "device:inode" of path (symbolic links followed), or "" when it does not exist.
inline std::string fileIdentity(const std::string& path) {
  struct ::stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  return std::to_string(static_cast<unsigned long long>(st.st_dev)) + ":" +
         std::to_string(static_cast<unsigned long long>(st.st_ino));
}

namespace detail {
inline void fsyncFolder(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);  // best effort: some file systems refuse fsync on folders
  ::close(fd);
}
// Swaps the names of two existing folders atomically; false when the system or file system cannot.
inline bool exchangeFolders(const std::string& a, const std::string& b) {
#if defined(__linux__) && defined(RENAME_EXCHANGE)
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
    throw IoError(message("ddl::replaceFolderAtomically", "cannot swap ", a, " and ", b, ": ", detail::errnoText(errno)));
#else
  (void)a;
  (void)b;
#endif
  return false;
}
}  // namespace detail

// See the header comment. dir is created when it does not exist (its parent must). isReplaced(name):
// whether an entry of the old folder belongs to the set being replaced (it is then not carried over).
// Throws IoError (nothing changed in dir) when the old folder holds a subfolder or special file that is
// not replaced (it cannot be carried), or when writing fails.
inline void replaceFolderAtomically(const std::string& dir, const std::function<bool(const std::string&)>& isReplaced,
                                    const std::function<void(const std::string&)>& write) {
  namespace fs = std::filesystem;
  const char* fn = "ddl::replaceFolderAtomically";
  std::error_code ec;
  fs::path path = fs::absolute(dir, ec).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();  // "out/" -> "out"
  std::error_code missing;  // a folder that does not exist yet is no link
  if (!ec && fs::is_symlink(fs::symlink_status(path, missing))) path = fs::canonical(path, ec);  // the folder it names
  if (ec) throw IoError(message(fn, dir, ": cannot resolve the folder: ", ec.message()));
  const bool exists = fs::exists(path, ec);
  if (exists && !fs::is_directory(path, ec)) throw IoError(message(fn, dir, ": exists and is not a folder"));
  std::vector<fs::directory_entry> carried;
  if (exists) {
    for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
      const std::string name = e.path().filename().string();
      if (isReplaced(name)) continue;
      if (!e.is_symlink(ec) && !e.is_regular_file(ec))
        throw IoError(message(fn, dir, ": holds ", name, ", a ", e.is_directory(ec) ? "folder" : "special file",
                              " that a replacement of the folder at once cannot carry over; move it out first"));
      carried.push_back(e);
    }
    if (ec) throw IoError(message(fn, dir, ": cannot list the folder: ", ec.message()));
  }
  const std::string tmp = atomicTempPath(path.string()), old = path.string() + ".old." + std::to_string(::getpid());
  fs::remove_all(tmp, ec);  // a leftover of an earlier process with this pid
  if (!fs::create_directory(tmp, ec) || ec)
    throw IoError(message(fn, "cannot create the temporary folder ", tmp, ": ", ec ? ec.message() : "it exists"));
  try {
    write(tmp);
    for (const fs::directory_entry& e : carried) {
      const fs::path to = fs::path(tmp) / e.path().filename();
      if (e.is_symlink(ec)) {
        fs::copy_symlink(e.path(), to);
      } else if (::link(e.path().c_str(), to.c_str()) != 0) {  // another device or no links: a copy
        fs::copy_file(e.path(), to);
      }
    }
    if (exists) fs::permissions(tmp, fs::status(path).permissions());
    detail::fsyncFolder(tmp);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw IoError(message(fn, dir, ": cannot carry over ", e.path1().string(), ": ", e.code().message()));
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  bool exchanged = false;
  try {
    exchanged = exists && detail::exchangeFolders(tmp, path.string());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  if (!exists) {
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      fs::remove_all(tmp, ec);
      throw IoError(message(fn, "cannot rename ", tmp, " to ", path.string(), ": ", detail::errnoText(err)));
    }
  } else if (exchanged) {
    fs::remove_all(tmp, ec);  // now the old set
  } else {
    if (::rename(path.c_str(), old.c_str()) != 0) {
      const int err = errno;
      fs::remove_all(tmp, ec);
      throw IoError(message(fn, "cannot rename ", path.string(), " to ", old, ": ", detail::errnoText(err)));
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::rename(old.c_str(), path.c_str());  // put the old set back
      fs::remove_all(tmp, ec);
      throw IoError(message(fn, "cannot rename ", tmp, " to ", path.string(), ": ", detail::errnoText(err)));
    }
    fs::remove_all(old, ec);
  }
  detail::fsyncFolder(path.parent_path().empty() ? "." : path.parent_path().string());
}

}  // namespace ddl
