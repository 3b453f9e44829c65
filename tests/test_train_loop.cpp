// Tests for include/ddl/train/{train_step,trainer,progress}.hpp: a DeltaNet learns (overfits 64
// random samples, loss falls on a separable task), training is deterministic, a steady-state step
// allocates no Eigen memory, resuming from a checkpoint is bit-identical, bad inputs throw clear
// errors, and the Trainer path of the ddl-mnist example learns a tiny IDX data set written here.
//
// EIGEN_RUNTIME_NO_MALLOC must precede every Eigen include. eigen_assert is made to RECORD a failed
// check (Release builds define NDEBUG, which would silence it) instead of throwing: an exception thrown
// from inside DenseStorage::resize leaves a freed pointer behind (a double free later), while a recorded
// failure lets the allocation proceed and the test report which step allocated.
#define EIGEN_RUNTIME_NO_MALLOC
#include <string>
namespace ddl_test {
inline std::string& eigenAssertLog() {
  static std::string log;
  return log;
}
inline void eigenAssertFailed(const char* what) {
  if (eigenAssertLog().empty()) eigenAssertLog() = std::string("eigen_assert failed: ") + what;
}
}  // namespace ddl_test
#define eigen_assert(x) ((x) ? static_cast<void>(0) : ::ddl_test::eigenAssertFailed(#x))

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/data/idx.hpp"
#include "ddl/nn/models/delta_net.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/progress.hpp"
#include "ddl/train/train_step.hpp"
#include "ddl/train/trainer.hpp"

