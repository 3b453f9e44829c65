// The language model in the training loop: DeltaLM + NextTokenTask (train/next_token_task.hpp) +
// TextWindows (train/text_windows.hpp) + AdamW through ddl::TrainingLoop. It learns a small text, a
// run stopped mid-epoch resumes to the same bytes, and the held-out figure does not depend on the
// evaluation batch size.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/core/token_batch.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/next_token_task.hpp"
#include "ddl/train/text_windows.hpp"
#include "ddl/train/trainer_options.hpp"
#include "ddl/train/training_loop.hpp"

namespace test_lm_training {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl_test::contains;
using ddl_test::thrownMessage;

namespace {

std::vector<std::uint8_t> textOf(const std::string& s, int repeats) {
  std::vector<std::uint8_t> out;
  for (int r = 0; r < repeats; ++r) out.insert(out.end(), s.begin(), s.end());
  return out;
}

ddl::DeltaLMConfig tinyConfig(const std::string& variant) {
  ddl::DeltaLMConfig c = ddl_test::deltaLMConfig(16, 2, 1, 12, 24, variant);
  if (c.dv > 1) c.dv = 2;
  return c;
}

ddl::TrainerOptions options(const std::string& outDir, int epochs) {
  ddl::TrainerOptions o;
  o.epochs = epochs;
  o.batchSize = 4;
  o.adam.lr = 1e-2;
  o.warmupSteps = 3;
  o.seed = 3;
  o.threads = 1;
  o.evalBatch = 4;
  o.outDir = outDir;
  return o;
}

std::string freshDir(const std::string& name) { return ddl_test::clearedTestPath("lm_training_" + name); }

std::string readFile(const std::string& path) { return ddl_test::fileBytes(path); }

using Loop = ddl::TrainingLoop<ddl::DeltaLM<float>, ddl::NextTokenTask<float>, ddl::TextWindows<float>, ddl::AdamW<float>>;

const std::string kSentence = "the quick brown fox jumps over the lazy dog; ";

}  // namespace

TEST_CASE("DeltaLM learns a text through the training loop and resumes mid-epoch to the same bytes", "[lm][train][resume]") {
  const std::vector<std::uint8_t> train = textOf(kSentence, 40), validation = textOf(kSentence, 3);
  const ddl::DeltaLMConfig cfg = tinyConfig("cc");
  const ddl::TrainerOptions full = options(freshDir("full"), 3);

  ddl::DeltaLM<float> fullModel(cfg, 1);
  ddl::NextTokenTask<float> fullTask;
  ddl::TextWindows<float> fullSource(train, 4, 12, 10, full.seed);
  ddl::AdamW<float> fullAdam(full.adam);
  Loop fullLoop(fullModel, fullTask, fullSource, fullAdam, full, &validation);
  const double before = fullLoop.evaluate(validation).loss;
  const ddl::EpochMetrics last = fullLoop.run();
  CAPTURE(before, last.validation.loss, last.validation.accuracy);
  CHECK(std::abs(before - std::log(256.0)) < 0.2);  // starts near uniform over bytes
  // 30 steps bring the loss to 0.59-0.62 of the start for this cc model with the authors' per-feature
  // compressor, with K 2, 3 or 4 and with the free compressor alike (seeds 1-3); the mean-started
  // shared kernel it had before happened to pass 0.6.
  CHECK(last.validation.loss < 0.65 * before);
  CHECK(last.validation.count == static_cast<Index>(validation.size()) - 1);
  const ddl::CheckpointMeta meta = ddl::readCheckpointMetadata(fullLoop.checkpointPath());
  CHECK(contains(meta.modelConfig, "\"model\":\"delta_lm\""));
  CHECK(meta.preset == "code");

  ddl::TrainerOptions split = options(freshDir("split"), 3);
  {
    ddl::DeltaLM<float> model(cfg, 1);
    ddl::NextTokenTask<float> task;
    ddl::TextWindows<float> source(train, 4, 12, 10, split.seed);
    ddl::AdamW<float> adam(split.adam);
    Loop loop(model, task, source, adam, split, &validation);
    loop.shouldStop = [&] { return loop.step() == 13; };
    loop.run();
    REQUIRE(loop.stopped());
    CHECK(loop.batchInEpoch() == 3);
  }
  ddl::DeltaLM<float> model(cfg, 77);  // another init: the checkpoint replaces it
  ddl::NextTokenTask<float> task;
  ddl::TextWindows<float> source(train, 4, 12, 10, split.seed);
  ddl::AdamW<float> adam(split.adam);
  Loop loop(model, task, source, adam, split, &validation);
  loop.resume(loop.checkpointPath());
  const ddl::EpochMetrics resumed = loop.run();
  CHECK(resumed.validation.loss == last.validation.loss);
  CHECK(readFile(loop.checkpointPath()) == readFile(fullLoop.checkpointPath()));

  // A checkpoint of another variant is refused before any tensor is read.
  ddl::DeltaLM<float> other(tinyConfig("dv1"), 1);
  ddl::TextWindows<float> otherSource(train, 4, 12, 10, split.seed);
  ddl::AdamW<float> otherAdam(split.adam);
  Loop refused(other, task, otherSource, otherAdam, split, &validation);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { refused.resume(loop.checkpointPath()); }),
                 "model configuration differs"));
}

