#pragma once
// ddl/train/training_loop.hpp: the epoch loop, generic over model, task, batch source, optimizer
// and per-step hooks; ddl::Trainer (train/trainer.hpp) is this loop with the classification parts.
//
//   ddl::ClassificationTask<float> task(0.1);
//   ddl::DatasetBatches<float> batches(train, batchOptions, seed);
//   ddl::Sgd<float> sgd(sgdOptions);                       // its lr() is the schedule's peak
//   ddl::TrainingLoop<ddl::DeltaNet<float>, ddl::ClassificationTask<float>, ddl::DatasetBatches<float>,
//                     ddl::Sgd<float>> loop(net, task, batches, sgd, options, &validation, &test);
//   loop.addStepHook([](ddl::StepContext<float>& c) { ... });   // after backward, before the update
//   loop.run();
// The contracts are in train/model.hpp, train/task.hpp, train/batch_source.hpp, train/optimizer.hpp
// and train/step_hooks.hpp; docs/decisions.md ("The training loop: model, task, batch source,
// optimizer, hooks") says who owns what. The caller owns model, task, source, optimizer and the
// evaluation data, which must outlive the loop; the loop owns its scratch, the guard and the CSV.
//
// Per step: lr from the schedule, then step(): forward, the task's loss and gradient, backward,
// afterBackward (the sum over the ranks when data-parallel, the hooks, the NaN/Inf guard), clipping,
// the optimizer. Per epoch: evaluation of the validation and test sets, an atomic checkpoint and a
// row of metrics.csv in options.outDir, with the columns a program adds (addColumns). The checkpoint
// holds parameters, optimizer state, epoch, model_config, preset, train_options and train_position
// (train/run_record.hpp); batch b of epoch e is a function of (seed, e, b), so a run resumed from any
// checkpoint, also one written mid-epoch, is bit-identical to one that never stopped. The loop
// includes nothing of nn/ or diag/ (tests/include_rules.cmake).
//
// Guards: with options.checkFinite a NaN/Inf loss or gradient stops training with NonFiniteError
// before the update (finite_guard.hpp), writing nothing, as a hook that throws does. shouldStop,
// polled after every step and evaluation batch, ends run() with a mid-epoch checkpoint (stopped();
// stop_signal.hpp maps SIGINT/SIGTERM to it). A failed write throws IoError and keeps the previous
// checkpoint. Errors name ddl::TrainingLoop.
//
// Data-parallel (distribute(comm), train/data_parallel.hpp): the source yields this rank's part of
// every global batch (train/sharded_batches.hpp; an unsharded source is refused). run() checks that
// every rank has the same configuration, options, data sizes and position, then gives every rank rank
// 0's parameters and optimizer state; a stop request on any rank stops all after the same step. Rank 0
// alone evaluates and writes; a checkpoint does not depend on the number of ranks.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include "ddl/core/requires_json.hpp"  // before nlohmann: a clear error without it
#include <nlohmann/json.hpp>

#include "ddl/core/collective.hpp"
#include "ddl/core/detects.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/parse.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/types.hpp"
#include "ddl/io/atomic_file.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/io/metrics_csv.hpp"
#include "ddl/train/data_parallel.hpp"
#include "ddl/train/epoch_metrics.hpp"
#include "ddl/train/eval_columns.hpp"
#include "ddl/train/finite_guard.hpp"
#include "ddl/train/lr_schedule.hpp"
#include "ddl/train/model.hpp"
#include "ddl/train/optimizer.hpp"
#include "ddl/train/run_record.hpp"
#include "ddl/train/step_hooks.hpp"
#include "ddl/train/task_step.hpp"
#include "ddl/train/loop_options.hpp"

namespace ddl {

namespace detail {
// A task whose evaluate takes an EvalStop (train/task.hpp): the loop's evaluations then answer shouldStop.
template <class Task, class Model>
using StoppableEvaluateProbe = decltype(std::declval<Task&>().evaluate(
    std::declval<Model&>(), std::declval<const typename Task::EvalData&>(), Index{},
    std::declval<MatX<typename Task::Scalar>&>(), std::declval<void (*)()>(), std::declval<const EvalStop&>()));
template <class Task, class Model>
using HasStoppableEvaluate = Detects<StoppableEvaluateProbe, Task, Model>;
}  // namespace detail

template <class Model, class Task, class Source, class Optimizer>
class TrainingLoop {
 public:
  using S = typename Task::Scalar;
  using EvalData = typename Task::EvalData;
  static_assert(std::is_same<typename Source::Target, typename Task::Target>::value,
                "ddl::TrainingLoop: the batch source's Target must be the task's Target");
  static_assert(std::is_same<typename Source::Scalar, S>::value && std::is_same<typename Optimizer::Scalar, S>::value,
                "ddl::TrainingLoop: task, batch source and optimizer must share one scalar type");