namespace test_train_loop {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl_test::bitIdentical;
using ddl_test::contains;
using ddl_test::gaussianBlobs;
using ddl_test::paramValues;
using ddl_test::thrownMessage;

namespace {

ddl::DeltaNetConfig smallConfig(Index inputDim, Index classes, const std::string& preset = "code",
                                ddl::ResidualKind kind = ddl::ResidualKind::Delta, Index dv = 1) {
  return ddl_test::withPreset(ddl_test::deltaNetConfig(inputDim, classes, 16, 2, 32, dv), preset, kind);
}


std::string tmpPath(const std::string& name) {
  std::filesystem::create_directories(DDL_TEST_TMPDIR);
  return std::string(DDL_TEST_TMPDIR) + "/train_loop_" + name;
}

// Runs f with Eigen heap allocations forbidden; returns the first failed Eigen check ("" if none).
template <class F>
std::string withoutEigenMalloc(F&& f) {
  ddl_test::eigenAssertLog().clear();
  Eigen::internal::set_is_malloc_allowed(false);
  try {
    f();
  } catch (...) {
    Eigen::internal::set_is_malloc_allowed(true);
    throw;
  }
  Eigen::internal::set_is_malloc_allowed(true);
  return ddl_test::eigenAssertLog();
}

struct AllocCase {
  const char* preset;
  ddl::ResidualKind kind;
  Index dv;
};

// Two warm-up steps (DeltaNet::backward rotates its gradient buffers with swaps, so the second step
// still sizes one of them), then two steps under the ban, one of them with clipping active.
std::string steadyStateAllocation(const AllocCase& c) {
  ddl::setNumThreads(1);
  const ddl::Dataset<float> data = gaussianBlobs(10, 3, 24, 31);
  ddl::DeltaNet<float> net(smallConfig(10, 3, c.preset, c.kind, c.dv), 1);
  ddl::SoftmaxCrossEntropy<float> loss(0.1);
  ddl::AdamW<float> opt;
  ddl::StepBuffers<float> buf;
  const MatX<float> X1 = data.images.leftCols(12), X2 = data.images.rightCols(12);
  const std::vector<int> y1(data.labels.begin(), data.labels.begin() + 12), y2(data.labels.begin() + 12, data.labels.end());
  ddl::trainStep(net, loss, opt, X1, y1, buf, {1.0});
  ddl::trainStep(net, loss, opt, X2, y2, buf, {1.0});
  const std::string failure = withoutEigenMalloc([&] {
    ddl::trainStep(net, loss, opt, X1, y1, buf, {1.0});
    ddl::trainStep(net, loss, opt, X2, y2, buf, {1e-3});  // clipping active
  });
  if (opt.stepCount() != 4) return "expected 4 optimizer steps, found " + std::to_string(opt.stepCount());
  return failure;
}

}  // namespace

TEST_CASE("a DeltaNet overfits 64 random samples to 100% accuracy", "[train][learn]") {
  ddl::setNumThreads(1);
  const ddl::Index n = 64, features = 24, classes = 5;
  ddl::Rng rng(7);
  MatX<float> X(features, n);
  std::vector<int> y(n);
  for (Index j = 0; j < n; ++j) {
    y[static_cast<std::size_t>(j)] = static_cast<int>(rng.below(classes));
    for (Index i = 0; i < features; ++i) X(i, j) = static_cast<float>(rng.normal());
  }
  for (const auto kind : {ddl::ResidualKind::Delta, ddl::ResidualKind::Additive}) {
    CAPTURE(ddl::toString(kind));
    ddl::DeltaNet<float> net(smallConfig(features, classes, "code", kind), 3);
    ddl::SoftmaxCrossEntropy<float> loss;
    ddl::AdamWOptions ao;
    ao.lr = 1e-2;
    ao.weightDecay = 0.0;
    ddl::AdamW<float> opt(ao);
    ddl::StepBuffers<float> buf;
    ddl::StepStats s;
    for (int step = 0; step < 300 && !(s.correct == n && s.loss < 0.05); ++step)
      s = ddl::trainStep(net, loss, opt, X, y, buf);
    MatX<float> logits;
    net.forward(X, logits);
    CHECK(ddl::countCorrect(logits, y) == n);
    CHECK(s.loss < 0.05);
  }
}

TEST_CASE("loss falls on a separable task and the model generalises", "[train][learn]") {
  ddl::setNumThreads(1);
  const ddl::Dataset<float> train = gaussianBlobs(12, 4, 512, 11), test = gaussianBlobs(12, 4, 256, 12);
  ddl::DeltaNet<float> net(smallConfig(12, 4), 5);
  ddl::SoftmaxCrossEntropy<float> loss;
  ddl::AdamWOptions ao;
  ao.lr = 3e-3;
  ddl::AdamW<float> opt(ao);
  const double before = ddl::evaluate(net, loss, test).loss;
  ddl::BatchOptions bo;
  bo.batchSize = 64;
  ddl::Batcher<float> batches(train, bo, 1);
  MatX<float> X;
  std::vector<int> y;
  ddl::StepBuffers<float> buf;
  for (int epoch = 0; epoch < 5; ++epoch) {
    batches.startEpoch(static_cast<std::uint64_t>(epoch));
    while (batches.next(X, y)) ddl::trainStep(net, loss, opt, X, y, buf, {/*clipNorm=*/1.0});
  }
  const ddl::EvalResult after = ddl::evaluate(net, loss, test, 100);
  CAPTURE(before, after.loss, after.accuracy);
  CHECK(after.count == 256);
  CHECK(after.loss < 0.5 * before);
  CHECK(after.accuracy > 0.9);  // the Bayes accuracy of these blobs is ~0.98
}

TEST_CASE("two runs with the same seed and threads are bit-identical after 20 steps", "[train][determinism]") {
  const ddl::Dataset<float> data = gaussianBlobs(20, 3, 160, 21);
  auto run = [&](std::uint64_t seed) {
    ddl::setNumThreads(2);
    ddl::DeltaNet<float> net(smallConfig(20, 3, "code", ddl::ResidualKind::Delta, 2), seed);
    ddl::SoftmaxCrossEntropy<float> loss(0.1);
    ddl::AdamW<float> opt;
    ddl::BatchOptions bo;
    bo.batchSize = 32;
    ddl::Batcher<float> batches(data, bo, seed);
    MatX<float> X;
    std::vector<int> y;
    ddl::StepBuffers<float> buf;
    for (int step = 0; step < 20; ++step) {
      if (!batches.next(X, y)) {
        batches.startEpoch(batches.epoch() + 1);
        batches.next(X, y);
      }
      ddl::trainStep(net, loss, opt, X, y, buf, {/*clipNorm=*/0.5});
    }
    ddl::setNumThreads(0);
    return paramValues(net);
  };
  const auto a = run(4), b = run(4), c = run(5);
  CHECK(bitIdentical(a, b));
  CHECK_FALSE(bitIdentical(a, c));  // the comparison can fail
}

TEST_CASE("a steady-state training step allocates no Eigen memory (dv = 1)", "[train][alloc]") {
  const AllocCase cases[] = {{"code", ddl::ResidualKind::Delta, 1},     {"paper", ddl::ResidualKind::Delta, 1},
                             {"v1", ddl::ResidualKind::Delta, 1},       {"code", ddl::ResidualKind::WriteOnly, 1},
                             {"code", ddl::ResidualKind::Additive, 1}};
  for (const AllocCase& c : cases) {
    CAPTURE(c.preset, ddl::toString(c.kind), c.dv);
    CHECK(steadyStateAllocation(c).empty());
  }
}

TEST_CASE("a steady-state training step allocates no Eigen memory (dv > 1)", "[train][alloc]") {
  const AllocCase cases[] = {{"code", ddl::ResidualKind::Delta, 3}, {"paper", ddl::ResidualKind::Delta, 2},
                             {"v1", ddl::ResidualKind::Delta, 2}, {"code", ddl::ResidualKind::Additive, 2}};
  for (const AllocCase& c : cases) {
    CAPTURE(c.preset, ddl::toString(c.kind), c.dv);
    CHECK(steadyStateAllocation(c).empty());
  }
}

TEST_CASE("the no-allocation guard trips on an allocation", "[train][alloc]") {
  const std::string failure = withoutEigenMalloc([] {
    MatX<float> m(8, 8);
    m.setZero();
  });
  CHECK(contains(failure, "heap allocation is forbidden"));
}

TEST_CASE("resuming from a checkpoint after N steps is bit-identical to never stopping", "[train][resume]") {
  ddl::setNumThreads(1);
  const ddl::Dataset<float> data = gaussianBlobs(16, 4, 96, 41);
  const ddl::DeltaNetConfig cfg = smallConfig(16, 4, "paper", ddl::ResidualKind::Delta, 2);
  const std::string path = tmpPath("steps.safetensors");
  ddl::BatchOptions bo;
  bo.batchSize = 16;
  auto steps = [&](ddl::DeltaNet<float>& net, ddl::AdamW<float>& opt, ddl::Batcher<float>& b, int n) {
    ddl::SoftmaxCrossEntropy<float> loss;
    ddl::StepBuffers<float> buf;
    MatX<float> X;
    std::vector<int> y;
    const ddl::LrSchedule sched = ddl::LrSchedule::cosine(3e-3, 3, 12);
    for (int i = 0; i < n; ++i) {
      if (!b.next(X, y)) {
        b.startEpoch(b.epoch() + 1);
        b.next(X, y);
      }
      opt.setLr(sched.lrAt(opt.stepCount()));
      ddl::trainStep(net, loss, opt, X, y, buf);
    }
  };
  ddl::DeltaNet<float> full(cfg, 9);
  ddl::AdamW<float> fullOpt;
  ddl::Batcher<float> fullBatches(data, bo, 3);
  steps(full, fullOpt, fullBatches, 4);
  ddl::CheckpointMeta meta;
  meta.step = 4;
  meta.epoch = static_cast<std::int64_t>(fullBatches.epoch());
  meta.extra["batch"] = std::to_string(fullBatches.batchIndex());
  ddl::saveCheckpoint(path, full, fullOpt, meta);
  steps(full, fullOpt, fullBatches, 8);  // crosses an epoch boundary (6 batches per epoch)

  ddl::DeltaNet<float> resumed(cfg, 1234);  // different init: everything must come from the file
  ddl::AdamW<float> resumedOpt;
  const ddl::CheckpointMeta back = ddl::loadCheckpoint(path, resumed, resumedOpt);
  ddl::Batcher<float> resumedBatches(data, bo, 3);
  resumedBatches.startEpoch(static_cast<std::uint64_t>(back.epoch));
  resumedBatches.seek(std::stol(back.extra.at("batch")));
  steps(resumed, resumedOpt, resumedBatches, 8);
  CHECK(resumedOpt.stepCount() == 12);
  CHECK(bitIdentical(paramValues(full), paramValues(resumed)));
}

TEST_CASE("Trainer: resume from the epoch checkpoint continues bit-identically", "[train][resume][trainer]") {
  const ddl::Dataset<float> train = gaussianBlobs(16, 3, 120, 51), test = gaussianBlobs(16, 3, 60, 52);
  const ddl::DeltaNetConfig cfg = smallConfig(16, 3);
  ddl::TrainerOptions opt;
  opt.epochs = 3;
  opt.batchSize = 32;
  opt.warmupSteps = 2;
  opt.threads = 1;
  opt.extraMeta["note"] = "resume test";

  opt.outDir = tmpPath("trainer_full");
  std::filesystem::remove_all(opt.outDir);
  ddl::DeltaNet<float> full(cfg, 2);
  ddl::Trainer<float> fullTrainer(full, train, opt, nullptr, &test);
  const ddl::EpochMetrics fullLast = fullTrainer.run();

  opt.outDir = tmpPath("trainer_split");
  std::filesystem::remove_all(opt.outDir);
  {
    ddl::TrainerOptions first = opt;
    ddl::DeltaNet<float> net(cfg, 2);
    ddl::Trainer<float> t(net, train, first, nullptr, &test);
    t.onEpoch = [&](const ddl::EpochMetrics& m) {
      if (m.epoch == 1) throw std::runtime_error("stop after epoch 1");  // a crash after the checkpoint
    };
    CHECK_THROWS_WITH(t.run(), "stop after epoch 1");
  }
  ddl::DeltaNet<float> net(cfg, 77);
  ddl::Trainer<float> t(net, train, opt, nullptr, &test);
  t.resume(t.checkpointPath());
  CHECK(t.epoch() == 1);
  CHECK(t.step() == 4);
  const ddl::EpochMetrics last = t.run();
  CHECK(t.epoch() == 3);
  CHECK(last.test.accuracy == fullLast.test.accuracy);
  CHECK(last.test.loss == fullLast.test.loss);
  CHECK(bitIdentical(paramValues(full), paramValues(net)));

  // One header and a row per epoch, the resumed rows appended.
  std::ifstream csv(t.metricsPath());
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(csv, line)) lines.push_back(line);
  REQUIRE(lines.size() == 4);
  CHECK(contains(lines[0], "epoch,step,lr,train_loss,train_acc,val_loss,val_acc,test_loss,test_acc"));
  CHECK(lines[1].rfind("1,4,", 0) == 0);
  CHECK(lines[3].rfind("3,12,", 0) == 0);

