// Tests for the Trainer's guards (include/ddl/train/{finite_guard,trainer,stop_signal}.hpp): a NaN/Inf
// loss or gradient stops training before the update and names the step and the parameter; a stop
// request mid-epoch or in an epoch's evaluation writes a checkpoint from which a resume is bit-identical
// (parameters, checkpoint bytes, metrics rows); an EvalStop ends an evaluation after its batch; an
// output folder that cannot be written, and a full disk (RLIMIT_FSIZE), give
// clear errors and leave the previous checkpoint byte-identical with no temporary files.
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/train/finite_guard.hpp"
#include "ddl/train/stop_signal.hpp"
#include "ddl/train/trainer.hpp"

#include "counting_new.hpp"  // counts every global operator new of this executable

namespace test_train_guard {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl_test::bitIdentical;
using ddl_test::contains;
using ddl_test::fileBytes;
using ddl_test::gaussianBlobs;
using ddl_test::paramValues;
using ddl_test::thrownMessage;

namespace {

ddl::DeltaNetConfig smallConfig(Index inputDim, Index classes) {
  ddl::DeltaNetConfig c = ddl_test::deltaNetConfig(inputDim, classes, 16, 2, 32);
  ddl::applyPreset(c, "code");
  return c;
}

std::vector<std::string> lines(const std::string& path) {
  std::istringstream in(fileBytes(path));
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}
// A metrics row without its wall-clock columns (seconds, samples_per_s: the 10th and 11th).
std::string withoutTimes(const std::string& row) {
  std::vector<std::string> f;
  std::stringstream ss(row);
  for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
  std::string out;
  for (std::size_t i = 0; i < f.size(); ++i)
    if (i != 9 && i != 10) out += f[i] + ",";
  return out;
}
// A resumed run, finished, equals the run that never stopped: parameters, checkpoint bytes and the
// header + 3 epoch rows of metrics.csv (without the wall-clock columns).
void checkSameAsUninterrupted(ddl::DeltaNet<float>& full, const ddl::Trainer<float>& fullTrainer,
                              ddl::DeltaNet<float>& net, const ddl::Trainer<float>& t) {
  CHECK(bitIdentical(paramValues(full), paramValues(net)));
  CHECK(fileBytes(t.checkpointPath()) == fileBytes(fullTrainer.checkpointPath()));
  const auto a = lines(fullTrainer.metricsPath()), b = lines(t.metricsPath());
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == 4);
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(withoutTimes(a[i]) == withoutTimes(b[i]));
}
// Names in dir that are not the two outputs (temporaries left behind, probes).
std::vector<std::string> strayFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n != "checkpoint.safetensors" && n != "metrics.csv") out.push_back(n);
  }
  return out;
}

std::string freshDir(const std::string& name) { return ddl_test::clearedTestPath("train_guard_" + name); }

ddl::TrainerOptions smallOptions(const std::string& outDir) {
  ddl::TrainerOptions opt;
  opt.epochs = 3;
  opt.batchSize = 32;  // 120 samples: 4 batches per epoch, the last one partial
  opt.warmupSteps = 2;
  opt.threads = 1;
  opt.outDir = outDir;
  return opt;
}

// A Trainer of smallConfig(16, 3) (seed 2) with smallOptions(outDir) on 120 blob samples (seed 51) and
// 60 test samples (seed 52): the run that the NaN and the full-disk tests break mid-way.
struct BlobTrainer {
  const ddl::Dataset<float> train = gaussianBlobs(16, 3, 120, 51), test = gaussianBlobs(16, 3, 60, 52);
  const ddl::TrainerOptions opt;
  ddl::DeltaNet<float> net{smallConfig(16, 3), 2};
  ddl::Trainer<float> trainer{net, train, opt, nullptr, &test};
  explicit BlobTrainer(const std::string& outDir) : opt(smallOptions(outDir)) {}
};

// Lowers the file-size limit (soft only, so it can be raised again) and ignores SIGXFSZ, so that
// writes past the limit fail with EFBIG as on a full disk; restores both on destruction.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &m_saved);
    m_oldHandler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit r = m_saved;
    r.rlim_cur = bytes;
    m_ok = setrlimit(RLIMIT_FSIZE, &r) == 0;
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &m_saved);
    std::signal(SIGXFSZ, m_oldHandler);
  }
  bool ok() const { return m_ok; }

 private:
  rlimit m_saved{};
  void (*m_oldHandler)(int) = nullptr;
  bool m_ok = false;
};

}  // namespace