TEST_CASE("NextTokenTask evaluates every held-out byte once, whatever the batch size", "[lm][eval]") {
  ddl::DeltaLMConfig cfg = tinyConfig("dv1");
  cfg.context = 5;
  ddl::DeltaLM<double> lm(cfg, 4);
  const std::vector<std::uint8_t> text = textOf(kSentence, 1);  // 45 bytes: 8 windows of 5 and one of 4
  ddl::NextTokenTask<double> task;
  MatX<double> scratch;
  const ddl::EvalResult one = task.evaluate(lm, text, 1, scratch);
  const ddl::EvalResult three = task.evaluate(lm, text, 3, scratch);
  CHECK(one.count == 44);
  CHECK(three.count == 44);
  CHECK(std::abs(one.loss - three.loss) < 1e-13);
  CHECK(one.accuracy == three.accuracy);
  // By hand: window w reads bytes 5w .. 5w + len - 1 and predicts the next ones.
  double sum = 0.0;
  ddl::SoftmaxCrossEntropy<double> ce;
  for (std::size_t start = 0; start + 1 < text.size(); start += 5) {
    const std::size_t len = std::min<std::size_t>(5, text.size() - 1 - start);
    ddl::TokenBatch b;
    b.layout = ddl::TokenLayout::sequence(1, static_cast<Index>(len));
    std::vector<int> next;
    for (std::size_t t = 0; t < len; ++t) {
      b.ids.push_back(text[start + t]);
      next.push_back(text[start + t + 1]);
    }
    MatX<double> logits;
    lm.forwardInference(b, logits);
    sum += ce.forward(logits, next) * static_cast<double>(len);
  }
  CHECK(std::abs(one.loss - sum / 44.0) < 1e-13);
  CHECK(std::abs(ddl::bitsPerByte(one.loss) - one.loss / std::log(2.0)) < 1e-15);
}

TEST_CASE("TextWindows draws reproducible windows and refuses what cannot work", "[lm][data]") {
  const std::vector<std::uint8_t> text = textOf(kSentence, 2);
  ddl::TextWindows<float> a(text, 3, 7, 4, 9), b(text, 3, 7, 4, 9);
  ddl::TokenBatch xa, xb;
  std::vector<int> ya, yb;
  a.startEpoch(1);
  b.startEpoch(1);
  b.seek(2);
  REQUIRE(a.next(xa, ya));
  REQUIRE(a.next(xa, ya));
  REQUIRE(a.next(xa, ya));
  REQUIRE(b.next(xb, yb));
  CHECK(xa.ids == xb.ids);
  CHECK(ya == yb);
  CHECK(xa.layout == ddl::TokenLayout::sequence(3, 7));
  for (std::size_t i = 0; i + 1 < 7; ++i) CHECK(ya[i] == xa.ids[i + 1]);
  REQUIRE(a.next(xa, ya));
  CHECK_FALSE(a.next(xa, ya));
  CHECK(a.samplesIn(4) == 84);

  const std::vector<std::uint8_t> tiny = textOf("abc", 1);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { ddl::TextWindows<float>(tiny, 2, 3, 1, 1); }), "does not fit"));
  ddl::DeltaLMConfig cfg = tinyConfig("dv1");
  ddl::DeltaLM<float> lm(cfg, 1);
  ddl::TextWindows<float> tooLong(text, 2, 13, 1, 1);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { tooLong.checkModel(lm, "test"); }), "exceed the model's context 12"));
  cfg.vocab = 100;
  ddl::DeltaLM<float> small(cfg, 1);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { a.checkModel(small, "test"); }), "vocabulary of 256"));
}

