#pragma once
// ddl/train/trainer.hpp: a small epoch loop for a classifier (DeltaNet, ConvDeltaNet), used by the examples.
//
//   ddl::Trainer<float> trainer(net, train, opts, &validation, &test);     // DeltaNet<float>
//   ddl::Trainer<float, ddl::ConvDeltaNet<float>> conv(cnet, train, opts);  // images
// The model is anything with forward(X (inputDim, B), logits), backward(dLogits), visitParams,
// inputDim(), classes(), blocks() (each with residual(), for the gate audit) and config() whose
// type has toKeyValues() and a `preset` member.
//   trainer.onBatch = [&](const ddl::BatchProgress& p) { ... };   // progress display
//   trainer.onEpoch = [&](const ddl::EpochMetrics& m) { ... };
//   if (resume) trainer.resume(trainer.checkpointPath());
//   trainer.run();
//
// Per step: lr from the schedule (warmup + cosine/step/constant over all epochs), then trainStep
// with AdamW. Per epoch: evaluation on the validation and test sets, a row of metrics.csv and a
// checkpoint (atomic) in opts.outDir. The checkpoint holds the parameters, AdamW's moments and step
// count, the epoch, the model configuration (DeltaNetConfig::toKeyValues as JSON), the preset and
// the training options; the batch order is a function of (seed, epoch) (see Batcher), so a run
// resumed from the checkpoint of epoch e is bit-identical to one that never stopped.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddl/core/error.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/dataset.hpp"
#include "ddl/diag/gate_audit.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/io/metrics_csv.hpp"
#include "ddl/nn/cross_entropy.hpp"
#include "ddl/nn/delta_net.hpp"
#include "ddl/nn/delta_net_config.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/lr_schedule.hpp"
#include "ddl/train/train_step.hpp"

namespace ddl {

struct TrainerOptions {
  int epochs = 10;
  Index batchSize = 128;
  AdamWOptions adam;                                  // adam.lr is the peak learning rate
  LrScheduleKind schedule = LrScheduleKind::Cosine;
  std::int64_t warmupSteps = 0;
  double minLrFactor = 0.0;                           // cosine floor = minLrFactor * lr
  std::int64_t stepEvery = 0;                         // Step schedule: decay period in steps (0 = epochs/3)
  double stepGamma = 0.1;                             // Step schedule: factor per decay
  double clipNorm = 0.0;                              // 0 = no gradient clipping
  double labelSmoothing = 0.0;
  AugmentOptions augment;                             // random crop / flip of training batches
  std::uint64_t seed = 1;                             // batch order and augmentation
  int threads = 0;                                    // 0 = all hardware threads
  Index evalBatch = 1000;
  std::string outDir;                                 // metrics.csv + checkpoint.safetensors; empty = none
  std::map<std::string, std::string> extraMeta;       // stored verbatim in every checkpoint

  // Throws ValueError naming the first option outside its domain.
  void validate() const {
    const char* fn = "ddl::TrainerOptions";
    require(epochs >= 1, fn, "epochs must be >= 1, got ", epochs);
    require(batchSize >= 1, fn, "batchSize must be >= 1, got ", batchSize);
    require(warmupSteps >= 0, fn, "warmupSteps must be >= 0, got ", warmupSteps);
    require(minLrFactor >= 0 && minLrFactor <= 1, fn, "minLrFactor must be in [0, 1], got ", minLrFactor);
    require(stepEvery >= 0, fn, "stepEvery must be >= 0, got ", stepEvery);
    require(clipNorm >= 0, fn, "clipNorm must be >= 0 (0 = off), got ", clipNorm);
    require(labelSmoothing >= 0 && labelSmoothing < 1, fn, "labelSmoothing must be in [0, 1), got ", labelSmoothing);
    require(threads >= 0, fn, "threads must be >= 0 (0 = all cores), got ", threads);
    require(evalBatch >= 1, fn, "evalBatch must be >= 1, got ", evalBatch);
    validateAdamWOptions(adam);
  }