  const ddl::CheckpointMeta meta = ddl::readCheckpointMetadata(t.checkpointPath());
  CHECK(meta.epoch == 3);
  CHECK(meta.step == 12);
  CHECK(meta.preset == "code");
  CHECK(meta.extra.at("note") == "resume test");
  CHECK(ddl::configJson(ddl::configFromCheckpoint(meta, t.checkpointPath())) == ddl::configJson(cfg));
  // The loop's options and its parts' reports (AdamW, label smoothing, augmentation) make up exactly
  // the options the Trainer was given, under their keys.
  CHECK(nlohmann::json::parse(meta.extra.at("train_options")) == opt.toJson());

  // A resume under other options or another model is refused, naming what differs.
  ddl::TrainerOptions smoothed = opt;
  smoothed.labelSmoothing = 0.1;
  ddl::Trainer<float> t1(net, train, smoothed, nullptr, &test);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { t1.resume(t.checkpointPath()); }),
                 "label_smoothing (saved 0.0, now 0.1)"));
  ddl::TrainerOptions other = opt;
  other.adam.lr = 5e-3;
  ddl::Trainer<float> t2(net, train, other, nullptr, &test);
  const std::string msg = thrownMessage<ddl::ValueError>([&] { t2.resume(t.checkpointPath()); });
  CHECK(contains(msg, "ddl::TrainingLoop::resume"));
  CHECK(contains(msg, "training options differ"));
  ddl::DeltaNetConfig wider = cfg;
  wider.d = 24;
  ddl::DeltaNet<float> wideNet(wider, 2);
  ddl::Trainer<float> t3(wideNet, train, opt, nullptr, &test);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { t3.resume(t.checkpointPath()); }), "model configuration differs"));
}

