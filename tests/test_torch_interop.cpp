// PyTorch interop: tools/ddl_torch.py rebuilds a DeltaNet from a ddl checkpoint (model_config metadata +
// tensors by their dotted names) and must reproduce ddl's logits on a batch, for every preset x residual
// kind x dv, in float and double, plus variants that reach the remaining options (constant value,
// every activation, larger eps_k, a compressor kernel wider than dv). The script runs under Debian's
// python3-torch with /usr/bin/python3; without it each test is reported skipped (torch_runner.hpp).
// Each batch file also carries ddl's gradients of sum(logits .* dLogits) (every parameter and the
// input), which the script compares with autograd: a second, independent check of every backward.
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/io/safetensors.hpp"
#include "ddl/nn/models/delta_net.hpp"
#include "torch_export.hpp"
#include "torch_runner.hpp"

namespace test_torch_interop {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;

using namespace torch_runner;

namespace {

struct Case {
  std::string preset;
  ddl::ResidualKind residual;
  Index dv;
  std::string variant;  // "" or one of the option variants in makeConfig
};

std::string nameOf(const Case& c) {
  return c.preset + "_" + ddl::toString(c.residual) + "_dv" + std::to_string(c.dv) +
         (c.variant.empty() ? "" : "_" + c.variant);
}

ddl::DeltaNetConfig makeConfig(const Case& k) {
  ddl::DeltaNetConfig c = ddl_test::deltaNetConfig(5, 3, 4, 2, 6, k.dv);
  c.block.residual.residual = k.residual;
  ddl::applyPreset(c, k.preset);
  c.block.residual.gateHidden = 3;
  c.block.residual.auxHidden = 2;
  c.learnedExpansion = k.dv > 1 && k.residual != ddl::ResidualKind::WriteOnly;
  ddl::DeltaResidualOptions& r = c.block.residual;
  if (k.variant == "constant_gelutanh") {
    r.value = ddl::ValueKind::Constant;
    r.valueConstant = 0.7;
    c.block.activation = ddl::Activation::GELUTanh;
  } else if (k.variant == "silu_tanh_eps") {  // v1: aux MLP with tanh, block SiLU, a large eps_k
    c.block.activation = ddl::Activation::SiLU;
    r.auxActivation = ddl::Activation::Tanh;
    r.epsK = 0.3;
    r.auxHidden = 3;
  } else if (k.variant == "relu_identity_scale") {  // v1 with sqrt_eps and a linear gate
    c.block.activation = ddl::Activation::ReLU;
    r.auxActivation = ddl::Activation::Identity;
    r.norm = ddl::DirectionNorm::SqrtEps;
    r.gate = ddl::GateKind::Linear;
    r.epsK = 0.2;
    r.value = ddl::ValueKind::SigmoidScaled;
    r.valueScale = 2.5;
  } else if (k.variant == "beta_max1") {  // the gate capped at 1, starting at the middle of its range
    r.betaMax = 1.0;
    r.beta0 = 0.5;
  } else if (k.variant == "kernel5") {  // structured CC kernel wider than dv, eps other than 1e-5
    c.block.compressorKernel = 5;
    c.block.normEps = 1e-2;
    c.finalNormEps = 0.5;
  }
  return c;
}

std::vector<Case> allCases() {
  std::vector<Case> cases;
  for (const char* preset : {"code", "paper", "v1"})
    for (auto kind : {ddl::ResidualKind::Delta, ddl::ResidualKind::WriteOnly, ddl::ResidualKind::Additive})
      for (Index dv : {1, 3}) cases.push_back({preset, kind, dv, ""});
  cases.push_back({"code", ddl::ResidualKind::Delta, 3, "constant_gelutanh"});
  cases.push_back({"code", ddl::ResidualKind::WriteOnly, 1, "constant_gelutanh"});
  cases.push_back({"v1", ddl::ResidualKind::Delta, 3, "silu_tanh_eps"});
  cases.push_back({"v1", ddl::ResidualKind::Delta, 1, "relu_identity_scale"});
  cases.push_back({"v1", ddl::ResidualKind::WriteOnly, 3, "relu_identity_scale"});
  cases.push_back({"code", ddl::ResidualKind::Delta, 4, "kernel5"});
  cases.push_back({"code", ddl::ResidualKind::Delta, 1, "beta_max1"});
  cases.push_back({"code", ddl::ResidualKind::Delta, 3, "beta_max1"});
  cases.push_back({"v1", ddl::ResidualKind::WriteOnly, 1, "beta_max1"});  // the two-layer gate
  return cases;
}

// Builds the net of `k` with random non-trivial parameters, runs it on a random batch and writes
// <name>.ck.safetensors (checkpoint) and <name>.batch.safetensors (x, logits in ddl's layout).
template <class S>
std::pair<std::string, std::string> writeCase(const Case& k, const std::string& tag, std::uint64_t seed) {
  const ddl::DeltaNetConfig cfg = makeConfig(k);
  ddl::DeltaNet<S> net(cfg, seed);
  return writeCheckFiles<S>(net, cfg.inputDim, cfg.classes, 7, seed, metaOf(cfg), tmpPath(tag + "_" + nameOf(k)),
                            [](ddl::DeltaNet<S>& n, const MatX<S>& dLogits, std::map<std::string, MatX<S>>& batch) {
                              MatX<S> dX;
                              n.backward(dLogits, &dX);
                              batch["dx"] = dX;  // the input's gradient is checked too
                            });
}

template <class S>
void checkAllCases(const std::string& tag, double tol, double gradTol) {
  checkCases(allCases(), [](const Case& k) { return nameOf(k); },
             [&](const Case& k, std::uint64_t seed) { return writeCase<S>(k, tag, seed); }, 100, tol, gradTol);
}

}  // namespace

TEST_CASE("PyTorch reproduces float DeltaNet logits (1e-5) and gradients (1e-4 rel) from a checkpoint",
          "[io][torch]") {
  DDL_REQUIRE_TORCH();
  checkAllCases<float>("f32", 1e-5, 1e-4);
}

TEST_CASE("PyTorch reproduces double DeltaNet logits (1e-12) and gradients (1e-10 rel) from a checkpoint",
          "[io][torch]") {
  DDL_REQUIRE_TORCH();
  checkAllCases<double>("f64", 1e-12, 1e-10);
}

TEST_CASE("ddl_torch.py fails on logits off by 1e-4 or a gradient off by 1e-6 or a config that does not match",
          "[io][torch]") {
  DDL_REQUIRE_TORCH();
  const Case k{"v1", ddl::ResidualKind::Delta, 3, ""};
  const auto files = writeCase<double>(k, "neg", 5);
  REQUIRE(runCommand(checkCommand({files}, 1e-5, 1e-10)) == 0);

  // Logits off by 1e-4 in one entry: the comparison must fail (exit 1).
  auto batch = ddl::loadSafetensors<double>(files.second);
  batch.at("logits")(2, 6) += 1e-4;
  const std::string tampered = tmpPath("neg_tampered.batch.safetensors");
  ddl::saveSafetensors<double>(tampered, batch);
  CHECK(runCommand(checkCommand({{files.first, tampered}}, 1e-5, 1e-10)) == 1);

  // One gradient entry off by 1e-6: the gradient comparison must fail (exit 1).
  batch = ddl::loadSafetensors<double>(files.second);
  batch.at("grad.blocks.1.delta.gate.fc2.bias")(0, 0) += 1e-6;
  ddl::saveSafetensors<double>(tampered, batch);
  CHECK(runCommand(checkCommand({{files.first, tampered}}, 1e-5, 1e-10)) == 1);

  // A model_config with one block more than the tensors: loading must refuse (exit 2).
  ddl::DeltaNetConfig cfg = makeConfig(k);
  ddl::DeltaNet<double> net(cfg, 5);
  ddl::loadCheckpoint(files.first, net);
  cfg.depth = 3;
  const std::string wrong = tmpPath("neg_depth.ck.safetensors");
  ddl::saveCheckpoint(wrong, net, metaOf(cfg));
  CHECK(runCommand(checkCommand({{wrong, files.second}}, 1e-5, 1e-10)) == 2);
}

TEST_CASE("ddl checkpoints store PyTorch shapes: biases and gains [n], weights [out, in]", "[io][torch]") {
  const Case k{"v1", ddl::ResidualKind::Delta, 3, ""};
  const auto files = writeCase<float>(k, "shapes", 11);
  const ddl::SafetensorsHeader h = ddl::readSafetensorsHeader(files.first);
  CHECK(h.find("input.bias")->shape == std::vector<std::int64_t>{4});
  CHECK(h.find("input.weight")->shape == std::vector<std::int64_t>{4, 5});
  CHECK(h.find("norm.weight")->shape == std::vector<std::int64_t>{4});
  CHECK(h.find("blocks.0.delta.gate.fc2.bias")->shape == std::vector<std::int64_t>{1});  // v1: two-layer gate
  CHECK(h.find("blocks.0.mlp.fc1.bias")->shape == std::vector<std::int64_t>{6});
  CHECK(h.find("head.weight")->shape == std::vector<std::int64_t>{3, 4});
}

TEST_CASE("ddl loads a PyTorch-written safetensors state_dict and reproduces its logits (1e-12)", "[io][torch]") {
  DDL_REQUIRE_TORCH();
  for (const Case& k : {Case{"code", ddl::ResidualKind::Delta, 1, ""}, Case{"paper", ddl::ResidualKind::Delta, 3, ""},
                        Case{"v1", ddl::ResidualKind::WriteOnly, 3, ""}, Case{"code", ddl::ResidualKind::Additive, 1, ""},
                        Case{"code", ddl::ResidualKind::Delta, 4, "kernel5"}}) {
    CAPTURE(nameOf(k));
    const ddl::DeltaNetConfig cfg = makeConfig(k);
    ddl::DeltaNet<double> net(cfg, 1);
    const auto batch = exportAndLoad(cfg, tmpPath("export_" + nameOf(k)), 4, net);
    MatX<double> logits;
    net.forward(batch.at("x"), logits);
    checkSameLogits(logits, batch.at("logits"));
  }
}

TEST_CASE("ddl loads the state_dict of a plainly written PyTorch module for every preset and gate kind",
          "[io][torch]") {
  DDL_REQUIRE_TORCH();
  const std::string script =
      (std::filesystem::path(__FILE__).parent_path() / "torch_plain_deltanet.py").string();
  for (const char* preset : {"code", "paper", "v1"}) {
    for (ddl::GateKind gate : {ddl::GateKind::Linear, ddl::GateKind::TwoLayerTanh}) {
      ddl::DeltaNetConfig cfg = ddl_test::deltaNetConfig(6, 3, 8, 2, 16);
      ddl::applyPreset(cfg, preset);
      cfg.block.residual.gate = gate;
      cfg.block.residual.gateHidden = 4;
      const std::string file = tmpPath(std::string("plain_") + preset + "_" + ddl::toString(gate) + ".safetensors");
      const std::string cmd = std::string(torch_runner::kPython) + " " + torch_runner::quoted(script) + " --preset " +
                              preset + " --gate " + ddl::toString(gate) + " --out " + torch_runner::quoted(file);
      CAPTURE(cmd);
      REQUIRE(torch_runner::runCommand(cmd) == 0);
      ddl::DeltaNet<double> net(cfg, 1);
      ddl::loadCheckpoint(file, net);  // strict: every name and shape, nothing left over
      const auto tensors = ddl::loadSafetensors<double>(file);
      net.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
        CAPTURE(name);
        const MatX<double>& t = tensors.at(name);
        REQUIRE(t.rows() == p.value.rows());
        REQUIRE(t.cols() == p.value.cols());
        CHECK(t == p.value);
      });
    }
  }
}

}  // namespace test_torch_interop
