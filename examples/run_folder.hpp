#pragma once
// examples/run_folder.hpp: the --out folder of a training run, claimed before anything starts.
//
//   RunFolder folder = RunFolder::claim(out, resume, overwrite);   // held until the run ends
//
// A run never destroys another: a folder that already holds a run (checkpoint or metrics) is
// continued with --resume or replaced with --overwrite, never silently (forgetting --resume is the
// common mistake; a new numbered folder would hide it instead of saying it). run.lock holds the
// owner's pid and host and keeps a second run out of the folder while the first lives; the lock of a
// dead process on this host (SIGKILL, power loss) is taken over. Temporaries "*.ddl-tmp.<pid>" that a
// killed writer left (io/atomic_file.hpp) are removed, nothing else. A folder the claim created is
// removed again when the run leaves it empty (a start that failed on its data leaves nothing behind).
// Errors are IoError naming the folder (exit 2).
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include "ddl/core/error.hpp"
#include "ddl/io/atomic_file.hpp"

namespace ddl::example {

// What a run writes into --out: replaced together by --overwrite, so no old curve or audit sits next
// to the new metrics.
inline const std::vector<std::string>& runFiles() {
  static const std::vector<std::string> files{"checkpoint.safetensors", "metrics.csv", "curves.gp",  "curves.png",
                                              "audit.csv",              "audit.json",  "eval_audit.csv", "eval_audit.json"};
  return files;
}

// kill(pid, 0) fails with ESRCH only when no such process exists (EPERM: it exists, owned by another user).
inline bool processAlive(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

inline std::string hostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

class RunFolder {
 public:
  RunFolder() = default;  // nothing claimed (a rank other than 0, or a run that writes nothing)
  RunFolder(const RunFolder&) = delete;
  RunFolder& operator=(const RunFolder&) = delete;
  RunFolder(RunFolder&& o) noexcept
      : m_lock(std::exchange(o.m_lock, std::string())), m_created(std::exchange(o.m_created, {})) {}
  RunFolder& operator=(RunFolder&& o) noexcept {
    release();
    m_lock = std::exchange(o.m_lock, std::string());
    m_created = std::exchange(o.m_created, {});
    return *this;
  }
  ~RunFolder() { release(); }

  // Creates out if needed, takes its lock, removes dead writers' temporaries, and refuses a folder
  // that holds a run unless resuming (continue it) or overwriting (its run files are removed now).
  static RunFolder claim(const std::string& out, bool resume, bool overwrite) {
    namespace fs = std::filesystem;
    std::error_code ec;
    RunFolder folder;
    fs::path missing = fs::path(out).lexically_normal();
    if (missing.filename().empty()) missing = missing.parent_path();  // "run/" is the folder "run"
    for (fs::path p = missing; !p.empty() && !fs::exists(fs::symlink_status(p, ec)); p = p.parent_path()) {
      folder.m_created.push_back(p.string());  // deepest first: the order they are removed in
      if (p == p.parent_path()) break;
    }
    fs::create_directories(out, ec);
    if (ec || !fs::is_directory(out, ec))
      throw IoError("cannot create output folder '" + out + "': " + (ec ? ec.message() : std::string("a file is in the way")));
    folder.lock(out);
    removeDeadTemporaries(out);
    std::vector<std::string> held;
    for (const std::string& f : {std::string("checkpoint.safetensors"), std::string("metrics.csv")})
      if (fs::exists(out + "/" + f, ec)) held.push_back(f);
    if (!held.empty() && !resume) {
      if (!overwrite)
        throw IoError("--out " + out + " already holds a run (" + held[0] + (held.size() > 1 ? ", " + held[1] : "") +
                      "): continue it with --resume, replace it with --overwrite, or choose another --out");
      for (const std::string& f : runFiles())
        if (fs::remove(out + "/" + f, ec); ec)
          throw IoError("--overwrite: cannot remove " + out + "/" + f + ": " + ec.message());
    }
    return folder;
  }

  // ddl's temporaries "<name>.ddl-tmp.<pid>" (io/atomic_file.hpp) whose writer is gone; the pid of this
  // process counts as gone (it has written nothing yet). Anything else in the folder is left alone.
  static void removeDeadTemporaries(const std::string& out) {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) {
      const long pid = atomicTempWriter(e.path().filename().string());
      if (pid <= 0 || !e.is_regular_file(ec)) continue;
      if (pid == static_cast<long>(::getpid()) || !processAlive(pid)) fs::remove(e.path(), ec);
    }
  }

 private:
  // O_EXCL creation is the lock; a lock file of a dead process on this host is removed and the
  // creation tried once more (of two runs taking over at once, one creates it, the other is refused).
  void lock(const std::string& out) {
    const std::string path = out + "/run.lock";
    const std::string mine = "pid " + std::to_string(static_cast<long>(::getpid())) + " host " + hostName() + "\n";
    for (int attempt = 0; attempt < 2; ++attempt) {
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd >= 0) {
        const bool written = ::write(fd, mine.data(), mine.size()) == static_cast<ssize_t>(mine.size());
        ::close(fd);
        if (!written) {
          ::unlink(path.c_str());
          throw IoError(path + ": cannot write the lock file of --out");
        }
        m_lock = path;
        return;
      }
      if (errno != EEXIST)
        throw IoError("cannot write to output folder '" + out + "': " + std::strerror(errno));
      std::error_code ec;
      if (!std::filesystem::is_regular_file(path, ec))  // a FIFO would block the read below
        throw IoError(path + ": not a regular file; --out's lock file is created by ddl: remove it");
      std::ifstream in(path);
      std::string word, host;
      long pid = 0;
      in >> word >> pid >> word >> host;
      if (pid <= 0 || host != hostName() || processAlive(pid))
        throw IoError(path + ": another run (" + (pid > 0 ? "pid " + std::to_string(pid) + " on " + host : "unknown owner") +
                      ") is using this --out; wait for it, choose another --out, or remove the file if that run is gone");
      ::unlink(path.c_str());  // stale: its process is dead
    }
    throw IoError(path + ": another run took over the stale lock of --out at the same moment");
  }

  // Removes the lock, then the folders the claim created while they are empty (rmdir refuses a
  // folder that holds anything, so a run's files always stay).
  void release() {
    if (!m_lock.empty()) ::unlink(m_lock.c_str());
    m_lock.clear();
    for (const std::string& dir : m_created)
      if (::rmdir(dir.c_str()) != 0) break;
    m_created.clear();
  }

  std::string m_lock;                  // the lock file this process created ("" = none)
  std::vector<std::string> m_created;  // folders the claim created, deepest first
};

}  // namespace ddl::example