TEST_CASE("bad inputs throw ddl::Error naming the problem and leave the model unchanged", "[train][errors]") {
  ddl::setNumThreads(1);
  ddl::DeltaNet<float> net(smallConfig(6, 3), 1);
  ddl::SoftmaxCrossEntropy<float> loss;
  ddl::AdamW<float> opt;
  ddl::StepBuffers<float> buf;
  const auto before = paramValues(net);
  const MatX<float> X = MatX<float>::Ones(6, 4);

  const std::string range = thrownMessage<ddl::ValueError>([&] { ddl::trainStep(net, loss, opt, X, {0, 1, 3, 2}, buf); });
  CHECK(contains(range, "label at index 2 is 3"));
  CHECK(contains(range, "[0, 3)"));
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::trainStep(net, loss, opt, X, {0, -1, 1, 2}, buf); }),
                 "label at index 1 is -1"));

  const std::string width =
      thrownMessage<ddl::ShapeError>([&] { ddl::trainStep(net, loss, opt, MatX<float>::Ones(7, 4), {0, 1, 2, 0}, buf); });
  CHECK(contains(width, "ddl::DeltaNet::forward"));
  CHECK(contains(width, "(7, 4), expected (6, any)"));

  const std::string count = thrownMessage<ddl::ShapeError>([&] { ddl::trainStep(net, loss, opt, X, {0, 1}, buf); });
  CHECK(contains(count, "ddl::trainStep"));
  CHECK(contains(count, "2 labels for X of shape (6, 4)"));

  CHECK(bitIdentical(before, paramValues(net)));
  CHECK(opt.stepCount() == 0);

  ddl::TrainerOptions o;
  o.epochs = 0;
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { o.validate(); }), "epochs must be >= 1, got 0"));
  const ddl::Dataset<float> wrong = gaussianBlobs(5, 3, 10, 1);
  ddl::TrainerOptions ok;
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::Trainer<float> t(net, wrong, ok); }),
                 "training images have 5 features but the model expects inputDim = 6"));
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::evaluate(net, loss, wrong, 0); }), "batchSize must be > 0"));
}

