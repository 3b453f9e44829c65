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
// with AdamW. Per epoch: evaluation on the validation and test sets, a checkpoint (atomic) and a
// row of metrics.csv in opts.outDir. The checkpoint holds the parameters, AdamW's moments and step
// count, the epoch, the position inside the epoch (train_position: batches done and the running
// loss and accuracy sums), the model configuration (DeltaNetConfig::toKeyValues as JSON), the preset
// and the training options; the batch order is a function of (seed, epoch, batch) (see Batcher), so
// a run resumed from any checkpoint, also one written mid-epoch, is bit-identical to one that never
// stopped.
//
// Guards: with options.checkFinite (default on) a NaN/Inf loss or gradient stops training with a
// NonFiniteError naming the step and the first bad parameter, before the update (finite_guard.hpp);
// nothing is written then, so the last checkpoint stays the last good state. shouldStop, polled
// after every step, ends run() early with a mid-epoch checkpoint (stopped() tells; stop_signal.hpp
// turns SIGINT/SIGTERM into it). A failed write throws IoError; the previous checkpoint stays intact.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "ddl/core/error.hpp"
#include "ddl/core/parse.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/dataset.hpp"
#include "ddl/diag/gate_audit.hpp"
#include "ddl/io/atomic_file.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/io/metrics_csv.hpp"
#include "ddl/nn/conv_delta_net_config.hpp"
#include "ddl/nn/cross_entropy.hpp"
#include "ddl/nn/delta_net.hpp"
#include "ddl/nn/delta_net_config.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/finite_guard.hpp"
#include "ddl/train/lr_schedule.hpp"
#include "ddl/train/train_step.hpp"