  // The options that decide the trajectory, as JSON (stored in checkpoints, compared on resume).
  nlohmann::json toJson() const {
    return nlohmann::json{{"epochs", epochs},
                          {"batch", batchSize},
                          {"lr", adam.lr},
                          {"beta1", adam.beta1},
                          {"beta2", adam.beta2},
                          {"adam_eps", adam.eps},
                          {"weight_decay", adam.weightDecay},
                          {"schedule", toString(schedule)},
                          {"warmup_steps", warmupSteps},
                          {"min_lr_factor", minLrFactor},
                          {"step_every", stepEvery},
                          {"step_gamma", stepGamma},
                          {"clip_norm", clipNorm},
                          {"label_smoothing", labelSmoothing},
                          {"augment", augment.enabled},
                          {"augment_pad", augment.pad},
                          {"augment_flip", augment.flip},
                          {"seed", seed}};
  }
  // Inverse of toJson (missing keys keep their current values); IoError on a wrong type.
  void updateFromJson(const nlohmann::json& j) {
    try {
      auto get = [&j](const char* key, auto& field) {
        if (j.contains(key)) field = j.at(key).get<std::decay_t<decltype(field)>>();
      };
      std::string sched = toString(schedule);
      get("epochs", epochs);
      get("batch", batchSize);
      get("lr", adam.lr);
      get("beta1", adam.beta1);
      get("beta2", adam.beta2);
      get("adam_eps", adam.eps);
      get("weight_decay", adam.weightDecay);
      get("schedule", sched);
      get("warmup_steps", warmupSteps);
      get("min_lr_factor", minLrFactor);
      get("step_every", stepEvery);
      get("step_gamma", stepGamma);
      get("clip_norm", clipNorm);
      get("label_smoothing", labelSmoothing);
      get("augment", augment.enabled);
      get("augment_pad", augment.pad);
      get("augment_flip", augment.flip);
      get("seed", seed);
      schedule = parseLrScheduleKind(sched);
    } catch (const nlohmann::json::exception& e) {
      throw IoError(message("ddl::TrainerOptions::updateFromJson", "bad training options JSON: ", e.what()));
    }
  }
};

// Reported after every training batch (running means over the epoch so far).
struct BatchProgress {
  int epoch = 0;        // 0-based
  int epochs = 0;
  Index batch = 0;      // batches done in this epoch
  Index batches = 0;    // batches per epoch
  double loss = 0.0;
  double accuracy = 0.0;
  double samplesPerSec = 0.0;
};

// One epoch's results; a data set that was not given has count == 0.
struct EpochMetrics {
  int epoch = 0;  // 1-based: epochs completed
  std::int64_t step = 0;
  double lr = 0.0;  // learning rate of the epoch's last step
  double trainLoss = 0.0, trainAccuracy = 0.0;
  EvalResult validation, test;
  double seconds = 0.0;        // wall time of the epoch incl. evaluation
  double samplesPerSec = 0.0;  // training throughput
  std::vector<GateStats> gates;  // per block, over the test set (else validation); empty when additive
  GateStats gatesAll;            // all blocks together (tokens == 0 when additive)
};

// The model configuration stored in a checkpoint by Trainer (model_config JSON); Config is
// DeltaNetConfig or ConvDeltaNetConfig (anything with a static fromKeyValues).
template <class Config = DeltaNetConfig>
Config configFromCheckpoint(const CheckpointMeta& meta, const std::string& path) {
  const char* fn = "ddl::configFromCheckpoint";
  if (meta.modelConfig.empty()) throw IoError(message(fn, path, ": the checkpoint has no model_config metadata"));
  std::map<std::string, std::string> kv;
  try {
    kv = nlohmann::json::parse(meta.modelConfig).get<std::map<std::string, std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw IoError(message(fn, path, ": model_config is not a JSON object of strings: ", e.what()));
  }
  return Config::fromKeyValues(kv);
}

template <class Config>
std::string configJson(const Config& c) {
  return nlohmann::json(c.toKeyValues()).dump();
}

template <class S, class Model = DeltaNet<S>>
class Trainer {
 public:
  // The model and data sets must outlive the trainer; validation and test may be null.
  Trainer(Model& model, const Dataset<S>& train, const TrainerOptions& options,
          const Dataset<S>* validation = nullptr, const Dataset<S>* test = nullptr)
      : m_model(model), m_train(train), m_val(validation), m_test(test), m_opt(checked(options)),
        m_loss(options.labelSmoothing), m_adam(options.adam), m_batcher(train, batchOptions(options), options.seed) {
    const char* fn = "ddl::Trainer";
    require(train.features() == model.inputDim(), fn, "training images have ", train.features(),
            " features but the model expects inputDim = ", model.inputDim());
    require(train.numClasses <= model.classes(), fn, "the training set has ", train.numClasses,
            " classes but the model has ", model.classes(), " outputs");
    for (const Dataset<S>* d : {validation, test})
      if (d) checkShape(fn, "evaluation images", d->images, model.inputDim(), static_cast<Index>(d->labels.size()));
    m_schedule = makeSchedule();
  }
  Trainer(Model&, Dataset<S>&&, const TrainerOptions&, const Dataset<S>* = nullptr,
          const Dataset<S>* = nullptr) = delete;  // keeps a reference: a temporary would dangle