TEST_CASE("progress: plain lines when piped, an in-place bar on a terminal", "[train][progress]") {
  std::ostringstream plain;
  ddl::ProgressBar p(plain, /*terminal=*/false, /*plainInterval=*/0.0);
  p.start("epoch 1/2", 4);
  p.update(1, 0.5, 0.25, 100.0);
  p.update(4, 0.4, 0.5, 100.0);  // the end is reported by finish(), not as a progress line
  p.finish("epoch 1/2 done");
  CHECK(plain.str().find('\r') == std::string::npos);
  CHECK(contains(plain.str(), "epoch 1/2  25% 1/4  loss 0.5000  acc 25.00%  100/s  ETA"));
  CHECK(contains(plain.str(), "\nepoch 1/2 done\n"));

  std::ostringstream tty;
  ddl::ProgressBar q(tty, /*terminal=*/true);
  q.start("epoch 2/2", 4);
  q.update(2, 0.3, 0.75, 50.0);
  q.finish("done");
  CHECK(contains(tty.str(), "\repoch 2/2 [##########----------]  50% 2/4"));
  CHECK(contains(tty.str(), "\r\x1b[Kdone\n"));
  CHECK(ddl::formatDuration(125) == "2m05s");
  CHECK(ddl::formatDuration(3725) == "1h02m");
}

namespace {
void writeBigEndian32(std::ofstream& f, std::uint32_t v) {
  const unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                              static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  f.write(reinterpret_cast<const char*>(b), 4);
}
// A learnable IDX set: 8x8 images, class c is a bright 3x3 square at a class-specific place plus noise.
// Written to temporary names and renamed into place, so a reader running at the same time (the
// ddl-mnist smoke ctest reads this folder) sees complete files only.
void writeTinyIdx(const std::string& dir, const std::string& prefix, std::uint32_t n, std::uint64_t seed) {
  ddl::Rng rng(seed);
  const std::string imgPath = dir + "/" + prefix + "-images-idx3-ubyte", lblPath = dir + "/" + prefix + "-labels-idx1-ubyte";
  const std::string part = ".part" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  std::ofstream img(imgPath + part, std::ios::binary);
  std::ofstream lbl(lblPath + part, std::ios::binary);
  writeBigEndian32(img, 0x803);
  writeBigEndian32(img, n);
  writeBigEndian32(img, 8);
  writeBigEndian32(img, 8);
  writeBigEndian32(lbl, 0x801);
  writeBigEndian32(lbl, n);
  for (std::uint32_t s = 0; s < n; ++s) {
    const int c = static_cast<int>(rng.below(4));
    const char label = static_cast<char>(c);
    lbl.write(&label, 1);
    const int y0 = (c / 2) * 4 + 1, x0 = (c % 2) * 4 + 1;
    for (int y = 0; y < 8; ++y)
      for (int x = 0; x < 8; ++x) {
        const bool on = y >= y0 && y < y0 + 3 && x >= x0 && x < x0 + 3 && rng.uniform() < 0.7;
        const char px = static_cast<char>(on ? 160 + rng.below(96) : rng.below(100));
        img.write(&px, 1);
      }
  }
  img.close();
  lbl.close();
  REQUIRE(img.good());
  REQUIRE(lbl.good());
  std::filesystem::rename(imgPath + part, imgPath);
  std::filesystem::rename(lblPath + part, lblPath);
}
}  // namespace

