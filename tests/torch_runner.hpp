#pragma once
// Runs tools/ddl_torch.py from a test: the interpreter, the script path, exit codes and the skip rule
// shared by the PyTorch interop tests, and the files a check reads. Without python3-torch a test exits
// with kSkipExitCode, which tests/CMakeLists.txt declares as SKIP_RETURN_CODE, so ctest reports it
// skipped (Catch2 v2 has no SKIP).
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/wait.h>
#endif

#include "catch_compat.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/io/safetensors.hpp"

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

// Perturbs every parameter of `net` by 0.5 N(0, 1), so that CC and EC weights, gains and gate biases
// are off their symmetric initial values and a wrong index or transposition shows in the logits; runs
// it on N random samples and takes the gradients of sum(logits .* dLogits) with
// backward(net, dLogits, batch) (which may add tensors such as "dx" to the batch). Writes
// <base>.ck.safetensors (the checkpoint) and <base>.batch.safetensors (x, logits, dlogits and
// grad.<name> in ddl's layout) and returns their paths.
template <class S, class Net, class Backward>
std::pair<std::string, std::string> writeCheckFiles(Net& net, ddl::Index inputDim, ddl::Index classes, ddl::Index N,
                                                    std::uint64_t seed, const ddl::CheckpointMeta& meta,
                                                    const std::string& base, Backward&& backward) {
  ddl::Rng rng(seed + 7);
  net.visitParams("", [&](const std::string&, ddl::Param<S>& p) {
    for (ddl::Index j = 0; j < p.value.cols(); ++j)
      for (ddl::Index i = 0; i < p.value.rows(); ++i) p.value(i, j) += static_cast<S>(0.5 * rng.normal());
  });
  ddl::MatX<S> X(inputDim, N), logits;
  for (ddl::Index j = 0; j < N; ++j)
    for (ddl::Index i = 0; i < inputDim; ++i) X(i, j) = static_cast<S>(rng.normal());
  net.forward(X, logits);
  REQUIRE(logits.allFinite());
  ddl::MatX<S> dLogits(classes, N);
  for (ddl::Index j = 0; j < N; ++j)
    for (ddl::Index i = 0; i < classes; ++i) dLogits(i, j) = static_cast<S>(rng.normal());
  ddl::zeroGrad(net);
  std::map<std::string, ddl::MatX<S>> batch{{"x", X}, {"logits", logits}, {"dlogits", dLogits}};
  backward(net, dLogits, batch);
  net.visitParams("", [&](const std::string& name, ddl::Param<S>& p) { batch["grad." + name] = p.grad; });
  const std::string ck = base + ".ck.safetensors", batchFile = base + ".batch.safetensors";
  ddl::saveCheckpoint(ck, net, meta);
  ddl::saveSafetensors<S>(batchFile, batch);
  return {ck, batchFile};
}

// Writes the files of every case with write(case, seed) (seeds firstSeed, firstSeed + 1, ...) and
// checks them all in one run of the script (one torch start-up).
template <class Cases, class Name, class Write>
void checkCases(const Cases& cases, Name&& nameOf, Write&& write, std::uint64_t firstSeed, double tol,
                double gradTol) {
  INFO("script " << scriptPath() << " (found from __FILE__; a relative __FILE__ would need a source-dir define)");
  REQUIRE(std::ifstream(scriptPath()).good());
  std::vector<std::pair<std::string, std::string>> files;
  std::uint64_t seed = firstSeed;
  for (const auto& k : cases) {
    CAPTURE(nameOf(k));
    files.push_back(write(k, seed++));
  }
  const std::string cmd = checkCommand(files, tol, gradTol);
  CAPTURE(cmd);
  REQUIRE(runCommand(cmd) == 0);
}

}  // namespace torch_runner

#define DDL_REQUIRE_TORCH()                                                                              \
  do {                                                                                                   \
    if (!torch_runner::torchAvailable()) {                                                               \
      std::cerr << "SKIPPED: '" << torch_runner::kPython << " -c \"import torch\"' failed; install python3-torch\n"; \
      std::exit(torch_runner::kSkipExitCode); /* ctest: SKIP_RETURN_CODE, reported as skipped, not passed */ \
    }                                                                                                    \
  } while (0)
