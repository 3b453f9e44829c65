#pragma once
// examples/file_identity.hpp: whether two paths name one file, by the file system's identity, not by
// their spelling: "a.txt", "./a.txt", a hard link and a symlink to it are one file. A program that
// writes where it reads would replace its own input (docs/runs.md), so outputs are compared with
// every input and with each other before anything is read.
//
//   sameFile("in.txt", "./in.txt")  -> true
//   sameFile("new.bin", "dir/../new.bin")  -> true (neither exists: the canonical folder + name)
#include <filesystem>
#include <string>
#include <system_error>

#include <sys/stat.h>

namespace ddl::example {

// True when a and b are one existing file (same device and inode, links followed), or when neither
// exists and both name the same entry of the same folder (the folder canonical, links followed). An
// existing file and a path that names nothing are different files.
inline bool sameFile(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  struct stat sa {}, sb {};
  const bool hasA = ::stat(a.c_str(), &sa) == 0, hasB = ::stat(b.c_str(), &sb) == 0;
  if (hasA || hasB) return hasA && hasB && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  // Neither exists yet (an output to be created): compare where each would be created.
  const auto target = [](const std::string& p) {
    std::error_code ec;
    const fs::path path(p);
    const fs::path dir = fs::weakly_canonical(fs::absolute(path, ec).parent_path(), ec);
    return (dir / path.filename()).lexically_normal();
  };
  return target(a) == target(b);
}

}  // namespace ddl::example
