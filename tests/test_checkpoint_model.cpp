// Checkpoints of whole models: metadata must not drive allocation before the tensor
// shapes confirm it, and a resume refuses what it cannot follow exactly.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/core/token_batch.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/nn/models/conv_delta_net_config.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/nn/models/delta_net.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/saved_model.hpp"
#include "ddl/train/trainer.hpp"

namespace test_checkpoint_model {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::MatX;
using ddl_test::contains;
using ddl_test::thrownMessage;

namespace {

std::string tmpPath(const std::string& name) { return std::string(DDL_TEST_TMPDIR) + "/ckmodel_" + name; }

ddl::DeltaNetConfig smallConfig() {
  ddl::DeltaNetConfig c = ddl_test::deltaNetConfig(6, 3, 4, 2, 5, 2);
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
  refused("kernel.safetensors", c, "\"blocks.0.compress.conv.weight\" [4, 100001]");
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

namespace {

ddl::DeltaNetConfig twoLayerGateConfig() {
  ddl::DeltaNetConfig c = smallConfig();
  ddl::applyPreset(c, "v1");  // two-layer tanh gate
  c.block.residual.gateHidden = 3;
  return c;
}

// Rewrites a version 3 checkpoint as version 2 wrote it: the two-layer gate's output bias under
// "gate.bias" and every optimizer tensor as [rows, cols].
void writeAsVersion2(const std::string& from, const std::string& to) {
  ddl::SafetensorsReader r(from);
  std::map<std::string, std::string> meta = r.header().metadata;
  meta["format_version"] = "2";
  struct Entry {
    std::string name;
    std::vector<std::int64_t> shape;
    MatX<float> value;
  };
  std::vector<Entry> entries;
  for (const ddl::TensorInfo& t : r.header().tensors) {
    Entry e{ddl::detail::legacyTensorName(t.name), t.shape, r.readTensor<float>(t.name, t.shape)};
    if (ddl::detail::isOptimName(t.name)) e.shape = {e.value.rows(), e.value.cols()};
    entries.push_back(std::move(e));
  }
  ddl::SafetensorsWriter w;
  w.setMetadata(meta);
  for (const Entry& e : entries) w.declare(e.name, ddl::DType::F32, e.shape);
  ddl::writeFileAtomically(to, [&](std::ostream& os) {
    w.writeHeader(os);
    for (const Entry& e : entries) w.writeTensor(os, e.name, e.shape, e.value);
    w.finish();
  });
}

}  // namespace

TEST_CASE("checkpoint: the two-layer gate is named as nn.Linear names it, optimizer state has its parameter's "
          "shape, and version 2 files still load",
          "[io][checkpoint]") {
  const ddl::DeltaNetConfig c = twoLayerGateConfig();
  ddl::DeltaNet<float> net(c, 4);
  ddl::AdamW<float> opt;
  ddl::SoftmaxCrossEntropy<float> loss;
  ddl::StepBuffers<float> buf;
  const MatX<float> X = MatX<float>::Random(c.inputDim, 5);
  const std::vector<int> y = {0, 1, 2, 0, 1};
  ddl::trainStep(net, loss, opt, X, y, buf, {});
  const std::string path = tmpPath("two_layer_gate.safetensors");
  ddl::saveCheckpoint(path, net, opt);

  const ddl::SafetensorsHeader h = ddl::readSafetensorsHeader(path);
  CHECK(h.find("blocks.0.delta.gate.fc1.weight")->shape == std::vector<std::int64_t>{3, 4});
  CHECK(h.find("blocks.0.delta.gate.fc2.weight")->shape == std::vector<std::int64_t>{1, 3});
  CHECK(h.find("blocks.0.delta.gate.fc2.bias")->shape == std::vector<std::int64_t>{1});
  CHECK(h.find("blocks.0.delta.gate.bias") == nullptr);
  CHECK(h.find("optim.blocks.0.delta.gate.fc2.bias.exp_avg")->shape == std::vector<std::int64_t>{1});
  CHECK(h.find("optim.blocks.0.norm.weight.exp_avg_sq")->shape == std::vector<std::int64_t>{4});
  CHECK(h.find("optim.blocks.0.mlp.fc1.weight.exp_avg")->shape == std::vector<std::int64_t>{5, 4});

  // The same state written the version 2 way loads into the same parameters and moments.
  const std::string v2 = tmpPath("two_layer_gate_v2.safetensors");
  writeAsVersion2(path, v2);
  REQUIRE(ddl::readSafetensorsHeader(v2).find("blocks.0.delta.gate.bias") != nullptr);
  ddl::DeltaNet<float> fromV2(c, 9), fromV3(c, 8);
  ddl::AdamW<float> optV2, optV3;
  ddl::loadCheckpoint(v2, fromV2, optV2);
  ddl::loadCheckpoint(path, fromV3, optV3);
  std::vector<MatX<float>> a, b, sa, sb;
  fromV2.visitParams("", [&](const std::string&, ddl::Param<float>& p) { a.push_back(p.value); });
  fromV3.visitParams("", [&](const std::string&, ddl::Param<float>& p) { b.push_back(p.value); });
  optV2.visitState([&](const std::string&, MatX<float>& t) { sa.push_back(t); });
  optV3.visitState([&](const std::string&, MatX<float>& t) { sb.push_back(t); });
  CHECK(a == b);
  CHECK(sa == sb);
  CHECK(optV2.stepCount() == optV3.stepCount());

  // A missing parameter is named with the shape it is stored with.
  ddl::DeltaNetConfig other = c;
  other.block.residual.gate = ddl::GateKind::Linear;
  ddl::DeltaNet<float> linearGate(other, 1);
  ddl::CheckpointLoadOptions lenient;
  lenient.allowExtraTensors = true;
  CHECK(contains(thrownMessage<ddl::IoError>([&] { ddl::loadCheckpoint(path, linearGate, lenient); }),
                 "tensor \"blocks.0.delta.gate.weight\" is missing (model parameter [1, 4], dtype F32)"));
}

namespace {

// tests/fixtures/compressor: files written by ddl before the structured compressor kept one kernel per
// feature (see the README there).
std::string compressorFixture(const std::string& name) {
  return (std::filesystem::path(__FILE__).parent_path() / "fixtures" / "compressor" / name).string();
}

MatX<double> fixtureTensor(const std::string& file, const std::string& name) {
  ddl::SafetensorsReader r(compressorFixture(file));
  const ddl::TensorInfo* t = r.header().find(name);
  REQUIRE(t != nullptr);
  return r.readTensor<double>(name, t->shape);
}

bool isKernel(const std::string& name) {
  const std::string leaf = ".conv.weight";
  return name.size() > leaf.size() && name.compare(name.size() - leaf.size(), leaf.size(), leaf) == 0;
}

// Every structured kernel of model is [rows, 3] of rows equal to the file's shared [3] kernel.
template <class Model>
void checkKernelRows(Model& model, const std::string& file, ddl::Index rows) {
  ddl::SafetensorsReader r(compressorFixture(file));
  int kernels = 0;
  model.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    if (!isKernel(name)) return;
    CAPTURE(name);
    ++kernels;
    const MatX<double> shared = r.readTensor<double>(name, {3});
    CHECK(p.shape == std::vector<ddl::Index>{rows, 3});
    for (ddl::Index i = 0; i < rows; ++i) CHECK(p.value.row(i) == shared.transpose());
  });
  CHECK(kernels > 0);
}

}  // namespace

TEST_CASE("checkpoint: a shared-kernel structured compressor written by older ddl loads as equal per-feature "
          "rows and gives that net's logits bit for bit",
          "[io][checkpoint][compressor]") {
  const std::string netFile = "old_structured_deltanet.safetensors";
  auto net = ddl::loadModel<ddl::DeltaNet<double>>(compressorFixture(netFile));
  CHECK(net.config().block.compressor == ddl::CompressorKind::Structured);
  CHECK(net.config().block.compressorKernel == 3);
  CHECK(!net.config().block.compressorReadInit);  // the key is absent: the start was 1/dv
  checkKernelRows(net, netFile, 4);
  MatX<double> logits;
  net.forwardInference(fixtureTensor("old_structured_deltanet_io.safetensors", "x"), logits);
  CHECK(logits == fixtureTensor("old_structured_deltanet_io.safetensors", "logits"));

  // The optimizer's moments of a shared kernel load as equal rows too, so the run can go on.
  ddl::DeltaNet<double> resumed(net.config());
  ddl::AdamW<double> opt;
  ddl::loadCheckpoint(compressorFixture(netFile), resumed, opt);
  CHECK(opt.stepCount() == 1);
  ddl::SafetensorsReader r(compressorFixture(netFile));
  int moments = 0;
  opt.visitState([&](const std::string& name, MatX<double>& t) {
    if (!isKernel(name.substr(0, name.rfind('.')))) return;
    CAPTURE(name);
    ++moments;
    const MatX<double> shared = r.readTensor<double>("optim." + name, {3});
    REQUIRE(t.rows() == 4);
    for (ddl::Index i = 0; i < 4; ++i) CHECK(t.row(i) == shared.transpose());
  });
  CHECK(moments == 6);  // three kernels (two blocks, the readout), two moments each

  // A kernel of another length is not a shared kernel: the usual shape error, naming the tensor.
  ddl::DeltaNetConfig wider = net.config();
  wider.block.compressorKernel = 4;
  ddl::DeltaNet<double> other(wider);
  const std::string m = thrownMessage<ddl::IoError>([&] { ddl::loadCheckpoint(compressorFixture(netFile), other); });
  CHECK(contains(m, "blocks.0.compress.conv.weight"));

  const std::string lmFile = "old_structured_lm.safetensors";
  auto lm = ddl::loadModel<ddl::DeltaLM<double>>(compressorFixture(lmFile));
  CHECK(lm.config().variant() == "cc");
  checkKernelRows(lm, lmFile, 8);
  const MatX<double> ids = fixtureTensor("old_structured_lm_io.safetensors", "ids");
  ddl::TokenBatch batch;
  batch.layout = ddl::TokenLayout::sequence(2, 3);
  for (ddl::Index i = 0; i < ids.cols(); ++i) batch.ids.push_back(static_cast<int>(ids(0, i)));
  MatX<double> lmLogits;
  lm.forwardInference(batch, lmLogits);
  CHECK(lmLogits == fixtureTensor("old_structured_lm_io.safetensors", "logits"));
}

TEST_CASE("checkpoint: the per-feature structured kernel and its read start round-trip", "[io][checkpoint][compressor]") {
  ddl::DeltaNetConfig c = smallConfig();
  c.dv = 3;
  c.block.compressorKernel = 2;
  c.block.compressorReadInit = 0.75;
  ddl::DeltaNet<double> net(c, 9);
  const std::string path = tmpPath("per_feature.safetensors");
  ddl::saveModel(path, net);
  CHECK(ddl::readSafetensorsHeader(path).find("blocks.0.compress.conv.weight")->shape ==
        std::vector<std::int64_t>{c.d, 2});
  auto back = ddl::loadModel<ddl::DeltaNet<double>>(path);
  CHECK(back.config().block.compressorKernel == 2);
  CHECK(back.config().block.compressorReadInit == 0.75);
  const MatX<double> X = MatX<double>::Random(c.inputDim, 3);
  MatX<double> a, b;
  net.forwardInference(X, a);
  back.forwardInference(X, b);
  CHECK(a == b);
}

TEST_CASE("checkpoint: a DeltaLM whose head_dim x heads is not d round-trips (the authors' head_dim)",
          "[io][checkpoint]") {
  ddl::DeltaLMConfig c;
  c.vocab = 11;
  c.d = 12;
  c.heads = 2;
  c.attention.headDim = 5;  // q, k, v: [10, 12], o: [12, 10]
  c.depth = 2;
  c.context = 8;
  ddl::DeltaLM<double> lm(c, 3);
  const std::string path = tmpPath("head_dim.safetensors");
  ddl::saveModel(path, lm);
  CHECK(ddl::readSafetensorsHeader(path).find("blocks.1.attn.q.weight")->shape == std::vector<std::int64_t>{10, 12});
  auto back = ddl::loadModel<ddl::DeltaLM<double>>(path);
  CHECK(back.config().headDim() == 5);
  ddl::TokenBatch batch{{1, 2, 3, 4, 5, 6}, ddl::TokenLayout::sequence(2, 3)};
  MatX<double> a, b;
  lm.forwardInference(batch, a);
  back.forwardInference(batch, b);
  CHECK(a == b);
}

TEST_CASE("checkpoint metadata: JSON nested deeper than 128 levels is refused, values quoted by a bounded excerpt",
          "[io][checkpoint][hostile]") {
  const auto deep = [](std::size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); };
  const auto metaError = [](const std::map<std::string, std::string>& m) {
    return thrownMessage<ddl::IoError>([&] { ddl::CheckpointMeta::fromMetadata(m, "ck.safetensors"); });
  };
  // 200 000 levels: before the limit a recursive dump of the parsed value overflowed the stack.
  for (const char* key : {"model_config", "train_options", "train_position"}) {
    INFO(key);
    const std::string m = metaError({{key, deep(200000)}});
    CHECK(contains(m, std::string("metadata \"") + key + "\" must be text nested at most 128 levels"));
    CHECK(m.size() < 300);  // the value is quoted by its first 80 bytes
  }
  CHECK_NOTHROW(ddl::CheckpointMeta::fromMetadata({{"model_config", deep(128)}}, "ck.safetensors"));
  const std::string m = metaError({{"epoch", std::string(5000, '7')}});
  CHECK(contains(m, "metadata \"epoch\" must be a 64-bit integer, found \"" + std::string(80, '7') + "... (5000 bytes)\""));
  ddl::CheckpointMeta meta;
  meta.modelConfig = "{\"d\": " + deep(5000) + "}";
  const std::string configError = thrownMessage<ddl::Error>([&] { ddl::configFromCheckpoint<ddl::DeltaLMConfig>(meta, "ck"); });
  CHECK(contains(configError, "nested deeper than 128 levels"));
  CHECK(configError.size() < 300);
}

}  // namespace test_checkpoint_model
