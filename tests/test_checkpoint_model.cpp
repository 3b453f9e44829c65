// Checkpoints of whole models: metadata must not drive allocation before the tensor
// shapes confirm it, and a resume refuses what it cannot follow exactly.
#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "catch_compat.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/nn/conv_delta_net_config.hpp"
#include "ddl/nn/delta_net.hpp"
#include "ddl/train/trainer.hpp"

using ddl_test::contains;
using ddl_test::thrownMessage;

namespace {

std::string tmpPath(const std::string& name) { return std::string(DDL_TEST_TMPDIR) + "/ckmodel_" + name; }

ddl::DeltaNetConfig smallConfig() {
  ddl::DeltaNetConfig c;
  c.inputDim = 6;
  c.classes = 3;
  c.d = 4;
  c.depth = 2;
  c.dv = 2;
  c.block.hidden = 5;
  ddl::applyPreset(c, "code");
  return c;
}

// Saves a small net's tensors under a model_config of `claimed`.
std::string saveWithClaim(const std::string& name, const ddl::DeltaNetConfig& claimed,
                          const std::map<std::string, std::string>& extra = {}) {
  ddl::DeltaNet<float> net(smallConfig(), 1);
  ddl::CheckpointMeta meta;
  meta.modelConfig = ddl::configJson(claimed);
  meta.extra = extra;
  const std::string path = tmpPath(name);
  ddl::saveCheckpoint(path, net, meta);
  return path;
}

}  // namespace

TEST_CASE("configFromCheckpoint: sizes the tensors do not confirm are refused before any model is built",
          "[io][checkpoint][hostile]") {
  const ddl::DeltaNetConfig good = smallConfig();
  const std::string ok = saveWithClaim("ok.safetensors", good);
  CHECK(ddl::configJson(ddl::configFromCheckpoint(ddl::readCheckpointMetadata(ok), ok)) == ddl::configJson(good));

  ddl::DeltaNetConfig huge = good;  // the 188 KB file claiming d 4096 / hidden 16384 (a hostile header)
  huge.d = 4096;
  huge.block.hidden = 16384;
  const std::string hugePath = saveWithClaim("huge.safetensors", huge);
  const auto start = std::chrono::steady_clock::now();
  const std::string msg = thrownMessage<ddl::IoError>(
      [&] { ddl::configFromCheckpoint(ddl::readCheckpointMetadata(hugePath), hugePath); });
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK(contains(msg, "model_config implies tensor \"input.weight\" [4096, 6], the file holds [4, 6]"));

  auto refused = [&](const std::string& name, const ddl::DeltaNetConfig& claim, const std::string& what) {
    CAPTURE(name);
    const std::string path = saveWithClaim(name, claim);
    const std::string m =
        thrownMessage<ddl::IoError>([&] { ddl::configFromCheckpoint(ddl::readCheckpointMetadata(path), path); });
    CHECK(contains(m, what));
  };
  ddl::DeltaNetConfig c = good;
  c.inputDim = 1000000;
  refused("input.safetensors", c, "\"input.weight\" [4, 1000000]");
  c = good;
  c.block.hidden = 1 << 20;
  refused("hidden.safetensors", c, "\"blocks.0.mlp.fc1.weight\" [1048576, 4]");
  c = good;
  c.classes = 1 << 16;
  refused("classes.safetensors", c, "\"head.weight\" [65536, 4]");
  c = good;
  c.depth = 1000;
  refused("deep.safetensors", c, "\"blocks.2.mlp.fc1.weight\" [5, 4], the file has none");
  c = good;
  c.depth = 1;
  refused("shallow.safetensors", c, "holds \"blocks.1.norm.weight\", but model_config has depth 1");
  c = good;
  c.dv = 1000;
  refused("dv.safetensors", c, "\"readout.read.weight\" [1000]");
  c = good;
  c.block.compressorKernel = 100001;
  refused("kernel.safetensors", c, "\"blocks.0.compress.conv.weight\" [100001]");
}

TEST_CASE("configFromCheckpoint: a ConvDeltaNet config is checked against the stem, stages and head",
          "[io][checkpoint][hostile]") {
  // Tensors of an MLP net under a conv config: the stem is not there.
  ddl::ConvDeltaNetConfig conv;
  const std::string path = tmpPath("conv_claim.safetensors");
  {
    ddl::DeltaNet<float> net(smallConfig(), 1);
    ddl::CheckpointMeta meta;
    meta.modelConfig = ddl::configJson(conv);
    ddl::saveCheckpoint(path, net, meta);
  }
  const std::string m = thrownMessage<ddl::IoError>(
      [&] { ddl::configFromCheckpoint<ddl::ConvDeltaNetConfig>(ddl::readCheckpointMetadata(path), path); });
  CHECK(contains(m, "\"stem.weight\" [16, 3, 3, 3], the file has none"));
}

TEST_CASE("Trainer::resume refuses malformed train_options JSON", "[io][checkpoint][hostile]") {
  const ddl::DeltaNetConfig cfg = smallConfig();
  ddl::DeltaNet<float> net(cfg, 1);
  ddl::Dataset<float> train;
  train.shape = ddl::ImageShape{1, 2, 3};
  train.numClasses = 3;
  train.images = ddl::MatX<float>::Random(6, 8);
  train.labels = {0, 1, 2, 0, 1, 2, 0, 1};
  ddl::TrainerOptions opt;
  opt.epochs = 1;
  opt.batchSize = 4;
  ddl::Trainer<float> trainer(net, train, opt);
  for (const std::string bad : {"{\"epochs\": 1,", "not json", "[1, 2]"}) {
    CAPTURE(bad);
    const std::string path = saveWithClaim("badopts.safetensors", net.config(), {{"train_options", bad}});
    const std::string m = thrownMessage<ddl::IoError>([&] { trainer.resume(path); });
    CHECK(contains(m, "train_options metadata is not a JSON object"));
    CHECK(trainer.step() == 0);
  }
}