TEST_CASE("FiniteGuard names the step and the first parameter whose gradient is not finite", "[train][guard]") {
  ddl::DeltaNet<float> net(smallConfig(6, 3), 1);
  ddl::zeroGrad(net);
  const ddl::FiniteGuard<float> guard(net);
  CHECK_NOTHROW(guard.check(0.7, 1));

  std::string victim;
  int i = 0;
  net.visitParams("", [&](const std::string& name, ddl::Param<float>& p) {
    if (i++ == 5) {  // a parameter inside a block, so the name shows which block went bad
      victim = name;
      p.grad(0, p.grad.cols() - 1) = std::numeric_limits<float>::infinity();
      p.grad(p.grad.rows() - 1, 0) = std::nanf("");
    }
  });
  REQUIRE(contains(victim, "blocks."));
  const std::string msg = thrownMessage<ddl::NonFiniteError>([&] { guard.check(0.7, 42); });
  CHECK(contains(msg, "ddl::FiniteGuard: the gradient of parameter '" + victim + "' is not finite at step 42"));
  CHECK(contains(msg, "2 of "));
  try {
    guard.check(0.7, 42);
  } catch (const ddl::NonFiniteError& e) {
    CHECK(e.step() == 42);
  }
  CHECK(contains(thrownMessage<ddl::NonFiniteError>([&] { guard.check(std::nan(""), 9); }), "the loss is nan at step 9"));
  CHECK(contains(thrownMessage<ddl::NonFiniteError>([&] { guard.check(HUGE_VAL, 9); }), "the loss is inf at step 9"));
}

TEST_CASE("FiniteGuard::check allocates nothing (counting operator new)", "[train][guard][alloc]") {
  ddl::DeltaNet<float> net(smallConfig(6, 3), 1);
  ddl::zeroGrad(net);
  const ddl::FiniteGuard<float> guard(net);
  const long before = ddl_test::operatorNewCount();
  for (int step = 1; step <= 10; ++step) guard.check(0.5, step);
  CHECK(ddl_test::operatorNewCount() - before == 0);
  const long probe = ddl_test::operatorNewCount();
  std::string s(100, 'x');  // the counter sees allocations at all
  CHECK(ddl_test::operatorNewCount() - probe >= 1);
}

TEST_CASE("Trainer stops at a NaN before the update, the last checkpoint stays byte-identical", "[train][guard][trainer]") {
  BlobTrainer run(freshDir("nan"));
  ddl::DeltaNet<float>& net = run.net;
  std::string afterEpoch1;
  std::vector<MatX<float>> lastGood;
  run.trainer.onEpoch = [&](const ddl::EpochMetrics& m) {
    if (m.epoch != 1) return;
    afterEpoch1 = fileBytes(run.trainer.checkpointPath());
    // A poisoned weight of the classifier head (the last weight with one row per class). (A NaN
    // pixel is refused earlier, by the direction normalisation of the first block.)
    ddl::Param<float>* head = nullptr;
    net.visitParams("", [&](const std::string& name, ddl::Param<float>& p) {
      if (p.value.rows() == 3 && name.size() > 6 && name.compare(name.size() - 6, 6, "weight") == 0) head = &p;
    });
    REQUIRE(head != nullptr);
    head->value(1, 2) = std::nanf("");
    lastGood = paramValues(net);
  };
  const std::string msg = thrownMessage<ddl::NonFiniteError>([&] { run.trainer.run(); });
  CAPTURE(msg);
  CHECK(contains(msg, "ddl::TrainingLoop: training stopped in epoch 2, batch 1: "));
  CHECK(contains(msg, "the loss is nan at step 5"));
  CHECK(contains(msg, "the last checkpoint (" + run.trainer.checkpointPath() + ", step 4) is unchanged"));
  REQUIRE_FALSE(afterEpoch1.empty());
  CHECK(fileBytes(run.trainer.checkpointPath()) == afterEpoch1);
  CHECK(bitIdentical(paramValues(net), lastGood));  // the bad step updated nothing
  CHECK(run.trainer.step() == 4);
  CHECK(run.trainer.optimizer().stepCount() == 4);
  CHECK(lines(run.trainer.metricsPath()).size() == 2);  // header + epoch 1
  CHECK(strayFiles(run.opt.outDir).empty());
}

