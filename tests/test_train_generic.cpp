// Tests for include/ddl/train/training_loop.hpp with parts that are not the built-in ones: a bigram
// next-token model (its input is a vector of token ids, not a matrix), a next-token task whose targets
// are the B*T following ids, a source of seeded random windows of a token sequence, and Sgd passed in.
// The loop trains them, checkpoints and resumes bit-identically mid-epoch; a step hook that scales the
// gradients (a stand-in for an allreduce) gives the hand-computed update; a hook that throws aborts the
// step with nothing written; hooks run before the NaN/Inf guard.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/io/safetensors.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/train/sgd.hpp"
#include "ddl/train/train_step.hpp"
#include "ddl/train/training_loop.hpp"

namespace test_train_generic {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl_test::contains;
using ddl_test::thrownMessage;

namespace {

constexpr Index kVocab = 8;

// logits of position j = column ids[j] of a (vocab, vocab) table: the next token's scores given this one.
class BigramModel {
 public:
  struct Config {
    Index vocab;
    std::map<std::string, std::string> toKeyValues() const {
      return {{"model", "bigram"}, {"vocab", std::to_string(vocab)}};
    }
  };

  BigramModel(Index vocab, std::uint64_t seed) : m_config{vocab}, m_table(vocab, vocab) {
    ddl::Rng rng(seed);
    for (Index j = 0; j < vocab; ++j)
      for (Index i = 0; i < vocab; ++i) m_table.value(i, j) = static_cast<float>(0.1 * rng.normal());
  }

  void forward(const std::vector<int>& ids, MatX<float>& logits) {
    m_ids = ids;  // the backward's input (sized once: no allocation in steady state)
    logits.resize(m_config.vocab, static_cast<Index>(ids.size()));
    for (std::size_t j = 0; j < ids.size(); ++j) logits.col(static_cast<Index>(j)) = m_table.value.col(ids[j]);
  }
  void backward(const MatX<float>& dLogits) {
    for (std::size_t j = 0; j < m_ids.size(); ++j) m_table.grad.col(m_ids[j]) += dLogits.col(static_cast<Index>(j));
  }
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    f(ddl::joinName(prefix, "table"), m_table);
  }
  const Config& config() const { return m_config; }
  MatX<float>& table() { return m_table.value; }

 private:
  Config m_config;
  ddl::Param<float> m_table;
  std::vector<int> m_ids;
};

struct TokenWindows {
  std::vector<int> input, target;  // target[i] is the token after input[i]
};

// Mean cross-entropy of the next token over all B*T positions; accuracy counts the argmax hits.
class NextTokenTask {
 public:
  using Scalar = float;
  using Target = std::vector<int>;
  using EvalData = TokenWindows;

  ddl::StepStats lossAndGradient(const MatX<float>& logits, const Target& next, MatX<float>& dLogits) {
    return ddl::detail::classificationLoss(m_loss, logits, next, dLogits);
  }
  template <class Model>
  ddl::EvalResult evaluate(Model& model, const EvalData& data, Index, MatX<float>& logits) {
    return evaluate(model, data, 0, logits, [] {});
  }
  template <class Model, class OnBatch>
  ddl::EvalResult evaluate(Model& model, const EvalData& data, Index, MatX<float>& logits, OnBatch&& onBatch) {
    model.forward(data.input, logits);
    ddl::EvalResult r;
    r.count = static_cast<Index>(data.target.size());
    r.loss = static_cast<double>(m_loss.forward(logits, data.target));
    r.accuracy = static_cast<double>(ddl::countCorrect(logits, data.target)) / static_cast<double>(r.count);
    onBatch();
    return r;
  }
  template <class Model>
  void checkEvalData(const Model&, const EvalData& data, const char* fn) const {
    ddl::require(data.input.size() == data.target.size(), fn, "evaluation windows need one target per input");
  }

 private:
  ddl::SoftmaxCrossEntropy<float> m_loss;
};

// B windows of T tokens per batch, their starts drawn from Rng(mix(mix(seed, epoch), batch)).
class RandomWindows {
 public:
  using Scalar = float;
  using Input = std::vector<int>;
  using Target = std::vector<int>;

  RandomWindows(const std::vector<int>& tokens, Index windows, Index length, Index batches, std::uint64_t seed)
      : m_tokens(&tokens), m_B(windows), m_T(length), m_batches(batches), m_seed(seed) {}