// As for DeltaNet (test_threads_identical.cpp): a DeltaLM large enough that every parallel threshold is
// crossed (Linear 2^20 multiply-adds, delta writes 2^15, AdamW 2^16 entries: fc1 is 512 x 128)
// trains three clipped AdamW steps on 1 and on 2 threads to the same bits.
TEST_CASE("1 and 2 threads train a DeltaLM bit-identically above every parallel threshold", "[lm][train][threads]") {
  const std::string variant = GENERATE(std::string("dv1"), std::string("cc-ec"));
  CAPTURE(variant);
  const std::vector<std::uint8_t> train = textOf(kSentence, 200);
  ddl::DeltaLMConfig cfg = ddl_test::deltaLMConfig(128, 4, 1, 64, 512, variant);
  if (cfg.dv > 1) cfg.dv = 2;
  auto run = [&](int threads) {
    ddl::TrainerOptions o = options("", 1);
    o.batchSize = 32;
    o.threads = threads;
    o.clipNorm = 1.0;
    o.warmupSteps = 1;
    ddl::DeltaLM<float> lm(cfg, 1);
    ddl::NextTokenTask<float> task;
    ddl::TextWindows<float> source(train, o.batchSize, cfg.context, 3, o.seed);
    ddl::AdamW<float> adam(o.adam);
    Loop loop(lm, task, source, adam, o);
    const ddl::EpochMetrics m = loop.run();
    std::vector<float> values;
    lm.visitParams("", [&](const std::string&, ddl::Param<float>& p) {
      values.insert(values.end(), p.value.data(), p.value.data() + p.value.size());
    });
    values.push_back(static_cast<float>(m.trainLoss));
    return values;
  };
  const std::vector<float> one = run(1), two = run(2);
  REQUIRE(one.size() == two.size());
  CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
}

namespace {
// Two ranks, seen from rank 0, where no collective call may happen: the source check comes first.
class TwoRanksNoCalls final : public ddl::Collective {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void allreduceSum(float*, std::size_t) override { called(); }
  void allreduceSum(double*, std::size_t) override { called(); }
  void broadcast(void*, std::size_t, int) override { called(); }
  void allgather(std::uint64_t, std::uint64_t*) override { called(); }
  void barrier() override { called(); }
  std::string describe() const override { return "2 ranks (test)"; }

 private:
  [[noreturn]] static void called() { throw std::logic_error("a collective call"); }
};
}  // namespace

TEST_CASE("A data-parallel loop refuses a batch source that is not this rank's shard", "[lm][train][distributed]") {
  const std::vector<std::uint8_t> train = textOf(kSentence, 40);
  ddl::DeltaLM<float> model(tinyConfig("dv1"), 1);
  ddl::NextTokenTask<float> task;
  ddl::AdamW<float> adam(ddl::AdamWOptions{});
  TwoRanksNoCalls comm;
  const ddl::TrainerOptions opt = options("", 1);

  ddl::TextWindows<float> whole(train, 4, 12, 10, opt.seed);  // not sharded: every rank would draw the same
  Loop unsharded(model, task, whole, adam, opt);
  unsharded.distribute(comm);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { unsharded.run(); }),
                 "ddl::TrainingLoop::run: data-parallel on rank 0 of 2, but the batch source yields rank 0 of 1's part"));

  ddl::TextWindows<float> other(train, 4, 12, 10, opt.seed);
  other.shard(1, 2);  // rank 1's part on rank 0
  Loop wrongShard(model, task, other, adam, opt);
  wrongShard.distribute(comm);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { wrongShard.run(); }), "yields rank 1 of 2's part"));

  ddl::TextWindows<float> mine(train, 4, 12, 10, opt.seed);
  mine.shard(0, 2);  // the right part: the loop goes on to its first collective call
  Loop sharded(model, task, mine, adam, opt);
  sharded.distribute(comm);
  CHECK(thrownMessage<std::logic_error>([&] { sharded.run(); }) == "a collective call");
}

}  // namespace test_lm_training
