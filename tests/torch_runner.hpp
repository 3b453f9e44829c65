#pragma once
// Runs tools/ddl_torch.py from a test: the interpreter, the script path, exit codes and the skip rule
// shared by the PyTorch interop tests. Without python3-torch a test exits with kSkipExitCode, which
// tests/CMakeLists.txt declares as SKIP_RETURN_CODE, so ctest reports it skipped (Catch2 v2 has no SKIP).
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/wait.h>
#endif

namespace torch_runner {

// The interpreter; a build may point it elsewhere (e.g. -DDDL_TEST_PYTHON="/nonexistent" shows the skip).
#ifndef DDL_TEST_PYTHON
#define DDL_TEST_PYTHON "/usr/bin/python3"
#endif
inline const char* const kPython = DDL_TEST_PYTHON;

constexpr int kSkipExitCode = 77;

// The script, found from this file's path (CMake compiles tests with absolute source paths).
inline std::string scriptPath() {
  return (std::filesystem::path(__FILE__).parent_path().parent_path() / "tools" / "ddl_torch.py").string();
}

// Exit code of a command run by std::system (-1 if it did not exit normally).
inline int runCommand(const std::string& cmd) {
  const int raw = std::system(cmd.c_str());
#if defined(WIFEXITED)
  return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
#else
  return raw;
#endif
}

inline bool torchAvailable() {
  static const bool ok = runCommand(std::string(kPython) + " -c \"import torch\" > /dev/null 2>&1") == 0;
  return ok;
}

inline std::string tmpPath(const std::string& name) { return std::string(DDL_TEST_TMPDIR) + "/torch_" + name; }

inline std::string quoted(const std::string& s) { return "\"" + s + "\""; }

// `ddl_torch.py check` over (checkpoint, batch) pairs with the logit and gradient tolerances.
inline std::string checkCommand(const std::vector<std::pair<std::string, std::string>>& files, double tol,
                                double gradTol) {
  std::ostringstream tols;  // std::to_string would print 1e-12 as 0.000000
  tols << " --tol " << tol << " --grad-tol " << gradTol;
  std::string cmd = std::string(kPython) + " " + quoted(scriptPath()) + " check" + tols.str();
  for (const auto& f : files) cmd += " --checkpoint " + quoted(f.first) + " --batch " + quoted(f.second);
  return cmd;
}

// `ddl_torch.py export`: a PyTorch-initialised net of the config file, its state_dict and a batch.
inline std::string exportCommand(const std::string& config, const std::string& state, const std::string& batch,
                                 int seed) {
  return std::string(kPython) + " " + quoted(scriptPath()) + " export --config " + quoted(config) + " --out " +
         quoted(state) + " --batch " + quoted(batch) + " --seed " + std::to_string(seed) + " > /dev/null";
}

}  // namespace torch_runner

#define DDL_REQUIRE_TORCH()                                                                              \
  do {                                                                                                   \
    if (!torch_runner::torchAvailable()) {                                                               \
      std::cerr << "SKIPPED: '" << torch_runner::kPython << " -c \"import torch\"' failed; install python3-torch\n"; \
      std::exit(torch_runner::kSkipExitCode); /* ctest: SKIP_RETURN_CODE, reported as skipped, not passed */ \
    }                                                                                                    \
  } while (0)