  Index batchesPerEpoch() const { return m_batches; }
  void startEpoch(std::uint64_t epoch) {
    m_epoch = epoch;
    m_batch = 0;
  }
  void seek(Index batch) {
    ddl::require(batch >= 0 && batch <= m_batches, "RandomWindows::seek", "batch ", batch, " outside [0, ", m_batches, "]");
    m_batch = batch;
  }
  bool next(Input& ids, Target& next) {
    if (m_batch >= m_batches) return false;
    ddl::Rng rng(ddl::detail::mixSeed(ddl::detail::mixSeed(m_seed, m_epoch), static_cast<std::uint64_t>(m_batch)));
    ids.resize(static_cast<std::size_t>(m_B * m_T));
    next.resize(ids.size());
    const std::uint64_t starts = m_tokens->size() - static_cast<std::size_t>(m_T);
    for (Index w = 0; w < m_B; ++w) {
      const std::size_t start = static_cast<std::size_t>(rng.below(starts));
      for (Index t = 0; t < m_T; ++t) {
        ids[static_cast<std::size_t>(w * m_T + t)] = (*m_tokens)[start + static_cast<std::size_t>(t)];
        next[static_cast<std::size_t>(w * m_T + t)] = (*m_tokens)[start + static_cast<std::size_t>(t) + 1];
      }
    }
    ++m_batch;
    return true;
  }
  Index samplesIn(Index batches) const { return batches * m_B * m_T; }
  template <class Model>
  void checkModel(const Model& model, const char* fn) const {
    ddl::require(model.config().vocab == kVocab, fn, "the model's vocabulary is not the corpus's");
  }

 private:
  const std::vector<int>* m_tokens;
  Index m_B, m_T, m_batches;
  std::uint64_t m_seed;
  std::uint64_t m_epoch = 0;
  Index m_batch = 0;
};

// A token sequence whose next token is (3 t + 1) mod 8 nine times in ten: a bigram model can learn it.
std::vector<int> corpus(std::size_t n, std::uint64_t seed) {
  ddl::Rng rng(seed);
  std::vector<int> t{0};
  while (t.size() < n)
    t.push_back(rng.uniform() < 0.9 ? (3 * t.back() + 1) % static_cast<int>(kVocab) : static_cast<int>(rng.below(kVocab)));
  return t;
}

TokenWindows heldOut(const std::vector<int>& tokens) {
  TokenWindows w;
  w.input.assign(tokens.begin(), tokens.end() - 1);
  w.target.assign(tokens.begin() + 1, tokens.end());
  return w;
}

using Loop = ddl::TrainingLoop<BigramModel, NextTokenTask, RandomWindows, ddl::Sgd<float>>;

ddl::LoopOptions loopOptions(const std::string& outDir, int epochs) {
  ddl::LoopOptions o;
  o.epochs = epochs;
  o.batchSize = 4;  // windows per batch (recorded; the source decides)
  o.schedule = ddl::LrScheduleKind::Cosine;
  o.warmupSteps = 2;
  o.seed = 5;
  o.threads = 1;
  o.outDir = outDir;
  return o;
}

ddl::SgdOptions momentumSgd(double momentum = 0.9) {
  ddl::SgdOptions s;
  s.lr = 0.5;
  s.momentum = momentum;
  return s;
}

std::string freshDir(const std::string& name) { return ddl_test::clearedTestPath("train_generic_" + name); }

std::string readFile(const std::string& path) { return ddl_test::fileBytes(path); }

// metrics.csv without the wall-clock columns (seconds, samples_per_s: the 10th and 11th).
std::vector<std::string> metricsWithoutTimes(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> rows;
  std::string line;
  while (std::getline(f, line)) {
    std::stringstream in(line);
    std::string field, kept;
    for (int column = 1; std::getline(in, field, ','); ++column)
      if (column != 10 && column != 11) kept += field + ",";
    rows.push_back(kept);
  }
  return rows;
}

bool sameBits(const MatX<float>& a, const MatX<float>& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<std::size_t>(a.size())) == 0;
}

}  // namespace