  // model, task, source, optimizer and the evaluation data must outlive the loop; validation and
  // test may be null. Throws ValueError for options outside their domain or a model that cannot
  // take the source's batches or the evaluation data.
  TrainingLoop(Model& model, Task& task, Source& source, Optimizer& optimizer, const LoopOptions& options,
               const EvalData* validation = nullptr, const EvalData* test = nullptr)
      : m_model(model), m_task(task), m_source(source), m_optimizer(optimizer), m_val(validation), m_test(test),
        m_opt(checked(options)), m_partsJson(partSettingsJson(optimizerOptionsJson(optimizer), task, source)),
        m_guard(model) {
    const char* fn = "ddl::TrainingLoop";
    source.checkModel(model, fn);
    for (const EvalData* d : {validation, test})
      if (d) task.checkEvalData(model, *d, fn);
    m_schedule = makeSchedule();
  }
  TrainingLoop(const TrainingLoop&) = delete;
  TrainingLoop& operator=(const TrainingLoop&) = delete;
  ~TrainingLoop() { reportGradientsTo(false); }  // the model outlives the loop: no report to a freed DataParallel

  // Runs in every step after backward, before clipping and the update (train/step_hooks.hpp);
  // hooks run in the order added, then the NaN/Inf guard.
  void addStepHook(StepHook<S> hook) {
    require(static_cast<bool>(hook), "ddl::TrainingLoop::addStepHook", "the hook is empty");
    m_hooks.push_back(std::move(hook));
  }

  std::function<void(const BatchProgress&)> onBatch;  // after every training batch
  std::function<void(int epoch)> onEpochStart;        // 0-based epoch about to run (or continue)
  std::function<void(const EpochMetrics&)> onEpoch;   // after evaluation, checkpoint and CSV row
  std::function<bool()> shouldStop;                   // after every step and evaluation batch: true = stop

  // Columns of metrics.csv after the loop's own, filled from each epoch's evaluation
  // (train/eval_columns.hpp; train/gate_columns.hpp gives the gate statistics). Before run().
  void addColumns(EvalColumns<Model> columns) {
    const char* fn = "ddl::TrainingLoop::addColumns";
    require(!m_ran, fn, "columns must be added before run()");
    require(!columns.names.empty() && columns.start && columns.observe && columns.cells, fn,
            "the columns need names and all of start, observe and cells");
    m_columns.push_back(std::move(columns));
  }

  // Trains data-parallel over comm's ranks (see the header comment); the source must yield this
  // rank's part of each global batch. With one rank nothing changes.
  void distribute(Collective& comm, DataParallelOptions options = {}) {
    reportGradientsTo(false);
    m_dp.reset();
    if (comm.size() > 1) m_dp = std::make_unique<DataParallel<S>>(comm, options);
    reportGradientsTo(m_dp && m_dp->overlaps());
    m_synced = false;
  }
  // The data-parallel state (nullptr on one process): ranks, communication time.
  const DataParallel<S>* dataParallel() const { return m_dp.get(); }
  bool isRankZero() const { return !m_dp || m_dp->rank() == 0; }

  // Trains from the current position (epoch(), batchInEpoch()) up to options.epochs and returns the
  // last completed epoch's metrics (count == 0 in them when no epoch completed). When shouldStop
  // returns true, run() returns after the current step with stopped() == true, having written a
  // checkpoint of that position (when outDir is set and anything changed since the last one).
  // Throws NonFiniteError (checkFinite), IoError for an output that cannot be written.
  EpochMetrics run() {
    m_ran = true;
    setNumThreads(m_opt.threads);
    if (m_dp && !m_synced) synchronizeRanks();
    m_stopped = false;
    EpochMetrics last;
    if (stopRequested()) return last;  // before any output is created
    if (writes()) openOutputs();
    while (m_epoch < m_opt.epochs) {
      if (stopRequested()) break;
      if (!trainEpoch()) break;      // stopped mid-epoch
      if (!finishEpoch(last)) break;  // stopped in the epoch's evaluation
    }
    if (m_stopped && writes() && m_step != m_savedStep) saveCheckpoint(checkpointPath());
    return last;
  }