  std::function<void(const BatchProgress&)> onBatch;  // after every training batch
  std::function<void(int epoch)> onEpochStart;        // 0-based epoch about to run
  std::function<void(const EpochMetrics&)> onEpoch;   // after evaluation, CSV row and checkpoint

  // Trains the epochs from epoch() up to options.epochs and returns the last epoch's metrics
  // (count == 0 in them when nothing was left to run).
  EpochMetrics run() {
    setNumThreads(m_opt.threads);
    EpochMetrics last;
    if (!m_opt.outDir.empty()) openOutputs();
    while (m_epoch < m_opt.epochs) last = runEpoch();
    return last;
  }

  // Loads model, optimizer state, epoch and step from a checkpoint written by this class. Throws
  // IoError/ValueError when the model configuration or the training options differ from the saved
  // ones (a resumed run must follow the same trajectory) and leaves everything untouched then.
  void resume(const std::string& path) {
    const char* fn = "ddl::Trainer::resume";
    const CheckpointMeta head = readCheckpointMetadata(path);
    const std::string mine = configJson(m_model.config());
    if (head.modelConfig != mine)
      throw ValueError(message(fn, path, ": the checkpoint's model configuration differs from this model's\n  saved: ",
                               head.modelConfig, "\n  model: ", mine));
    const auto it = head.extra.find("train_options");
    if (it == head.extra.end()) throw IoError(message(fn, path, ": no train_options metadata (not a Trainer checkpoint)"));
    TrainerOptions saved = m_opt;
    saved.updateFromJson(nlohmann::json::parse(it->second, nullptr, false));
    if (saved.toJson() != m_opt.toJson())
      throw ValueError(message(fn, path, ": the training options differ from the saved run\n  saved: ",
                               saved.toJson().dump(), "\n  now:   ", m_opt.toJson().dump()));
    require(head.epoch >= 0 && head.epoch <= m_opt.epochs, fn, path, ": saved epoch ", head.epoch,
            " is outside [0, ", m_opt.epochs, "]");
    const CheckpointMeta meta = loadCheckpoint(path, m_model, m_adam);
    m_epoch = static_cast<int>(meta.epoch);
    m_step = meta.step;
    m_resumed = true;
  }

  // Writes the checkpoint of the current state (atomic replace).
  void saveCheckpoint(const std::string& path) {
    CheckpointMeta meta;
    meta.preset = m_model.config().preset;
    meta.modelConfig = configJson(m_model.config());
    meta.epoch = m_epoch;
    meta.step = m_step;
    meta.extra = m_opt.extraMeta;
    meta.extra["train_options"] = m_opt.toJson().dump();
    ddl::saveCheckpoint(path, m_model, m_adam, meta);
  }

  // Mean loss and accuracy on data; gates, when given, accumulates the gate statistics of every
  // block over the whole set (it stays empty for an additive net).
  EvalResult evaluate(const Dataset<S>& data, NetGateAccumulator* gates = nullptr) {
    return ddl::evaluate(m_model, m_loss, data, m_opt.evalBatch, m_logits, [&] {
      if (gates) gates->add(m_model);
    });
  }

  std::string checkpointPath() const { return m_opt.outDir + "/checkpoint.safetensors"; }
  std::string metricsPath() const { return m_opt.outDir + "/metrics.csv"; }
  int epoch() const { return m_epoch; }
  std::int64_t step() const { return m_step; }
  const LrSchedule& schedule() const { return m_schedule; }
  const TrainerOptions& options() const { return m_opt; }
  AdamW<S>& optimizer() { return m_adam; }
  Index batchesPerEpoch() const { return m_batcher.numBatches(); }

  static std::vector<std::string> metricsColumns() {
    return {"epoch",    "step",     "lr",        "train_loss",    "train_acc",   "val_loss", "val_acc",
            "test_loss", "test_acc", "seconds",  "samples_per_s", "beta_mean",   "beta_min", "beta_max",
            "beta_saturated"};
  }

 private:
  using Clock = std::chrono::steady_clock;

  static const TrainerOptions& checked(const TrainerOptions& o) {
    o.validate();
    return o;
  }
  static BatchOptions batchOptions(const TrainerOptions& o) {
    BatchOptions b;
    b.batchSize = o.batchSize;
    b.shuffle = true;
    b.augment = o.augment;
    return b;
  }