TEST_CASE("TrainingLoop: a next-token model, task and window source with Sgd learn, checkpoint and resume mid-epoch bit-identically",
          "[train][generic][resume]") {
  const std::vector<int> tokens = corpus(600, 3), evalTokens = corpus(200, 4);
  const TokenWindows validation = heldOut(evalTokens);
  const ddl::LoopOptions full = loopOptions(freshDir("full"), 3);

  BigramModel fullModel(kVocab, 1);
  NextTokenTask fullTask;
  RandomWindows fullSource(tokens, 4, 6, 5, 5);
  ddl::Sgd<float> fullSgd(momentumSgd());
  Loop fullLoop(fullModel, fullTask, fullSource, fullSgd, full, &validation);
  const double before = fullLoop.evaluate(validation).loss;
  std::vector<double> epochLoss;
  fullLoop.onEpoch = [&](const ddl::EpochMetrics& m) { epochLoss.push_back(m.validation.loss); };
  // A column of the program's own (the batches of each evaluation): the loop calls it with the
  // model, knowing nothing of either. The split runs below add it too, so their metrics compare.
  auto countingColumn = [](int& starts, int& observed) {
    return ddl::EvalColumns<BigramModel>{{"observed_batches"},
                                         [&starts, &observed] {
                                           ++starts;
                                           observed = 0;
                                         },
                                         [&observed](const BigramModel&) { ++observed; },
                                         [&observed] { return std::vector<std::string>{std::to_string(observed)}; }};
  };
  int starts = 0, observed = 0, splitStarts = 0, splitObserved = 0;
  fullLoop.addColumns(countingColumn(starts, observed));
  const ddl::EpochMetrics last = fullLoop.run();
  CAPTURE(before, last.validation.loss, last.validation.accuracy);
  CHECK(fullLoop.step() == 15);
  CHECK(last.validation.count == 199);
  CHECK(last.validation.loss < 0.6 * before);  // 2.05 -> 1.05 in 15 steps
  CHECK(last.validation.accuracy > 0.8);  // chance is 1/8
  REQUIRE(epochLoss.size() == 3);
  CHECK(starts == 3);
  CHECK(observed >= 1);
  CHECK(last.extra == std::vector<std::string>{std::to_string(observed)});
  {
    std::ifstream csv(fullLoop.metricsPath());
    std::string header;
    std::getline(csv, header);
    CHECK(header.size() > 17);
    CHECK(header.substr(header.size() - 17) == ",observed_batches");
  }
  // after run() opened metrics.csv
  CHECK(ddl_test::thrownMessage<ddl::ValueError>([&] { fullLoop.addColumns(ddl::EvalColumns<BigramModel>{}); })
            .find("ddl::TrainingLoop::addColumns") != std::string::npos);

  // What the checkpoint holds: the model's own configuration, the optimizer's settings and state.
  const ddl::CheckpointMeta meta = ddl::readCheckpointMetadata(fullLoop.checkpointPath());
  CHECK(meta.modelConfig == R"({"model":"bigram","vocab":"8"})");
  CHECK(meta.preset.empty());
  CHECK(meta.epoch == 3);
  CHECK(meta.step == 15);
  CHECK(*meta.optimizerStep == 15);
  const nlohmann::json saved = nlohmann::json::parse(meta.extra.at("train_options"));
  CHECK(saved.at("optimizer") == "sgd");
  CHECK(saved.at("lr") == 0.5);
  CHECK(saved.at("sgd_momentum") == 0.9);
  CHECK_FALSE(saved.contains("beta1"));
  // The loop's own options and the optimizer's; this task and source report no settings, so nothing
  // of a classifier's (label smoothing, augmentation) is recorded.
  std::set<std::string> keys;
  for (const auto& kv : saved.items()) keys.insert(kv.key());
  CHECK(keys == std::set<std::string>{"batch", "clip_norm", "epochs", "lr", "min_lr_factor", "optimizer", "schedule",
                                      "seed", "sgd_dampening", "sgd_momentum", "sgd_nesterov", "sgd_weight_decay",
                                      "step_every", "step_gamma", "warmup_steps"});
  CHECK(ddl::readSafetensorsHeader(fullLoop.checkpointPath()).find("optim.table.momentum_buffer") != nullptr);

  // The same run stopped after step 7 (epoch 2, batch 2 of 5), resumed into a model of another init.
  ddl::LoopOptions split = loopOptions(freshDir("split"), 3);
  {
    BigramModel model(kVocab, 1);
    NextTokenTask task;
    RandomWindows source(tokens, 4, 6, 5, 5);
    ddl::Sgd<float> sgd(momentumSgd());
    Loop loop(model, task, source, sgd, split, &validation);
    loop.addColumns(countingColumn(splitStarts, splitObserved));
    loop.shouldStop = [&] { return loop.step() == 7; };
    loop.run();
    CHECK(loop.stopped());
    CHECK(loop.epoch() == 1);
    CHECK(loop.batchInEpoch() == 2);
  }
  BigramModel model(kVocab, 99);
  NextTokenTask task;
  RandomWindows source(tokens, 4, 6, 5, 5);
  ddl::Sgd<float> sgd(momentumSgd());
  Loop loop(model, task, source, sgd, split, &validation);
  loop.addColumns(countingColumn(splitStarts, splitObserved));
  loop.resume(loop.checkpointPath());
  CHECK(loop.step() == 7);
  CHECK(sgd.stepCount() == 7);
  const ddl::EpochMetrics resumedLast = loop.run();
  CHECK(sameBits(model.table(), fullModel.table()));
  CHECK(resumedLast.validation.loss == last.validation.loss);
  CHECK(readFile(loop.checkpointPath()) == readFile(fullLoop.checkpointPath()));
  CHECK(metricsWithoutTimes(loop.metricsPath()) == metricsWithoutTimes(fullLoop.metricsPath()));
  CHECK(metricsWithoutTimes(loop.metricsPath()).size() == 4);

  // Another optimizer setting is another trajectory: the resume is refused, naming the key.
  BigramModel other(kVocab, 1);
  ddl::Sgd<float> slower(momentumSgd(0.5));
  RandomWindows otherSource(tokens, 4, 6, 5, 5);
  Loop refused(other, task, otherSource, slower, split, &validation);
  const std::string msg = thrownMessage<ddl::ValueError>([&] { refused.resume(loop.checkpointPath()); });
  CHECK(contains(msg, "training options differ"));
  CHECK(contains(msg, "\"sgd_momentum\":0.5"));
  CHECK(sameBits(other.table(), BigramModel(kVocab, 1).table()));
}