TEST_CASE("Trainer: a stop request mid-epoch checkpoints, resume is bit-identical to never stopping", "[train][stop][trainer]") {
  const ddl::Dataset<float> train = gaussianBlobs(16, 3, 120, 51), test = gaussianBlobs(16, 3, 60, 52);
  const ddl::DeltaNetConfig cfg = smallConfig(16, 3);
  ddl::TrainerOptions opt = smallOptions(freshDir("stop_full"));
  opt.augment.enabled = true;  // the per-batch augmentation stream must continue too
  opt.augment.pad = 1;
  opt.augment.flip = false;
  ddl::Dataset<float> imgTrain = train, imgTest = test;
  imgTrain.shape = imgTest.shape = ddl::ImageShape{1, 4, 4};
  ddl::DeltaNet<float> full(cfg, 2);
  ddl::Trainer<float> fullTrainer(full, imgTrain, opt, nullptr, &imgTest);
  fullTrainer.run();

  for (const std::int64_t stopAt : {6, 4, 1}) {  // mid-epoch 2, at the end of epoch 1, after the first step
    CAPTURE(stopAt);
    ddl::TrainerOptions split = opt;
    split.outDir = freshDir("stop_split");
    {
      ddl::DeltaNet<float> net(cfg, 2);
      ddl::Trainer<float> t(net, imgTrain, split, nullptr, &imgTest);
      t.shouldStop = [&] { return t.step() >= stopAt; };
      t.run();
      CHECK(t.stopped());
      CHECK(t.step() == stopAt);
      const ddl::CheckpointMeta meta = ddl::readCheckpointMetadata(t.checkpointPath());
      CHECK(meta.step == stopAt);
      const nlohmann::json pos = nlohmann::json::parse(meta.extra.at("train_position"));
      CHECK(pos.at("batch").get<Index>() == (stopAt - 1) % 4 + 1);
      CHECK(strayFiles(split.outDir).empty());
    }
    ddl::DeltaNet<float> net(cfg, 77);
    ddl::Trainer<float> t(net, imgTrain, split, nullptr, &imgTest);
    t.resume(t.checkpointPath());
    CHECK(t.step() == stopAt);
    t.run();
    CHECK_FALSE(t.stopped());
    checkSameAsUninterrupted(full, fullTrainer, net, t);
  }
}

TEST_CASE("evaluate: an EvalStop ends after the batch it answers, over exactly the samples seen", "[train][stop][eval]") {
  const ddl::Dataset<float> test = gaussianBlobs(16, 3, 60, 52);  // batches of 16: 16, 16, 16, 12
  ddl::DeltaNet<float> net(smallConfig(16, 3), 2);
  ddl::SoftmaxCrossEntropy<float> loss;
  MatX<float> logits;
  ddl::Dataset<float> first32 = test;
  first32.images = test.images.leftCols(32);
  first32.labels.resize(32);
  const ddl::EvalResult whole = ddl::evaluate(net, loss, test, 16, logits);
  const ddl::EvalResult prefix = ddl::evaluate(net, loss, first32, 16, logits);
  for (const bool observed : {false, true}) {
    CAPTURE(observed);
    int asked = 0, batches = 0;
    auto run = [&](const ddl::EvalStop& stop) {
      asked = batches = 0;
      return observed ? ddl::evaluate(net, loss, test, 16, logits, [&] { ++batches; }, stop)
                      : ddl::evaluate(net, loss, test, 16, logits, stop);
    };
    const ddl::EvalResult cut = run(ddl::EvalStop{[&] { return ++asked == 2; }});
    CHECK(cut.stopped);
    CHECK(cut.count == 32);
    CHECK(asked == 2);
    if (observed) CHECK(batches == 2);
    CHECK(cut.loss == prefix.loss);  // the same sums in the same order
    CHECK(cut.accuracy == prefix.accuracy);
    const ddl::EvalResult never = run(ddl::EvalStop{[&] { ++asked; return false; }});
    CHECK_FALSE(never.stopped);
    CHECK(asked == 3);  // not after the last batch: a finished evaluation is never reported stopped
    CHECK(never.count == 60);
    CHECK(never.loss == whole.loss);
    CHECK(never.accuracy == whole.accuracy);
    const ddl::EvalResult always = run(ddl::EvalStop{[] { return true; }});
    CHECK(always.stopped);
    CHECK(always.count == 16);
  }
}