  LrSchedule makeSchedule() const {
    const std::int64_t total = static_cast<std::int64_t>(m_opt.epochs) * m_batcher.numBatches();
    const double lr = m_opt.adam.lr;
    switch (m_opt.schedule) {
      case LrScheduleKind::Constant: return LrSchedule::constant(lr, m_opt.warmupSteps);
      case LrScheduleKind::Cosine:
        require(total > m_opt.warmupSteps, "ddl::Trainer", "warmup of ", m_opt.warmupSteps,
                " steps does not fit in the ", total, " training steps");
        return LrSchedule::cosine(lr, m_opt.warmupSteps, total, m_opt.minLrFactor * lr);
      case LrScheduleKind::Step: {
        const std::int64_t every = m_opt.stepEvery > 0 ? m_opt.stepEvery : std::max<std::int64_t>(1, total / 3);
        return LrSchedule::stepDecay(lr, every, m_opt.stepGamma, m_opt.warmupSteps);
      }
    }
    return LrSchedule::constant(lr);
  }

  void openOutputs() {
    std::error_code ec;
    std::filesystem::create_directories(m_opt.outDir, ec);
    if (ec) throw IoError(message("ddl::Trainer", "cannot create output folder '", m_opt.outDir, "': ", ec.message()));
    if (!m_csv) m_csv = std::make_unique<MetricsCsv>(metricsPath(), metricsColumns(), /*append=*/m_resumed);
  }

  EpochMetrics runEpoch() {
    if (onEpochStart) onEpochStart(m_epoch);
    const auto t0 = Clock::now();
    m_batcher.startEpoch(static_cast<std::uint64_t>(m_epoch));
    const TrainStepOptions stepOpt{m_opt.clipNorm};
    double lossSum = 0.0, lr = m_adam.lr();
    Index correct = 0, seen = 0, batch = 0;
    while (m_batcher.next(m_X, m_y)) {
      lr = m_schedule.lrAt(m_adam.stepCount());
      m_adam.setLr(lr);
      const StepStats s = trainStep(m_model, m_loss, m_adam, m_X, m_y, m_buf, stepOpt);
      ++m_step;
      ++batch;
      lossSum += s.loss * static_cast<double>(s.count);
      correct += s.correct;
      seen += s.count;
      if (onBatch) {
        const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
        onBatch(BatchProgress{m_epoch, m_opt.epochs, batch, m_batcher.numBatches(),
                              lossSum / static_cast<double>(seen),
                              static_cast<double>(correct) / static_cast<double>(seen),
                              secs > 0 ? static_cast<double>(seen) / secs : 0.0});
      }
    }
    const double trainSecs = std::chrono::duration<double>(Clock::now() - t0).count();
    ++m_epoch;

    EpochMetrics m;
    m.epoch = m_epoch;
    m.step = m_step;
    m.lr = lr;
    m.trainLoss = lossSum / static_cast<double>(seen);
    m.trainAccuracy = static_cast<double>(correct) / static_cast<double>(seen);
    m.samplesPerSec = trainSecs > 0 ? static_cast<double>(seen) / trainSecs : 0.0;
    NetGateAccumulator gates;
    if (m_val) m.validation = evaluate(*m_val, m_test ? nullptr : &gates);
    if (m_test) m.test = evaluate(*m_test, &gates);
    m.gates = gates.stats();
    GateAccumulator all;
    for (const GateAccumulator& b : gates.blocks()) all.merge(b);
    m.gatesAll = all.stats();
    m.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (m_csv) writeRow(m);
    if (!m_opt.outDir.empty()) saveCheckpoint(checkpointPath());
    if (onEpoch) onEpoch(m);
    return m;
  }

  void writeRow(const EpochMetrics& m) {
    auto num = [](double v) { return csvNumber(v); };
    auto opt = [&](const EvalResult& r, double v) { return r.count > 0 ? num(v) : std::string(); };
    const GateStats& g = m.gatesAll;
    const bool hasGates = g.tokens > 0;
    auto gate = [&](double v) { return hasGates ? num(v) : std::string(); };
    m_csv->writeRow({std::to_string(m.epoch), std::to_string(m.step), num(m.lr), num(m.trainLoss),
                     num(m.trainAccuracy), opt(m.validation, m.validation.loss),
                     opt(m.validation, m.validation.accuracy), opt(m.test, m.test.loss), opt(m.test, m.test.accuracy),
                     num(m.seconds), num(m.samplesPerSec), gate(g.betaMean), gate(g.betaMin), gate(g.betaMax),
                     gate(g.saturatedFraction())});
  }

  Model& m_model;
  const Dataset<S>& m_train;
  const Dataset<S>* m_val;
  const Dataset<S>* m_test;
  TrainerOptions m_opt;
  SoftmaxCrossEntropy<S> m_loss;
  AdamW<S> m_adam;
  Batcher<S> m_batcher;
  LrSchedule m_schedule;
  std::unique_ptr<MetricsCsv> m_csv;
  int m_epoch = 0;
  std::int64_t m_step = 0;
  bool m_resumed = false;
  MatX<S> m_X, m_logits;
  std::vector<int> m_y;
  StepBuffers<S> m_buf;
};

}  // namespace ddl