TEST_CASE("TrainingLoop: a hook that scales the gradients (an allreduce's stand-in) gives the hand-computed update",
          "[train][generic][hooks]") {
  const std::vector<int> tokens = corpus(300, 7);
  ddl::LoopOptions opt = loopOptions("", 1);
  opt.schedule = ddl::LrScheduleKind::Constant;
  opt.warmupSteps = 0;
  const double lr = 0.5, scale = 0.25;

  BigramModel model(kVocab, 2);
  const MatX<float> before = model.table();
  NextTokenTask task;
  RandomWindows source(tokens, 3, 5, 1, 11);
  ddl::Sgd<float> sgd(momentumSgd(0.0));
  Loop loop(model, task, source, sgd, opt);
  int calls = 0;
  loop.addStepHook([&](ddl::StepContext<float>& c) {
    ++calls;
    CHECK(c.step == 1);
    CHECK(c.epoch == 0);
    CHECK(c.batch == 0);
    CHECK(c.lr == lr);
    CHECK(c.stats.count == 15);
    CHECK(sameBits(model.table(), before));  // nothing updated yet
    for (const auto& p : c.params) p.param->grad *= static_cast<float>(scale);
  });
  loop.run();
  CHECK(calls == 1);

  // The gradient of the mean cross-entropy by hand, in double: column ids[j] gets (softmax - onehot) / N.
  RandomWindows again(tokens, 3, 5, 1, 11);
  std::vector<int> ids, next;
  REQUIRE(again.next(ids, next));
  Eigen::MatrixXd grad = Eigen::MatrixXd::Zero(kVocab, kVocab);
  for (std::size_t j = 0; j < ids.size(); ++j) {
    const Eigen::VectorXd z = before.col(ids[j]).cast<double>();
    Eigen::VectorXd p = (z.array() - z.maxCoeff()).exp();
    p /= p.sum();
    p(next[j]) -= 1.0;
    grad.col(ids[j]) += p / static_cast<double>(ids.size());
  }
  const Eigen::MatrixXd expected = before.cast<double>() - lr * scale * grad;
  const Eigen::MatrixXd unscaled = before.cast<double>() - lr * grad;
  const double error = (model.table().cast<double>() - expected).cwiseAbs().maxCoeff();
  CAPTURE(error);
  CHECK(error < 1e-6);
  CHECK((model.table().cast<double>() - unscaled).cwiseAbs().maxCoeff() > 1e-3);  // the scaling is visible
}