  // Loads model, optimizer state, epoch, step and the position inside the epoch from a checkpoint
  // written by this class. Throws IoError/ValueError when the model configuration or the training
  // options differ from the saved ones (a resumed run must follow the same trajectory) or the saved
  // position does not fit this training set, and leaves everything untouched then. mayChange: keys
  // of train_options the caller lets differ (a program's "epochs" or "lr" given on the command line:
  // a longer run or a new rate from here on, no longer the saved trajectory); the message of a refusal
  // names every other key that differs.
  void resume(const std::string& path, const std::vector<std::string>& mayChange = {}) {
    const char* fn = "ddl::TrainingLoop::resume";
    const CheckpointMeta head = readCheckpointMetadata(path);
    const std::string mine = modelConfigJson(m_model);
    if (head.modelConfig != mine)
      throw ValueError(message(fn, path, ": the checkpoint's model configuration differs from this model's\n  saved: ",
                               head.modelConfig, "\n  model: ", mine));
    requireSameRunOptions(fn, path, head, m_opt, m_partsJson, mayChange);
    require(head.epoch >= 0 && head.epoch <= m_opt.epochs, fn, path, ": saved epoch ", head.epoch,
            " is outside [0, ", m_opt.epochs, "]");
    const EpochPosition pos =
        readEpochPosition(fn, path, head, m_source.batchesPerEpoch(), m_opt.batchSize,
                          [this](Index b) { return m_source.samplesIn(b); }, head.epoch == m_opt.epochs);
    const CheckpointMeta meta = loadCheckpoint(path, m_model, m_optimizer);
    m_epoch = static_cast<int>(meta.epoch);
    m_step = meta.step;
    m_pos = pos;
    if (m_optimizer.stepCount() > 0) m_lr = m_schedule.lrAt(m_optimizer.stepCount() - 1);  // an epoch may have no steps left
    m_savedStep = m_step;
    m_resumed = true;
    m_synced = false;
  }

  // Writes the checkpoint of the current state (atomic replace). IoError when it cannot be written;
  // the previous file at `path` is then unchanged.
  void saveCheckpoint(const std::string& path) {
    CheckpointMeta meta;
    meta.preset = modelPreset(m_model);
    meta.modelConfig = modelConfigJson(m_model);
    meta.epoch = m_epoch;
    meta.step = m_step;
    meta.extra = m_opt.extraMeta;
    meta.extra["train_options"] = runOptionsJson(m_opt, m_partsJson).dump();
    meta.extra["train_position"] = positionJson(m_pos);
    try {
      ddl::saveCheckpoint(path, m_model, m_optimizer, meta);
    } catch (const IoError& e) {
      throw IoError(message("ddl::TrainingLoop", "cannot write the checkpoint of step ", m_step, ": ", e.what(),
                            " (the previous checkpoint, if any, is unchanged)"));
    }
    m_savedStep = m_step;
  }

  // The task's mean loss and accuracy on data. With observe, the evaluation runs the caching forward
  // and calls observe(model) after every batch (what the gate statistics read); without, the forward
  // that caches nothing. When the task takes an EvalStop (train/task.hpp), shouldStop is asked after
  // every batch: true ends the evaluation there with result.stopped.
  EvalResult evaluate(const EvalData& data, const std::function<void(const Model&)>& observe = {}) {
    if constexpr (detail::HasStoppableEvaluate<Task, Model>::value) {
      const EvalStop stop{shouldStop};
      if (observe) return m_task.evaluate(m_model, data, m_opt.evalBatch, m_logits, [&] { observe(m_model); }, stop);
      return m_task.evaluate(m_model, data, m_opt.evalBatch, m_logits, stop);
    } else {
      if (observe) return m_task.evaluate(m_model, data, m_opt.evalBatch, m_logits, [&] { observe(m_model); });
      return m_task.evaluate(m_model, data, m_opt.evalBatch, m_logits);
    }
  }

