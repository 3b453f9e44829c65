// PyTorch interop of the image net: tools/ddl_torch.py rebuilds a ConvDeltaNet from a ddl checkpoint
// (model_config with "model": "conv_delta_net", tensors by name with PyTorch's shapes, conv weights
// [out, in, kh, kw]) out of torch.nn.Conv2d and the per-token modules of the MLP net, and must
// reproduce ddl's logits and every parameter gradient of sum(logits .* dLogits) (autograd against
// ddl's hand-derived backward), for each residual kind, dv in {1, 2, 3}, stem stride 1 and 2, odd
// image sizes (the ceil of a stride-2 transition) and the presets' direction sources. The other way
// round, ddl loads a PyTorch-written state_dict of a ConvDeltaNet and reproduces its logits.
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/io/safetensors.hpp"
#include "ddl/nn/models/conv_delta_net.hpp"
#include "torch_export.hpp"
#include "torch_runner.hpp"

namespace test_torch_interop_conv {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;

using namespace torch_runner;

namespace {

struct ConvCase {
  std::string preset;
  ddl::ResidualKind residual;
  Index dv;
  Index stemStride;
  std::string variant;  // "" | "structured5" (structured CC, kernel 5, learned EC) | "deep" (two blocks, no stage 2)
};

std::string nameOf(const ConvCase& c) {
  return "conv_" + c.preset + "_" + ddl::toString(c.residual) + "_dv" + std::to_string(c.dv) + "_s" +
         std::to_string(c.stemStride) + (c.variant.empty() ? "" : "_" + c.variant);
}

ddl::ConvDeltaNetConfig makeConfig(const ConvCase& k) {
  // height 5 is odd: the stride-2 steps round up
  ddl::ConvDeltaNetConfig c = ddl_test::convNetConfig(2, 5, 6, 3, {3, 4}, {1, 1}, k.dv);
  c.stemStride = k.stemStride;
  c.block.residual.residual = k.residual;
  ddl::applyPreset(c, k.preset);
  c.block.residual.gateHidden = 3;
  c.learnedExpansion = k.dv > 1;
  if (k.variant == "structured5") {
    c.block.compressor = ddl::CompressorKind::Structured;
    c.block.compressorKernel = 5;
    c.branchRatio = 2;
  } else if (k.variant == "deep") {
    c.depths = {2, 0};
    c.stemKernel = 5;
  }
  return c;
}

std::vector<ConvCase> allCases() {
  std::vector<ConvCase> cases;
  for (auto kind : {ddl::ResidualKind::Delta, ddl::ResidualKind::WriteOnly, ddl::ResidualKind::Additive})
    for (Index dv : {1, 2}) cases.push_back({"code", kind, dv, 1, ""});
  cases.push_back({"code", ddl::ResidualKind::Delta, 1, 2, ""});
  cases.push_back({"paper", ddl::ResidualKind::Delta, 2, 2, ""});
  cases.push_back({"v1", ddl::ResidualKind::Delta, 1, 1, ""});  // auxiliary direction MLP, two-layer gate
  cases.push_back({"v1", ddl::ResidualKind::WriteOnly, 2, 2, ""});
  cases.push_back({"code", ddl::ResidualKind::Delta, 3, 1, "structured5"});
  cases.push_back({"code", ddl::ResidualKind::Delta, 1, 2, "deep"});
  return cases;
}

// The net of `k`, perturbed, on a random batch of 3 images (the input needs no gradient).
template <class S>
std::pair<std::string, std::string> writeCase(const ConvCase& k, const std::string& tag, std::uint64_t seed) {
  const ddl::ConvDeltaNetConfig cfg = makeConfig(k);
  ddl::ConvDeltaNet<S> net(cfg, seed);
  return writeCheckFiles<S>(net, cfg.inputDim(), cfg.classes, 3, seed, metaOf(cfg), tmpPath(tag + "_" + nameOf(k)),
                            [](ddl::ConvDeltaNet<S>& n, const MatX<S>& dLogits, std::map<std::string, MatX<S>>&) {
                              n.backward(dLogits);
                            });
}

template <class S>
void checkAllCases(const std::string& tag, double tol, double gradTol) {
  checkCases(allCases(), [](const ConvCase& k) { return nameOf(k); },
             [&](const ConvCase& k, std::uint64_t seed) { return writeCase<S>(k, tag, seed); }, 300, tol, gradTol);
}

}  // namespace

TEST_CASE("PyTorch reproduces float ConvDeltaNet logits (1e-5) and gradients (1e-4 rel) from a checkpoint",
          "[io][torch][conv]") {
  DDL_REQUIRE_TORCH();
  checkAllCases<float>("f32", 1e-5, 1e-4);
}

TEST_CASE("PyTorch reproduces double ConvDeltaNet logits (1e-12) and gradients (1e-10 rel) from a checkpoint",
          "[io][torch][conv]") {
  DDL_REQUIRE_TORCH();
  checkAllCases<double>("f64", 1e-12, 1e-10);
}

TEST_CASE("ddl_torch.py fails on a ConvDeltaNet gradient off by 1e-6 and on a conv config with another width",
          "[io][torch][conv]") {
  DDL_REQUIRE_TORCH();
  const ConvCase k{"code", ddl::ResidualKind::Delta, 2, 2, ""};
  const auto files = writeCase<double>(k, "neg", 9);
  REQUIRE(runCommand(checkCommand({files}, 1e-12, 1e-10)) == 0);

  // One entry of a 3x3 kernel's gradient off by 1e-6: the gradient comparison must fail (exit 1).
  auto batch = ddl::loadSafetensors<double>(files.second);
  batch.at("grad.blocks.1.conv.conv2.weight")(1, 4) += 1e-6;
  const std::string tampered = tmpPath("neg_conv_tampered.batch.safetensors");
  ddl::saveSafetensors<double>(tampered, batch);
  CHECK(runCommand(checkCommand({{files.first, tampered}}, 1e-12, 1e-10)) == 1);

  // A model_config whose second stage is wider than the tensors: loading must refuse (exit 2).
  ddl::ConvDeltaNetConfig cfg = makeConfig(k);
  ddl::ConvDeltaNet<double> net(cfg, 9);
  ddl::loadCheckpoint(files.first, net);
  cfg.widths = {3, 5};
  const std::string wrong = tmpPath("neg_conv_width.ck.safetensors");
  ddl::saveCheckpoint(wrong, net, metaOf(cfg));
  CHECK(runCommand(checkCommand({{wrong, files.second}}, 1e-12, 1e-10)) == 2);
}

TEST_CASE("ConvDeltaNet checkpoints store PyTorch shapes: conv weights [out, in, kh, kw], biases [n]",
          "[io][conv]") {
  const ConvCase k{"code", ddl::ResidualKind::Delta, 2, 2, ""};
  const auto files = writeCase<float>(k, "shapes", 13);
  const ddl::SafetensorsHeader h = ddl::readSafetensorsHeader(files.first);
  CHECK(h.find("stem.weight")->shape == std::vector<std::int64_t>{3, 2, 3, 3});
  CHECK(h.find("stem.bias")->shape == std::vector<std::int64_t>{3});
  CHECK(h.find("blocks.0.conv.conv1.weight")->shape == std::vector<std::int64_t>{3, 3, 3, 3});
  CHECK(h.find("transitions.0.conv.weight")->shape == std::vector<std::int64_t>{4, 3, 3, 3});
  CHECK(h.find("blocks.1.delta.gate.bias")->shape == std::vector<std::int64_t>{1});
  CHECK(h.find("head.weight")->shape == std::vector<std::int64_t>{3, 4});
}

TEST_CASE("ddl loads a PyTorch-written ConvDeltaNet state_dict and reproduces its logits (1e-12)",
          "[io][torch][conv]") {
  DDL_REQUIRE_TORCH();
  for (const ConvCase& k : {ConvCase{"code", ddl::ResidualKind::Delta, 1, 2, ""},
                            ConvCase{"paper", ddl::ResidualKind::Delta, 2, 1, ""},
                            ConvCase{"v1", ddl::ResidualKind::WriteOnly, 2, 2, ""},
                            ConvCase{"code", ddl::ResidualKind::Additive, 1, 1, ""},
                            ConvCase{"code", ddl::ResidualKind::Delta, 3, 1, "structured5"}}) {
    CAPTURE(nameOf(k));
    const ddl::ConvDeltaNetConfig cfg = makeConfig(k);
    ddl::ConvDeltaNet<double> net(cfg, 1);
    const auto batch = exportAndLoad(cfg, tmpPath("export_" + nameOf(k)), 6, net);
    MatX<double> logits;
    net.forward(batch.at("x"), logits);
    checkSameLogits(logits, batch.at("logits"));
  }
}

}  // namespace test_torch_interop_conv