TEST_CASE("TrainingLoop: a hook that throws aborts the step, nothing is written and the last checkpoint stays",
          "[train][generic][hooks]") {
  const std::vector<int> tokens = corpus(400, 9);
  const ddl::LoopOptions opt = loopOptions(freshDir("abort"), 2);
  BigramModel model(kVocab, 3);
  NextTokenTask task;
  RandomWindows source(tokens, 4, 6, 4, 13);
  ddl::Sgd<float> sgd(momentumSgd());
  Loop loop(model, task, source, sgd, opt);
  loop.addStepHook([](ddl::StepContext<float>& c) {
    if (c.step == 6) throw ddl::ValueError("rank 1 disagrees at step 6");
  });
  std::string afterEpoch1;
  MatX<float> afterStep5;
  loop.onEpoch = [&](const ddl::EpochMetrics&) { afterEpoch1 = readFile(loop.checkpointPath()); };
  loop.onBatch = [&](const ddl::BatchProgress&) {
    if (loop.step() == 5) afterStep5 = model.table();
  };
  CHECK(thrownMessage<ddl::ValueError>([&] { loop.run(); }) == "rank 1 disagrees at step 6");
  REQUIRE_FALSE(afterEpoch1.empty());
  CHECK(readFile(loop.checkpointPath()) == afterEpoch1);
  CHECK(metricsWithoutTimes(loop.metricsPath()).size() == 2);  // the header and epoch 1
  CHECK(loop.step() == 5);
  CHECK(sgd.stepCount() == 5);
  CHECK(sameBits(model.table(), afterStep5));
  CHECK(ddl::readCheckpointMetadata(loop.checkpointPath()).step == 4);
}

TEST_CASE("TrainingLoop: hooks run before the NaN/Inf guard, which names the parameter a hook spoilt",
          "[train][generic][hooks][guard]") {
  const std::vector<int> tokens = corpus(200, 1);
  BigramModel model(kVocab, 4);
  const MatX<float> before = model.table();
  NextTokenTask task;
  RandomWindows source(tokens, 2, 4, 3, 1);
  ddl::Sgd<float> sgd(momentumSgd());
  Loop loop(model, task, source, sgd, loopOptions("", 1));
  std::vector<std::string> order;
  loop.addStepHook([&](ddl::StepContext<float>&) { order.push_back("first"); });
  loop.addStepHook([&](ddl::StepContext<float>& c) {
    order.push_back("second");
    c.params.begin()->param->grad(2, 1) = std::nanf("");
  });
  const std::string msg = thrownMessage<ddl::NonFiniteError>([&] { loop.run(); });
  CHECK(contains(msg, "ddl::TrainingLoop: training stopped in epoch 1, batch 1"));
  CHECK(contains(msg, "the gradient of parameter 'table' is not finite at step 1: entry (2, 1)"));
  CHECK(order == std::vector<std::string>{"first", "second"});
  CHECK(sameBits(model.table(), before));
  CHECK(sgd.stepCount() == 0);
  CHECK(contains(thrownMessage<ddl::ValueError>([&] { loop.addStepHook(nullptr); }), "the hook is empty"));
}

// The loop asks its parts at compile time what they have (core/detects.hpp); a wrong answer would go
// unnoticed (evaluate would fall back to forward, a stop request or a setting would be ignored).
struct InferenceModel {
  void forwardInference(const Eigen::Ref<const MatX<float>>&, MatX<float>&) {}
};
struct StoppableTask {
  using Scalar = float;
  using EvalData = TokenWindows;
  template <class Model, class OnBatch>
  ddl::EvalResult evaluate(Model&, const EvalData&, Index, MatX<float>&, OnBatch&&, const ddl::EvalStop&) {
    return {};
  }
};
struct ShardedSource {
  int rank() const { return 0; }
  int ranks() const { return 1; }
};
struct SettingsPart {
  template <class Put>
  void reportSettings(Put&& put) const { put("augment", true); }
};

TEST_CASE("TrainingLoop: what the loop asks its parts is answered by what the parts have", "[train][generic]") {
  using namespace ddl::detail;
  STATIC_REQUIRE(HasForwardInference<InferenceModel, float>::value);
  STATIC_REQUIRE(!HasForwardInference<BigramModel, float>::value);
  STATIC_REQUIRE(HasStoppableEvaluate<StoppableTask, BigramModel>::value);
  STATIC_REQUIRE(!HasStoppableEvaluate<NextTokenTask, BigramModel>::value);
  STATIC_REQUIRE(IsShardedSource<ShardedSource>::value);
  STATIC_REQUIRE(!IsShardedSource<RandomWindows>::value);
  STATIC_REQUIRE(HasReportSettings<SettingsPart>::value);
  STATIC_REQUIRE(!HasReportSettings<NextTokenTask>::value);
  STATIC_REQUIRE(IsOptimizer<ddl::Sgd<float>>::value);
  STATIC_REQUIRE(!IsOptimizer<BigramModel>::value);
}

}  // namespace test_train_generic