TEST_CASE("Trainer: a stop during an epoch's evaluation leaves the epoch open, and resume is bit-identical", "[train][stop][trainer]") {
  const ddl::Dataset<float> train = gaussianBlobs(16, 3, 120, 51), validation = gaussianBlobs(16, 3, 60, 53),
                            test = gaussianBlobs(16, 3, 60, 52);
  const ddl::DeltaNetConfig cfg = smallConfig(16, 3);
  ddl::TrainerOptions opt = smallOptions(freshDir("evalstop_full"));
  opt.evalBatch = 16;  // 4 evaluation batches per set
  ddl::DeltaNet<float> full(cfg, 2);
  ddl::Trainer<float> fullTrainer(full, train, opt, &validation, &test);
  fullTrainer.run();

  for (const bool inTest : {false, true}) {  // stopped in the validation or in the test evaluation of epoch 2
    CAPTURE(inTest);
    ddl::TrainerOptions split = opt;
    split.outDir = freshDir("evalstop_split");
    {
      ddl::DeltaNet<float> net(cfg, 2);
      ddl::Trainer<float> t(net, train, split, &validation, &test);
      int askedInEpoch2Evaluation = 0;
      // After step 8 (the last of epoch 2) the loop asks once at the end of the epoch (1), then after
      // every evaluation batch but a set's last: validation 2-4, test 5-7.
      t.shouldStop = [&] { return t.step() == 8 && ++askedInEpoch2Evaluation == (inTest ? 6 : 3); };
      const ddl::EpochMetrics last = t.run();
      CHECK(t.stopped());
      CHECK(t.epoch() == 1);
      CHECK(last.epoch == 1);
      CHECK(t.batchInEpoch() == t.batchesPerEpoch());
      const ddl::CheckpointMeta meta = ddl::readCheckpointMetadata(t.checkpointPath());
      CHECK(meta.epoch == 1);
      CHECK(meta.step == 8);
      CHECK(nlohmann::json::parse(meta.extra.at("train_position")).at("batch").get<Index>() == 4);
      CHECK(lines(t.metricsPath()).size() == 2);  // the header and epoch 1: no row for the open epoch
      CHECK(strayFiles(split.outDir).empty());
    }
    ddl::DeltaNet<float> net(cfg, 77);
    ddl::Trainer<float> t(net, train, split, &validation, &test);
    t.resume(t.checkpointPath());
    t.run();
    CHECK_FALSE(t.stopped());
    checkSameAsUninterrupted(full, fullTrainer, net, t);
  }
}

TEST_CASE("Trainer: a stop requested before training returns at once and writes nothing", "[train][stop][trainer]") {
  const ddl::Dataset<float> train = gaussianBlobs(16, 3, 120, 51);
  const ddl::TrainerOptions opt = smallOptions(freshDir("stop_early"));
  ddl::DeltaNet<float> net(smallConfig(16, 3), 2);
  const auto before = paramValues(net);
  ddl::Trainer<float> t(net, train, opt);
  t.shouldStop = [] { return true; };
  const ddl::EpochMetrics m = t.run();
  CHECK(t.stopped());
  CHECK(t.step() == 0);
  CHECK(m.test.count == 0);
  CHECK_FALSE(std::filesystem::exists(opt.outDir));
  CHECK(bitIdentical(before, paramValues(net)));
}

TEST_CASE("Trainer::resume refuses a train_position that does not fit and changes nothing", "[train][stop][trainer]") {
  const ddl::Dataset<float> train = gaussianBlobs(16, 3, 120, 51);
  const ddl::TrainerOptions opt = smallOptions(freshDir("bad_position"));
  ddl::DeltaNet<float> net(smallConfig(16, 3), 2);
  ddl::Trainer<float> t(net, train, opt);
  t.shouldStop = [&] { return t.step() >= 2; };
  t.run();
  const ddl::CheckpointMeta good = ddl::readCheckpointMetadata(t.checkpointPath());
  const std::vector<std::string> bad = {R"({"batch":5,"loss_sum":1.0,"correct":0,"seen":160})",
                                        R"({"batch":2,"loss_sum":1.0,"correct":0,"seen":63})",
                                        R"({"batch":2,"loss_sum":1.0,"correct":65,"seen":64})",
                                        R"({"batch":2.5,"loss_sum":1.0,"correct":0,"seen":64})",
                                        R"({"batch":2,"loss_sum":-1.0,"correct":0,"seen":64})",
                                        R"({"batch":2,"correct":0,"seen":64})", R"([1,2])", R"(not json)"};
  for (const std::string& position : bad) {
    CAPTURE(position);
    ddl::CheckpointMeta meta = good;
    meta.extra["train_position"] = position;
    const std::string path = opt.outDir + "/edited.safetensors";
    ddl::saveCheckpoint(path, net, t.optimizer(), meta);
    ddl::DeltaNet<float> other(smallConfig(16, 3), 9);
    const auto before = paramValues(other);
    ddl::Trainer<float> r(other, train, opt);
    const std::string msg = thrownMessage<ddl::IoError>([&] { r.resume(path); });
    CHECK(contains(msg, "ddl::TrainingLoop::resume"));
    CHECK(contains(msg, "bad train_position metadata"));
    CHECK(r.step() == 0);
    CHECK(bitIdentical(before, paramValues(other)));
  }
}

