// libFuzzer target: the safetensors reader (header, any-rank tensors) and checkpoint loading into a
// small model with an optimizer (all-or-nothing: a refused load must leave both untouched).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/io/safetensors.hpp"
#include "fuzz_input.hpp"

namespace {

// Names and shapes of a tiny PyTorch-style module: a Linear [2, 3] + bias [2], a conv [2, 1, 1, 2].
struct Model {
  ddl::Param<float> weight{2, 3};
  ddl::Param<float> bias{std::vector<ddl::Index>{2}, false};
  ddl::Param<float> conv{std::vector<ddl::Index>{2, 1, 1, 2}};
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    f(ddl::joinName(prefix, "fc.weight"), weight);
    f(ddl::joinName(prefix, "fc.bias"), bias);
    f(ddl::joinName(prefix, "conv.weight"), conv);
  }
};

// The optimizer interface of io/checkpoint.hpp: one moment per parameter and a step count.
struct Optimizer {
  std::int64_t t = 7;
  std::vector<std::string> names;
  std::vector<ddl::MatX<float>> m;
  std::int64_t stepCount() const { return t; }
  void setStepCount(std::int64_t s) { t = s; }
  template <class M>
  void initState(M& model) {
    names.clear();
    m.clear();
    model.visitParams("", [&](const std::string& name, auto& p) {
      names.push_back(name);
      m.push_back(ddl::MatX<float>::Zero(p.value.rows(), p.value.cols()));
    });
  }
  template <class F>
  void visitState(F&& f) {
    for (std::size_t i = 0; i < names.size(); ++i) f("m." + names[i], m[i]);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = ddl_fuzz::tempPath("safetensors");
  ddl_fuzz::writeFile(path, data, size);
  try {
    const auto tensors = ddl::loadSafetensors<double>(path, /*allowConversion=*/true);
    for (const auto& kv : tensors)
      if (kv.second.rows() < 0 || kv.second.cols() < 0) std::abort();
  } catch (const ddl::Error&) {
  }
  try {
    (void)ddl::readCheckpointMetadata(path);
  } catch (const ddl::Error&) {
  }
  Model model;
  model.weight.value.setConstant(0.5f);
  Optimizer opt;
  opt.initState(model);
  try {
    ddl::CheckpointLoadOptions lo;
    lo.allowExtraTensors = (size & 1) != 0;
    (void)ddl::loadCheckpoint(path, model, opt, lo);
    if (opt.t < 0 || opt.t > ddl::CheckpointMeta::kMaxOptimizerStep || !model.weight.value.allFinite()) std::abort();
  } catch (const ddl::Error&) {
    // All-or-nothing: a refused load leaves model and optimizer as they were.
    if (opt.t != 7 || (model.weight.value.array() != 0.5f).any()) std::abort();
  }
  return 0;
}