TEST_CASE("example path: the Trainer learns a tiny IDX data set well above chance", "[train][example]") {
  const std::string dir = tmpPath("tiny_idx");
  std::filesystem::create_directories(dir);
  std::filesystem::remove_all(dir + "/out");
  writeTinyIdx(dir, "train", 400, 61);
  writeTinyIdx(dir, "t10k", 200, 62);

  // As examples/mnist.cpp does: load, normalise with the training statistics, train, evaluate.
  ddl::Dataset<float> train = ddl::loadIdxDir<float>(dir, ddl::DataPart::Train);
  ddl::Dataset<float> test = ddl::loadIdxDir<float>(dir, ddl::DataPart::Test);
  REQUIRE(train.numClasses == 4);
  const ddl::ChannelStats<float> st = ddl::channelStats(train);
  ddl::normalize(train, st);
  ddl::normalize(test, st);
  ddl::DeltaNetConfig cfg = smallConfig(64, 10);
  ddl::TrainerOptions opt;
  opt.epochs = 4;
  opt.batchSize = 32;
  opt.adam.lr = 5e-3;
  opt.warmupSteps = 5;
  opt.threads = 2;
  opt.augment.enabled = true;  // shifts only: a mirror would move a square to another class's place
  opt.augment.pad = 1;
  opt.augment.flip = false;
  opt.outDir = dir + "/out";
  ddl::DeltaNet<float> net(cfg, 1);
  ddl::Trainer<float> trainer(net, train, opt, nullptr, &test);
  int batches = 0, epochs = 0;
  trainer.onBatch = [&](const ddl::BatchProgress& p) {
    ++batches;
    CHECK(p.batches == 13);
  };
  trainer.onEpoch = [&](const ddl::EpochMetrics&) { ++epochs; };
  const ddl::EpochMetrics m = trainer.run();
  CAPTURE(m.trainAccuracy, m.test.accuracy, m.test.loss);
  CHECK(batches == 52);
  CHECK(epochs == 4);
  CHECK(m.test.count == 200);
  CHECK(m.test.accuracy > 0.8);  // chance is 0.25
  REQUIRE(trainer.gates().stats().size() == 2);
  CHECK(trainer.gates().stats()[0].tokens == 200);
  CHECK(trainer.gates().all().tokens == 400);
  CHECK(trainer.gates().all().betaMin >= 0.0);
  CHECK(trainer.gates().all().betaMax <= 2.0);
  REQUIRE(m.extra.size() == 4);  // beta_mean, beta_min, beta_max, beta_saturated
  CHECK(std::stod(m.extra[1]) == trainer.gates().all().betaMin);
  CHECK(std::filesystem::exists(trainer.checkpointPath()));
  CHECK(std::filesystem::exists(trainer.metricsPath()));
}

TEST_CASE("a training step at the benchmark size allocates no Eigen memory on 1 and 2 threads", "[train][alloc]") {
  // 784 -> d = 256, 4 blocks, hidden 1024, B = 128: every product is far above Eigen's 128 KiB stack
  // limit, so this proves the persistent GEMM workspaces (core/gemm.hpp), not a lucky small shape.
  ddl::DeltaNetConfig cfg;
  cfg.inputDim = 784;
  cfg.d = 256;
  cfg.depth = 4;
  cfg.block.hidden = 1024;
  ddl::applyPreset(cfg, "code");
  for (const int threads : {1, 2}) {
    CAPTURE(threads);
    ddl::setNumThreads(threads);
    ddl::DeltaNet<float> net(cfg, 1);
    ddl::SoftmaxCrossEntropy<float> loss;
    ddl::AdamW<float> opt;
    ddl::StepBuffers<float> buf;
    ddl::Rng rng(3);
    MatX<float> X(784, 128);
    std::vector<int> y(128);
    for (Index j = 0; j < 128; ++j) {
      y[static_cast<std::size_t>(j)] = static_cast<int>(rng.below(10));
      for (Index i = 0; i < 784; ++i) X(i, j) = static_cast<float>(rng.uniform());
    }
    ddl::trainStep(net, loss, opt, X, y, buf, {1.0});
    const std::string failure = withoutEigenMalloc([&] { ddl::trainStep(net, loss, opt, X, y, buf, {1.0}); });
    CHECK(failure.empty());
  }
  ddl::setNumThreads(1);
}

}  // namespace test_train_loop