TEST_CASE("Trainer: an output folder that cannot be written fails before the first step", "[train][output][trainer]") {
  const ddl::Dataset<float> train = gaussianBlobs(16, 3, 120, 51);
  const std::string base = freshDir("unwritable");
  std::filesystem::create_directories(base);
  std::ofstream(base + "/a-file") << "x";
  struct Case {
    std::string dir, expect;
  };
  std::vector<Case> cases = {{base + "/a-file/out", "cannot create output folder '" + base + "/a-file/out'"},
                             {"/proc/self", "cannot write to output folder '/proc/self'"}};
  // chmod stops writes only for unprivileged users (tests may run as root).
  const std::string readOnly = base + "/read-only";
  std::filesystem::create_directories(readOnly);
  chmod(readOnly.c_str(), 0555);
  if (geteuid() != 0) cases.push_back({readOnly, "cannot write to output folder '" + readOnly + "': Permission denied"});
  for (const Case& c : cases) {
    CAPTURE(c.dir);
    ddl::TrainerOptions opt = smallOptions(c.dir);
    ddl::DeltaNet<float> net(smallConfig(16, 3), 2);
    ddl::Trainer<float> t(net, train, opt);
    int batches = 0;
    t.onBatch = [&](const ddl::BatchProgress&) { ++batches; };
    const std::string msg = thrownMessage<ddl::IoError>([&] { t.run(); });
    CHECK(contains(msg, "ddl::TrainingLoop: " + c.expect));
    CHECK(batches == 0);
  }
  chmod(readOnly.c_str(), 0755);
  CHECK(std::filesystem::is_empty(readOnly));
}

TEST_CASE("Trainer: a full disk fails the checkpoint write, the previous one stays byte-identical", "[train][output][trainer]") {
  BlobTrainer run(freshDir("full_disk"));
  std::string afterEpoch1;
  std::unique_ptr<FileSizeLimit> limit;
  run.trainer.onEpoch = [&](const ddl::EpochMetrics& m) {
    if (m.epoch != 1) return;
    afterEpoch1 = fileBytes(run.trainer.checkpointPath());
    limit = std::make_unique<FileSizeLimit>(afterEpoch1.size() / 2);  // the next checkpoint does not fit
    REQUIRE(limit->ok());
  };
  std::string msg;
  try {
    run.trainer.run();
  } catch (const ddl::IoError& e) {
    msg = e.what();
  }
  limit.reset();
  CAPTURE(msg);
  CHECK(contains(msg, "ddl::TrainingLoop: cannot write the checkpoint of step 8"));
  CHECK(contains(msg, std::strerror(EFBIG)));
  CHECK(contains(msg, "the previous checkpoint, if any, is unchanged"));
  CHECK(fileBytes(run.trainer.checkpointPath()) == afterEpoch1);
  CHECK(lines(run.trainer.metricsPath()).size() == 2);  // no row for the epoch whose checkpoint failed
  CHECK(strayFiles(run.opt.outDir).empty());      // the temporary is gone
  // The run can continue from the intact checkpoint.
  ddl::DeltaNet<float> again(smallConfig(16, 3), 5);
  ddl::Trainer<float> r(again, run.train, run.opt, nullptr, &run.test);
  r.resume(r.checkpointPath());
  CHECK(r.step() == 4);
}

TEST_CASE("stop signals: SIGINT and SIGTERM are recorded, not fatal, until the first one", "[train][stop][signal]") {
  ddl::installStopSignalHandlers();
  CHECK(ddl::stopSignal() == 0);
  std::raise(SIGTERM);
  CHECK(ddl::stopSignal() == SIGTERM);
  CHECK(ddl::signalName(SIGTERM) == "SIGTERM");
  CHECK(ddl::signalName(SIGINT) == "SIGINT");
  ddl::detail::g_stopSignal = 0;
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

}  // namespace test_train_guard