  std::string checkpointPath() const { return m_opt.outDir + "/checkpoint.safetensors"; }
  std::string metricsPath() const { return m_opt.outDir + "/metrics.csv"; }
  int epoch() const { return m_epoch; }                 // completed epochs
  Index batchInEpoch() const { return m_pos.batch; }    // batches done in the current epoch
  bool stopped() const { return m_stopped; }            // the last run() ended through shouldStop
  std::int64_t step() const { return m_step; }
  const LrSchedule& schedule() const { return m_schedule; }
  const LoopOptions& options() const { return m_opt; }
  Optimizer& optimizer() { return m_optimizer; }
  Model& model() { return m_model; }
  Task& task() { return m_task; }
  Source& source() { return m_source; }
  Index batchesPerEpoch() const { return m_source.batchesPerEpoch(); }

  // The header of metrics.csv: the loop's own columns, then those added with addColumns.
  std::vector<std::string> metricsColumns() const {
    std::vector<std::string> names{"epoch",    "step",     "lr",      "train_loss", "train_acc",    "val_loss",
                                   "val_acc",  "test_loss", "test_acc", "seconds",   "samples_per_s"};
    for (const EvalColumns<Model>& c : m_columns) names.insert(names.end(), c.names.begin(), c.names.end());
    return names;
  }

 private:
  using Clock = std::chrono::steady_clock;

  static const LoopOptions& checked(const LoopOptions& o) {
    o.validate("ddl::TrainingLoop");
    return o;
  }
  LrSchedule makeSchedule() const {
    const std::int64_t total = static_cast<std::int64_t>(m_opt.epochs) * m_source.batchesPerEpoch();
    const double lr = m_partsJson.at("lr").get<double>();  // the optimizer's rate when it was passed in
    switch (m_opt.schedule) {
      case LrScheduleKind::Constant: return LrSchedule::constant(lr, m_opt.warmupSteps);
      case LrScheduleKind::Cosine:
        require(total > m_opt.warmupSteps, "ddl::TrainingLoop", "warmup of ", m_opt.warmupSteps,
                " steps does not fit in the ", total, " training steps");
        return LrSchedule::cosine(lr, m_opt.warmupSteps, total, m_opt.minLrFactor * lr);
      case LrScheduleKind::Step: {
        const std::int64_t every = m_opt.stepEvery > 0 ? m_opt.stepEvery : std::max<std::int64_t>(1, total / 3);
        return LrSchedule::stepDecay(lr, every, m_opt.stepGamma, m_opt.warmupSteps);
      }
    }
    return LrSchedule::constant(lr);
  }

  // A collective vote when data-parallel: every rank calls this at the same points.
  bool stopRequested() {
    bool stop = m_stopped || (shouldStop && shouldStop());
    if (m_dp) stop = m_dp->anyRank(stop);
    if (stop) m_stopped = true;
    return m_stopped;
  }

  // Only rank 0 writes the checkpoint and metrics.csv.
  bool writes() const { return !m_opt.outDir.empty() && isRankZero(); }

  // Every rank runs the same configuration from the same state: compared by digest, then rank 0's
  // parameters and optimizer state are broadcast.
  void synchronizeRanks() {
    requireShardOf(m_source, *m_dp, "ddl::TrainingLoop::run");
    nlohmann::json j{{"model_config", modelConfigJson(m_model)},
                     {"train_options", runOptionsJson(m_opt, m_partsJson)},
                     {"batches_per_epoch", m_source.batchesPerEpoch()},
                     {"samples_per_epoch", m_source.samplesIn(m_source.batchesPerEpoch())},
                     {"validation", m_val != nullptr},
                     {"test", m_test != nullptr},
                     {"position", {m_epoch, m_step, m_pos.batch, m_optimizer.stepCount()}}};
    m_dp->requireSame(j.dump(), "the model configuration, training options, data sizes or position (" + j.dump() + ")");
    ParamList<S> params(m_model);
    m_dp->broadcastParameters(params);
    m_dp->broadcastOptimizer(m_optimizer);
    m_synced = true;
  }

  void openOutputs() {
    // Fail now rather than after the first epoch.
    prepareOutputFolder(m_opt.outDir, checkpointPath(), "ddl::TrainingLoop");
    if (!m_csv) m_csv = std::make_unique<MetricsCsv>(metricsPath(), metricsColumns(), /*append=*/m_resumed);
  }