namespace ddl {

namespace detail {
// A JSON value that must be an integer in [lo, hi] (an integral float such as 3.0 is accepted;
// 2.7, 1e300 and 2^64 are not). Throws ValueError naming `what`.
template <class Int>
Int jsonInteger(const std::string& what, const nlohmann::json& v, Int lo, Int hi) {
  if (v.is_number_unsigned()) return integerInRange<Int>(what, v.get<std::uint64_t>(), lo, hi);
  if (v.is_number_integer()) return integerInRange<Int>(what, v.get<std::int64_t>(), lo, hi);
  if (v.is_number_float()) return integerFromDouble<Int>(what, v.get<double>(), lo, hi);
  throw ValueError(what + " expects an integer, got " + v.dump());
}
}  // namespace detail

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
  int threads = 0;                                    // 0 = OMP_NUM_THREADS if set, else the usable CPUs
  Index evalBatch = 1000;
  std::string outDir;                                 // metrics.csv + checkpoint.safetensors; empty = none
  bool checkFinite = true;                            // stop at a NaN/Inf loss or gradient (one pass per step)
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
    require(threads >= 0, fn, "threads must be >= 0 (0 = automatic), got ", threads);
    require(evalBatch >= 1, fn, "evalBatch must be >= 1, got ", evalBatch);
    require(augment.pad >= 0 && augment.pad <= (1 << 16), fn, "augment.pad must be in [0, 65536], got ", augment.pad);
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
  // Inverse of toJson (missing keys keep their current values). IoError on a wrong type, a
  // fractional or out-of-range integer (checked before any conversion) or an unknown schedule.
  void updateFromJson(const nlohmann::json& j) {
    const char* fn = "ddl::TrainerOptions::updateFromJson";
    try {
      auto get = [&j](const char* key, auto& field) {
        if (j.contains(key)) field = j.at(key).get<std::decay_t<decltype(field)>>();
      };
      auto getInt = [&j](const char* key, auto& field, auto lo, auto hi) {
        using Int = std::decay_t<decltype(field)>;
        if (j.contains(key))
          field = detail::jsonInteger<Int>(std::string("key '") + key + "'", j.at(key), static_cast<Int>(lo),
                                           static_cast<Int>(hi));
      };
      constexpr Index kMaxPad = 1 << 16;  // 2 * pad + 1 draws must not overflow
      std::string sched = toString(schedule);
      getInt("epochs", epochs, 1, std::numeric_limits<int>::max());
      getInt("batch", batchSize, 1, std::numeric_limits<Index>::max());
      get("lr", adam.lr);
      get("beta1", adam.beta1);
      get("beta2", adam.beta2);
      get("adam_eps", adam.eps);
      get("weight_decay", adam.weightDecay);
      get("schedule", sched);
      getInt("warmup_steps", warmupSteps, 0, std::numeric_limits<std::int64_t>::max());
      get("min_lr_factor", minLrFactor);
      getInt("step_every", stepEvery, 0, std::numeric_limits<std::int64_t>::max());
      get("step_gamma", stepGamma);
      get("clip_norm", clipNorm);
      get("label_smoothing", labelSmoothing);
      get("augment", augment.enabled);
      getInt("augment_pad", augment.pad, 0, kMaxPad);
      get("augment_flip", augment.flip);
      getInt("seed", seed, 0, std::numeric_limits<std::uint64_t>::max());
      schedule = parseLrScheduleKind(sched);
    } catch (const nlohmann::json::exception& e) {
      throw IoError(message(fn, "bad training options JSON: ", e.what()));
    } catch (const ValueError& e) {
      throw IoError(message(fn, "bad training options JSON: ", e.what()));
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

namespace detail {
// Metadata must not decide an allocation the file cannot back: before a model is built from a
// checkpoint's model_config, the header's tensor shapes (no data is read) must confirm every size
// the configuration names. A 188 KB file claiming d = 4096 is refused here, not after 2 GB.
inline void requireTensorShape(const SafetensorsHeader& h, const std::string& name,
                               const std::vector<std::int64_t>& shape) {
  const TensorInfo* t = h.find(name);
  if (t == nullptr || t->shape != shape)
    throw IoError(message("ddl::configFromCheckpoint", h.path, ": model_config implies tensor \"", name, "\" ",
                          shapeString(shape), ", the file ", t ? "holds " + shapeString(t->shape) : std::string("has none"),
                          " (model_config does not match the tensors; nothing was built)"));
}
inline void requireNoTensor(const SafetensorsHeader& h, const std::string& name, const char* why) {
  if (h.find(name) != nullptr)
    throw IoError(message("ddl::configFromCheckpoint", h.path, ": the file holds \"", name, "\", but model_config ",
                          why, " (model_config does not match the tensors; nothing was built)"));
}
inline void checkConfigShapes(const DeltaNetConfig& c, const SafetensorsHeader& h) {
  const Index hidden = c.block.hidden > 0 ? c.block.hidden : 4 * c.d;
  requireTensorShape(h, "input.weight", {c.d, c.inputDim});
  requireTensorShape(h, "norm.weight", {c.d});
  requireTensorShape(h, "head.weight", {c.classes, c.d});
  for (Index i = 0; i < c.depth; ++i)
    requireTensorShape(h, "blocks." + std::to_string(i) + ".mlp.fc1.weight", {hidden, c.d});
  requireNoTensor(h, "blocks." + std::to_string(c.depth) + ".norm.weight",
                  ("has depth " + std::to_string(c.depth)).c_str());
  const DeltaResidualOptions& r = c.block.residual;
  if (c.dv > 1) {
    if (c.block.compressor == CompressorKind::Structured) requireTensorShape(h, "readout.read.weight", {c.dv});
    else requireTensorShape(h, "readout.weight", {c.d, c.dv});
    if (c.depth > 0 && c.block.compressor == CompressorKind::Structured)
      requireTensorShape(h, "blocks.0.compress.conv.weight", {c.block.compressorKernel});
  }
  if (c.depth > 0 && r.residual != ResidualKind::Additive) {
    if (r.direction == DirectionSource::AuxiliaryMlp)
      requireTensorShape(h, "blocks.0.delta.direction.fc1.weight", {r.auxHidden > 0 ? r.auxHidden : std::max<Index>(c.d / 4, 1), c.d});
    if (r.gate == GateKind::TwoLayerTanh) requireTensorShape(h, "blocks.0.delta.gate.fc1.weight", {r.gateHidden, c.d});
  }
}
inline void checkConfigShapes(const ConvDeltaNetConfig& c, const SafetensorsHeader& h) {
  requireTensorShape(h, "stem.weight", {c.widths[0], c.channels, c.stemKernel, c.stemKernel});
  requireTensorShape(h, "norm.weight", {c.widths.back()});
  requireTensorShape(h, "head.weight", {c.classes, c.widths.back()});
  Index block = 0;
  for (std::size_t s = 0; s < c.widths.size(); ++s) {
    if (s > 0)
      requireTensorShape(h, "transitions." + std::to_string(s - 1) + ".conv.weight", {c.widths[s], c.widths[s - 1], 3, 3});
    for (Index i = 0; i < c.depths[s]; ++i, ++block)
      requireTensorShape(h, "blocks." + std::to_string(block) + ".conv.conv1.weight",
                         {c.branchRatio * c.widths[s], c.widths[s], 3, 3});
  }
  requireNoTensor(h, "blocks." + std::to_string(block) + ".norm.weight",
                  ("has " + std::to_string(block) + " blocks").c_str());
}
}  // namespace detail

// The model configuration stored in a checkpoint by Trainer (model_config JSON); Config is
// DeltaNetConfig or ConvDeltaNetConfig (anything with a static fromKeyValues). Before returning,
// the checkpoint's tensor shapes must confirm every size of the configuration (detail::checkConfigShapes),
// so that building the model it describes allocates no more than the file backs.
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
  const Config config = Config::fromKeyValues(kv);
  detail::checkConfigShapes(config, readSafetensorsHeader(path));
  return config;
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
        m_loss(options.labelSmoothing), m_adam(options.adam), m_batcher(train, batchOptions(options), options.seed),
        m_guard(model) {
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
  std::function<void(int epoch)> onEpochStart;        // 0-based epoch about to run (or continue)
  std::function<void(const EpochMetrics&)> onEpoch;   // after evaluation, checkpoint and CSV row
  std::function<bool()> shouldStop;                   // polled after every step: true = stop now

  // Trains from the current position (epoch(), batchInEpoch()) up to options.epochs and returns the
  // last completed epoch's metrics (count == 0 in them when no epoch completed). When shouldStop
  // returns true, run() returns after the current step with stopped() == true, having written a
  // checkpoint of that position (when outDir is set and anything changed since the last one).
  // Throws NonFiniteError (checkFinite), IoError for an output that cannot be written.
  EpochMetrics run() {
    setNumThreads(m_opt.threads);
    m_stopped = false;
    EpochMetrics last;
    if (stopRequested()) return last;  // before any output is created
    if (!m_opt.outDir.empty()) openOutputs();
    while (m_epoch < m_opt.epochs) {
      if (stopRequested()) break;
      if (!trainEpoch()) break;  // stopped mid-epoch
      last = finishEpoch();
    }
    if (m_stopped && !m_opt.outDir.empty() && m_step != m_savedStep) saveCheckpoint(checkpointPath());
    return last;
  }

  // Loads model, optimizer state, epoch, step and the position inside the epoch from a checkpoint
  // written by this class. Throws IoError/ValueError when the model configuration or the training
  // options differ from the saved ones (a resumed run must follow the same trajectory) or the saved
  // position does not fit this training set, and leaves everything untouched then.
  void resume(const std::string& path) {
    const char* fn = "ddl::Trainer::resume";
    const CheckpointMeta head = readCheckpointMetadata(path);
    const std::string mine = configJson(m_model.config());
    if (head.modelConfig != mine)
      throw ValueError(message(fn, path, ": the checkpoint's model configuration differs from this model's\n  saved: ",
                               head.modelConfig, "\n  model: ", mine));
    const auto it = head.extra.find("train_options");
    if (it == head.extra.end()) throw IoError(message(fn, path, ": no train_options metadata (not a Trainer checkpoint)"));
    // A malformed text parses to "discarded", which has no keys: it must not pass as "same options".
    const nlohmann::json savedJson = nlohmann::json::parse(it->second, nullptr, false);
    if (!savedJson.is_object())
      throw IoError(message(fn, path, ": the train_options metadata is not a JSON object: ", it->second.substr(0, 200)));
    TrainerOptions saved = m_opt;
    saved.updateFromJson(savedJson);
    if (saved.toJson() != m_opt.toJson())
      throw ValueError(message(fn, path, ": the training options differ from the saved run\n  saved: ",
                               saved.toJson().dump(), "\n  now:   ", m_opt.toJson().dump()));
    require(head.epoch >= 0 && head.epoch <= m_opt.epochs, fn, path, ": saved epoch ", head.epoch,
            " is outside [0, ", m_opt.epochs, "]");
    const EpochPosition pos = readPosition(head, path, head.epoch == m_opt.epochs);
    const CheckpointMeta meta = loadCheckpoint(path, m_model, m_adam);
    m_epoch = static_cast<int>(meta.epoch);
    m_step = meta.step;
    m_pos = pos;
    if (m_adam.stepCount() > 0) m_lr = m_schedule.lrAt(m_adam.stepCount() - 1);  // an epoch may have no steps left
    m_savedStep = m_step;
    m_resumed = true;
  }

  // Writes the checkpoint of the current state (atomic replace). IoError when it cannot be written;
  // the previous file at `path` is then unchanged.
  void saveCheckpoint(const std::string& path) {
    CheckpointMeta meta;
    meta.preset = m_model.config().preset;
    meta.modelConfig = configJson(m_model.config());
    meta.epoch = m_epoch;
    meta.step = m_step;
    meta.extra = m_opt.extraMeta;
    meta.extra["train_options"] = m_opt.toJson().dump();
    meta.extra["train_position"] = nlohmann::json{{"batch", m_pos.batch},
                                                  {"loss_sum", m_pos.lossSum},
                                                  {"correct", m_pos.correct},
                                                  {"seen", m_pos.seen}}
                                       .dump();
    try {
      ddl::saveCheckpoint(path, m_model, m_adam, meta);
    } catch (const IoError& e) {
      throw IoError(message("ddl::Trainer", "cannot write the checkpoint of step ", m_step, ": ", e.what(),
                            " (the previous checkpoint, if any, is unchanged)"));
    }
    m_savedStep = m_step;
  }

  // Mean loss and accuracy on data; gates, when given, accumulates the gate statistics of every
  // block over the whole set (it stays empty for an additive net) through the caching forward, which
  // the audit reads; without it the evaluation is the forward that caches nothing.
  EvalResult evaluate(const Dataset<S>& data, NetGateAccumulator* gates = nullptr) {
    if (!gates) return ddl::evaluate(m_model, m_loss, data, m_opt.evalBatch, m_logits);
    return ddl::evaluate(m_model, m_loss, data, m_opt.evalBatch, m_logits, [&] { gates->add(m_model); });
  }

  std::string checkpointPath() const { return m_opt.outDir + "/checkpoint.safetensors"; }
  std::string metricsPath() const { return m_opt.outDir + "/metrics.csv"; }
  int epoch() const { return m_epoch; }                 // completed epochs
  Index batchInEpoch() const { return m_pos.batch; }    // batches done in the current epoch
  bool stopped() const { return m_stopped; }            // the last run() ended through shouldStop
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

  // Where training stands inside the current epoch, and the running sums of its batches so far.
  struct EpochPosition {
    Index batch = 0;
    double lossSum = 0.0;  // sum over samples of the per-sample loss
    Index correct = 0, seen = 0;
  };

  // The train_position metadata, checked against this training set (absent = start of the epoch).
  EpochPosition readPosition(const CheckpointMeta& head, const std::string& path, bool finished) const {
    const char* fn = "ddl::Trainer::resume";
    EpochPosition pos;
    const auto it = head.extra.find("train_position");
    if (it == head.extra.end()) return pos;
    const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, false);
    try {
      if (!j.is_object()) throw ValueError("it is not a JSON object: " + it->second);
      const Index batches = m_batcher.numBatches();
      pos.batch = detail::jsonInteger<Index>("batch", j.at("batch"), 0, finished ? 0 : batches);
      const Index seen = std::min(pos.batch * m_opt.batchSize, m_train.size());
      pos.seen = detail::jsonInteger<Index>("seen", j.at("seen"), seen, seen);
      pos.correct = detail::jsonInteger<Index>("correct", j.at("correct"), 0, seen);
      if (!j.at("loss_sum").is_number()) throw ValueError("loss_sum is not a number");
      pos.lossSum = numberInRange("loss_sum", j.at("loss_sum").get<double>(), 0.0);
    } catch (const nlohmann::json::exception& e) {
      throw IoError(message(fn, path, ": bad train_position metadata: ", e.what()));
    } catch (const ValueError& e) {
      throw IoError(message(fn, path, ": bad train_position metadata (", m_batcher.numBatches(), " batches of ",
                            m_opt.batchSize, " per epoch here): ", e.what()));
    }
    return pos;
  }

  bool stopRequested() {
    if (shouldStop && shouldStop()) m_stopped = true;
    return m_stopped;
  }

  void openOutputs() {
    const char* fn = "ddl::Trainer";
    std::error_code ec;
    std::filesystem::create_directories(m_opt.outDir, ec);
    if (ec) throw IoError(message(fn, "cannot create output folder '", m_opt.outDir, "': ", ec.message()));
    // Fail now rather than after the first epoch: create (and remove) a file where the checkpoint goes.
    const std::string probe = atomicTempPath(checkpointPath());
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
      throw IoError(message(fn, "cannot write to output folder '", m_opt.outDir, "': ", detail::errnoText(errno)));
    ::close(fd);
    ::unlink(probe.c_str());
    if (!m_csv) m_csv = std::make_unique<MetricsCsv>(metricsPath(), metricsColumns(), /*append=*/m_resumed);
  }

  // The remaining steps of the current epoch. False when shouldStop ended it early.
  bool trainEpoch() {
    if (onEpochStart) onEpochStart(m_epoch);
    m_epochStart = Clock::now();
    m_batcher.startEpoch(static_cast<std::uint64_t>(m_epoch));
    m_batcher.seek(m_pos.batch);
    const TrainStepOptions stepOpt{m_opt.clipNorm};
    Index seenNow = 0;  // samples of this call, for the throughput
    while (m_batcher.next(m_X, m_y)) {
      m_lr = m_schedule.lrAt(m_adam.stepCount());
      m_adam.setLr(m_lr);
      const std::int64_t stepNo = m_step + 1;
      StepStats s;
      try {
        s = trainStep(m_model, m_loss, m_adam, m_X, m_y, m_buf, stepOpt, [&](const StepStats& st) {
          if (m_opt.checkFinite) m_guard.check(st.loss, stepNo);
        });
      } catch (const NonFiniteError& e) {
        throw NonFiniteError(message("ddl::Trainer", "training stopped in epoch ", m_epoch + 1, ", batch ",
                                     m_pos.batch + 1, ": ", e.what(), lastCheckpointNote()),
                             e.step());
      } catch (const MathError& e) {
        // A layer met a NaN/Inf itself (e.g. a direction of norm NaN after the weights blew up).
        if (!m_opt.checkFinite) throw;
        throw NonFiniteError(message("ddl::Trainer", "training stopped in epoch ", m_epoch + 1, ", batch ",
                                     m_pos.batch + 1, ": step ", stepNo, " failed: ", e.what(), "; ",
                                     m_guard.parameterReport(), " (check the learning rate and the input data)",
                                     lastCheckpointNote()),
                             stepNo);
      }
      ++m_step;
      ++m_pos.batch;
      m_pos.lossSum += s.loss * static_cast<double>(s.count);
      m_pos.correct += s.correct;
      m_pos.seen += s.count;
      seenNow += s.count;
      if (onBatch) {
        const double secs = std::chrono::duration<double>(Clock::now() - m_epochStart).count();
        onBatch(BatchProgress{m_epoch, m_opt.epochs, m_pos.batch, m_batcher.numBatches(),
                              m_pos.lossSum / static_cast<double>(m_pos.seen),
                              static_cast<double>(m_pos.correct) / static_cast<double>(m_pos.seen),
                              secs > 0 ? static_cast<double>(seenNow) / secs : 0.0});
      }
      if (stopRequested()) return false;
    }
    m_trainSecs = std::chrono::duration<double>(Clock::now() - m_epochStart).count();
    m_seenNow = seenNow;
    return true;
  }

  std::string lastCheckpointNote() const {
    if (m_opt.outDir.empty()) return "";
    if (m_savedStep < 0) return "; no checkpoint was written in this run";
    return "; the last checkpoint (" + checkpointPath() + ", step " + std::to_string(m_savedStep) + ") is unchanged";
  }

  // Evaluation, checkpoint and metrics row of the epoch trainEpoch() completed.
  EpochMetrics finishEpoch() {
    EpochMetrics m;
    m.epoch = m_epoch + 1;
    m.step = m_step;
    m.lr = m_lr;
    const double seen = static_cast<double>(m_pos.seen);
    m.trainLoss = m_pos.lossSum / seen;
    m.trainAccuracy = static_cast<double>(m_pos.correct) / seen;
    m.samplesPerSec = m_trainSecs > 0 ? static_cast<double>(m_seenNow) / m_trainSecs : 0.0;
    NetGateAccumulator gates;
    if (m_val) m.validation = evaluate(*m_val, m_test ? nullptr : &gates);
    if (m_test) m.test = evaluate(*m_test, &gates);
    m.gates = gates.stats();
    GateAccumulator all;
    for (const GateAccumulator& b : gates.blocks()) all.merge(b);
    m.gatesAll = all.stats();
    m.seconds = std::chrono::duration<double>(Clock::now() - m_epochStart).count();
    ++m_epoch;
    m_pos = EpochPosition{};
    // The checkpoint before the row: a row exists only for an epoch a resume will not repeat.
    if (!m_opt.outDir.empty()) saveCheckpoint(checkpointPath());
    if (m_csv) writeRow(m);
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
  FiniteGuard<S> m_guard;
  int m_epoch = 0;
  std::int64_t m_step = 0;
  std::int64_t m_savedStep = -1;  // step of the checkpoint last written or resumed from (-1 = none)
  EpochPosition m_pos;
  Clock::time_point m_epochStart;
  double m_trainSecs = 0.0, m_lr = 0.0;
  Index m_seenNow = 0;
  bool m_resumed = false;
  bool m_stopped = false;
  MatX<S> m_X, m_logits;
  std::vector<int> m_y;
  StepBuffers<S> m_buf;
};

}  // namespace ddl