  // The remaining steps of the current epoch. False when shouldStop ended it early.
  bool trainEpoch() {
    if (onEpochStart) onEpochStart(m_epoch);
    m_epochStart = Clock::now();
    m_source.startEpoch(static_cast<std::uint64_t>(m_epoch));
    m_source.seek(m_pos.batch);
    Index seenNow = 0;  // samples of this call, for the throughput
    while (m_source.next(m_X, m_y)) {
      m_lr = m_schedule.lrAt(m_optimizer.stepCount());
      m_optimizer.setLr(m_lr);
      const std::int64_t stepNo = m_step + 1;
      const StepStats s = step(stepNo);
      ++m_step;
      ++m_pos.batch;
      m_pos.lossSum += s.loss * static_cast<double>(s.count);
      m_pos.correct += s.correct;
      m_pos.seen += s.count;
      seenNow += s.count;
      if (onBatch) {
        const double secs = std::chrono::duration<double>(Clock::now() - m_epochStart).count();
        onBatch(BatchProgress{m_epoch, m_opt.epochs, m_pos.batch, m_source.batchesPerEpoch(),
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

  // One step (train/task_step.hpp): forward, loss, backward, afterBackward, clipping, the update.
  // An error is rethrown naming the epoch, the batch and the last checkpoint.
  StepStats step(std::int64_t stepNo) {
    bool reduced = false;  // this rank took part in the step's collective calls
    try {
      return taskStep(
          m_model, m_task, m_optimizer, m_X, m_y, m_buf, TrainStepOptions{m_opt.clipNorm},
          [&](StepStats& st) {
            if (!m_reporting) return;  // a model without reports: the sums after backward, in reduceStep
            reduced = true;  // the statistics' message is this step's; a failure after it goes through failStep's
            m_dp->beginStep(st, m_buf.params);  // the model's reports start buckets
          },
          [&](StepStats& st) {
            reduced = true;
            afterBackward(st, stepNo);
          });
    } catch (...) {
      // The other ranks wait in reduceStep (or, after beginStep, in the started sums): tell them.
      if (m_dp && (!reduced || m_dp->stepOpen())) m_dp->failStep();
      rethrowAtPosition(stepNo);
    }
  }

  // Between backward and the update, in this order: data-parallel, the statistics and gradients of
  // the global batch (the sum over the ranks); the hooks; the NaN/Inf guard. So hooks, guard and
  // clipping see the global batch, and every rank takes the same decisions.
  void afterBackward(StepStats& st, std::int64_t stepNo) {
    if (m_dp) m_dp->reduceStep(st, m_buf.params);
    StepContext<S> context{stepNo, m_epoch, m_pos.batch, m_lr, st, m_buf.params};
    for (StepHook<S>& hook : m_hooks) hook(context);
    if (m_opt.checkFinite) m_guard.check(st.loss, stepNo);
  }

  // Data-parallel overlap: the model's backward reports its final gradients to m_dp. A model without
  // setGradientsReady has nothing to overlap: its step keeps the sums after backward (reduceStep alone).
  void reportGradientsTo(bool on) {
    if constexpr (detail::HasGradientsReady<Model>::value) {
      if (on) {
        DataParallel<S>* dp = m_dp.get();
        m_model.setGradientsReady([dp](std::size_t first, std::size_t end) { dp->gradientsReady(first, end); });
      } else if (m_reporting) {
        m_model.setGradientsReady(GradientsReady());
      }
      m_reporting = on;
    }
  }

  // Called in a catch block: the current exception again, its message naming where training stopped.
  [[noreturn]] void rethrowAtPosition(std::int64_t stepNo) const {
    const std::string where =
        "training stopped in epoch " + std::to_string(m_epoch + 1) + ", batch " + std::to_string(m_pos.batch + 1);
    try {
      throw;
    } catch (const RankFailedError& e) {
      throw RankFailedError(message("ddl::TrainingLoop", where, " (step ", stepNo, "): ", e.what(), lastCheckpointNote()));
    } catch (const NonFiniteError& e) {
      throw NonFiniteError(message("ddl::TrainingLoop", where, ": ", e.what(), lastCheckpointNote()), e.step());
    } catch (const MathError& e) {
      // A layer met a NaN/Inf itself (e.g. a direction of norm NaN after the weights blew up).
      if (!m_opt.checkFinite) throw;
      throw NonFiniteError(message("ddl::TrainingLoop", where, ": step ", stepNo, " failed: ", e.what(), "; ",
                                   m_guard.parameterReport(), " (check the learning rate and the input data)",
                                   lastCheckpointNote()),
                           stepNo);
    }
  }

  std::string lastCheckpointNote() const {
    if (m_opt.outDir.empty()) return "";
    if (m_savedStep < 0) return "; no checkpoint was written in this run";
    return "; the last checkpoint (" + checkpointPath() + ", step " + std::to_string(m_savedStep) + ") is unchanged";
  }

  // Evaluation, checkpoint and metrics row of the epoch trainEpoch() completed; false when shouldStop
  // ended the evaluation: the epoch then stays open at its last batch (a resume evaluates it and
  // writes its row), and run() writes that position's checkpoint.
  bool finishEpoch(EpochMetrics& done) {
    EpochMetrics m;
    m.epoch = m_epoch + 1;
    m.step = m_step;
    m.lr = m_lr;
    const double seen = static_cast<double>(m_pos.seen);
    m.trainLoss = m_pos.lossSum / seen;
    m.trainAccuracy = static_cast<double>(m_pos.correct) / seen;
    m.samplesPerSec = m_trainSecs > 0 ? static_cast<double>(m_seenNow) / m_trainSecs : 0.0;
    for (EvalColumns<Model>& c : m_columns) c.start();
    std::function<void(const Model&)> observe, none;
    if (!m_columns.empty())
      observe = [this](const Model& model) {
        for (EvalColumns<Model>& c : m_columns) c.observe(model);
      };
    if (m_val && isRankZero()) m.validation = evaluate(*m_val, m_test ? none : observe);
    if (m_test && isRankZero() && !m.validation.stopped) m.test = evaluate(*m_test, observe);
    bool cut = m.validation.stopped || m.test.stopped;
    if (m_dp) cut = m_dp->anyRank(cut);  // rank 0 alone evaluates: every rank learns its answer
    if (cut) {
      m_stopped = true;
      return false;
    }
    for (EvalColumns<Model>& c : m_columns) {
      std::vector<std::string> cells = c.cells();
      if (cells.size() != c.names.size())
        throw ValueError(message("ddl::TrainingLoop", "the columns ", c.names.front(), ".. gave ", cells.size(),
                                 " cells for ", c.names.size(), " names"));
      m.extra.insert(m.extra.end(), cells.begin(), cells.end());
    }
    m.seconds = std::chrono::duration<double>(Clock::now() - m_epochStart).count();
    ++m_epoch;
    m_pos = EpochPosition{};
    // The checkpoint before the row: a row exists only for an epoch a resume will not repeat.
    if (writes()) saveCheckpoint(checkpointPath());
    if (m_csv) writeRow(m);
    if (onEpoch) onEpoch(m);
    done = m;
    return true;
  }

  void writeRow(const EpochMetrics& m) {
    auto num = [](double v) { return csvNumber(v); };
    auto opt = [&](const EvalResult& r, double v) { return r.count > 0 ? num(v) : std::string(); };
    std::vector<std::string> row{std::to_string(m.epoch), std::to_string(m.step), num(m.lr), num(m.trainLoss),
                                 num(m.trainAccuracy), opt(m.validation, m.validation.loss),
                                 opt(m.validation, m.validation.accuracy), opt(m.test, m.test.loss),
                                 opt(m.test, m.test.accuracy), num(m.seconds),
                                 // none: resumed at the epoch's end
                                 m.samplesPerSec > 0 ? num(m.samplesPerSec) : std::string()};
    row.insert(row.end(), m.extra.begin(), m.extra.end());
    m_csv->writeRow(row);
  }

  Model& m_model;
  Task& m_task;
  Source& m_source;
  Optimizer& m_optimizer;
  const EvalData* m_val;
  const EvalData* m_test;
  LoopOptions m_opt;
  nlohmann::json m_partsJson;  // the settings of optimizer, task and source when passed in (train_options)
  std::vector<StepHook<S>> m_hooks;
  std::vector<EvalColumns<Model>> m_columns;
  std::unique_ptr<DataParallel<S>> m_dp;  // null on one process
  bool m_synced = false;                   // ranks compared and given rank 0's state
  bool m_reporting = false;                // the model reports its final gradients to m_dp
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
  bool m_ran = false;  // run() was called: the columns are fixed
  bool m_stopped = false;
  typename Source::Input m_X;
  typename Source::Target m_y;
  MatX<S> m_logits;
  StepBuffers<S> m_buf;
};

}  // namespace ddl
