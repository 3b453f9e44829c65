#pragma once
// What ddl-mnist and ddl-cifar share: the training and output options, reading a saved run, the
// validation split, evaluating a checkpoint, the training loop's display and stop handling, and the
// mapping of errors to exit statuses, and running on several MPI ranks (`mpirun -np 2 ddl-mnist`:
// one model, the global batch split over the ranks, rank 0 alone prints and writes). Each program
// keeps only its data and its model.
#include <algorithm>
#include <cstdlib>
#include <csignal>
#include <cstdint>
#include <initializer_list>
#include <cstdio>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "final_report.hpp"
#include "precision_option.hpp"
#include "run_folder.hpp"
#include "ddl/diag/net_gate_audit.hpp"
#include "ddl/train/epoch_audit.hpp"
#include "ddl/train/progress.hpp"
#include "ddl/train/stop_signal.hpp"
#include "ddl/train/trainer.hpp"
#include "ddl/core/collective.hpp"
#include "ddl/io/content_digest.hpp"
#if DDL_WITH_MPI
#include "ddl/distributed/mpi_communicator.hpp"
#endif

namespace ddl::example {

// The ranks of this run: MPI's world when started by mpirun (and ddl was built with MPI), else one
// process. Set up by runMain before the program's run().
class Ranks {
 public:
  Collective& comm() {
#if DDL_WITH_MPI
    if (m_mpi) return *m_mpi;
#endif
    return m_single;
  }
  bool distributed() { return comm().size() > 1; }
  // The communicator for a Trainer: null on one process, so nothing changes there.
  Collective* forTrainer() { return distributed() ? &comm() : nullptr; }
  // "" on one process, else " per rank, 2 ranks (MPI, rank-order sums)".
  std::string note() { return distributed() ? " per rank, " + comm().describe() : std::string(); }

  // MPI is started only under a launcher (its environment variables are set), so a plain run never
  // touches it. On ranks other than 0 standard output is discarded: rank 0 speaks for the run.
  // MPI_Init that waits timeoutSeconds (> 0) for the other ranks ends this process with `status`.
  void start(int* argc, char*** argv, double timeoutSeconds, int status) {
#if DDL_WITH_MPI
    if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK")) {
      m_session = std::make_unique<MpiSession>(argc, argv, timeoutSeconds, status);
      m_mpi = std::make_unique<MpiCommunicator>();
      if (m_mpi->rank() != 0) {  // printf too (--eval-only's line): stdout itself goes nowhere
        std::cout.rdbuf(nullptr);
        if (!std::freopen("/dev/null", "w", stdout)) std::fclose(stdout);
      }
    }
#else
    (void)argc;
    (void)argv;
    (void)timeoutSeconds;
    (void)status;
#endif
  }

  // Under MPI: a collective call that waits `seconds` for the other ranks ends the job with `status`.
  void endJobAfter(double seconds, int status) {
    m_timeout = seconds;
    m_timeoutStatus = status;
#if DDL_WITH_MPI
    if (m_mpi && m_mpi->size() > 1) m_mpi->endJobAfter(seconds, status);
#endif
  }

  // The end of a run that returns `status`: under MPI every rank meets rank 0 (a rank that never comes
  // is named) and MPI is finalised, both timed as the collective calls are; returns status.
  int finish(int status) {
#if DDL_WITH_MPI
    if (m_mpi) m_mpi->meetAtEnd();
    m_mpi.reset();
    if (m_session) m_session->finalize(m_timeout, m_timeoutStatus);
#endif
    return status;
  }

  // An error on one rank while the others may wait in a collective call: report it with the rank
  // and end every rank of the job (MPI_Abort) with the exit status.
  int fail(int status) {
#if DDL_WITH_MPI
    if (m_mpi && m_mpi->size() > 1) {
      std::cerr << "(rank " << m_mpi->rank() << " of " << m_mpi->size() << ": ending every rank)\n" << std::flush;
      m_mpi->abort(status);
    }
#endif
    return status;
  }

 private:
  SingleProcess m_single;
  double m_timeout = 0;  // endJobAfter's, for the job's end
  int m_timeoutStatus = 1;
#if DDL_WITH_MPI
  std::unique_ptr<MpiSession> m_session;
  std::unique_ptr<MpiCommunicator> m_mpi;
#endif
};

inline Ranks& ranks() {
  static Ranks r;
  return r;
}

// Thrown on every rank when the ranks disagree: on rank 0 with the message naming each differing rank's
// first difference, empty on the others. Every rank then exits with the usage status.
struct RanksDisagree : Error {
  using Error::Error;
};

// (name, value) pairs that every rank must hold equal: the options, a digest of the data.
using AgreementItems = std::vector<std::pair<std::string, std::string>>;

// Every rank compares items with rank 0's: one allgather of a digest when they agree (the run's first
// collective call, so a rank that left early or runs another command ends the job here, with a
// message, instead of leaving the others waiting). When they differ, rank 0's items reach every rank,
// each differing rank finds its first difference ("--seed is '2' here, '1' on rank 0"), rank 0 prints
// them all and ends the job with exit 1. what: "command-line options", "data".
inline void requireRanksAgree(const AgreementItems& items, const std::string& what,
                              const std::string& hereNote = "") {
  Collective& comm = ranks().comm();
  if (comm.size() == 1) return;
  std::string text;
  for (const auto& [name, value] : items) text += name + '\t' + value + '\n';
  std::vector<std::uint64_t> digests(static_cast<std::size_t>(comm.size()));
  comm.allgather(fnv1a64(text), digests.data());
  std::string differing;
  for (int r = 1; r < comm.size(); ++r)
    if (digests[static_cast<std::size_t>(r)] != digests[0]) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  if (differing.empty()) return;
  std::uint64_t n = text.size();
  comm.broadcast(&n, sizeof n, 0);
  std::string zero = comm.rank() == 0 ? text : std::string(static_cast<std::size_t>(n), '\0');
  comm.broadcast(zero.data(), zero.size(), 0);
  std::string mine;  // this rank's first difference, "" when it agrees with rank 0
  if (digests[static_cast<std::size_t>(comm.rank())] != digests[0]) {
    std::map<std::string, std::string> theirs;
    for (std::size_t at = 0; at < zero.size();) {
      const std::size_t tab = zero.find('\t', at), end = zero.find('\n', at);
      if (tab == std::string::npos || end == std::string::npos || tab > end) break;
      theirs[zero.substr(at, tab - at)] = zero.substr(tab + 1, end - tab - 1);
      at = end + 1;
    }
    mine = "the items differ in number or order";
    for (const auto& [name, value] : items) {
      const auto it = theirs.find(name);
      if (it == theirs.end() || it->second != value) {
        mine = name + " is '" + value + "' here" + hereNote + ", '" + (it == theirs.end() ? "(none)" : it->second) +
               "' on rank 0";
        break;
      }
    }
  }
  // Each differing rank's line reaches rank 0, which prints them all: output of a rank that MPI_Abort
  // ends may be lost on its way through mpirun.
  std::string lines;
  for (int r = 1; r < comm.size(); ++r) {
    if (digests[static_cast<std::size_t>(r)] == digests[0]) continue;
    std::uint64_t len = comm.rank() == r ? mine.size() : 0;
    comm.broadcast(&len, sizeof len, r);
    std::string line = comm.rank() == r ? mine : std::string(static_cast<std::size_t>(len), '\0');
    comm.broadcast(line.data(), line.size(), r);
    lines += "\n  rank " + std::to_string(r) + " of " + std::to_string(comm.size()) + ": " + line;
  }
  if (comm.rank() != 0) throw RanksDisagree("");  // rank 0 speaks for every rank
  throw RanksDisagree("the ranks disagree on their " + what + ": every rank must run the same command on the same "
                      "data; the first difference of each rank from rank 0:" + lines);
}

// The options every rank must share: all but --threads and --mpi-timeout (per rank) and the data's
// paths (the data is compared by content, see requireSameData), plus the program.
inline AgreementItems optionItems(const std::string& program, const cli::CommandLine& cli) {
  AgreementItems items{{"program", program}};
  for (auto& [name, value] : cli.values())
    if (name != "threads" && name != "mpi-timeout" && name != "data" && name != "cache" && name != "tokens" &&
        name != "val-tokens" && name != "test-tokens")
      items.emplace_back("--" + name, value);
  return items;
}

// Exit statuses besides 0 (done) and 128 + signal (stopped by SIGINT/SIGTERM, checkpoint saved).
constexpr int kExitUsage = 1;      // a bad option or another error
constexpr int kExitFile = 2;       // data, checkpoint or output folder unusable
constexpr int kExitNonFinite = 3;  // training produced NaN/Inf; the last checkpoint is the last good state
constexpr int kExitRankLost = 4;   // under MPI: a collective call waited --mpi-timeout for a rank

constexpr std::int64_t kMaxCount = std::numeric_limits<std::int64_t>::max();
constexpr double kMaxReal = std::numeric_limits<double>::max();

// The data could not be loaded: the message is followed by the program's hint on where to get it.
struct DataError : IoError {
  using IoError::IoError;
};

// A file given by an option other than --data (ddl-text's --tokenizer, its token files) is unusable:
// exit 2 with the message alone, since neither the data's hint nor the checkpoint's is about it.
struct OptionFileError : IoError {
  using IoError::IoError;
};

// The defaults in which the programs differ, set by name. augmentHelp null: no --augment and
// --label-smoothing (not images).
struct TrainingDefaults {
  const char* epochs = "10";
  const char* lr = "0.001";
  const char* weightDecay = "0.01";
  const char* beta2 = "0.999";
  const char* augmentHelp = nullptr;
  const char* augment = "none";
  const char* labelSmoothing = "0";
  const char* batch = "128";
};

inline void declareTrainingOptions(cli::CommandLine& cli, const TrainingDefaults& d) {
  cli.section("training")
      .option("epochs", "E", "training epochs", d.epochs)
      .option("batch", "B", "batch size", d.batch)
      .option("lr", "LR", "AdamW peak learning rate", d.lr)
      .option("schedule", "S", "cosine | constant | step", "cosine")
      .option("warmup", "W", "linear warmup steps (default: 200, at most 1/10 of all steps)")
      .option("weight-decay", "WD", "AdamW decoupled weight decay", d.weightDecay)
      .option("beta2", "B2", "AdamW decay of the squared-gradient average, in [0, 1)", d.beta2);
  if (d.augmentHelp)  // image programs only
    cli.option("augment", "A", d.augmentHelp, d.augment).option("label-smoothing", "E", "label smoothing in [0, 1)", d.labelSmoothing);
  cli.option("seed", "S", "initialisation and batch order", "1")
      .option("threads", "T", "0 = all cores", "0");
  declarePrecisionOption(cli);
  cli.option("mpi-timeout", "S", "under mpirun: end the job (exit 4) when one collective call waits S seconds "
              "for a rank that stopped or hangs; 0 = wait forever", "600")
      .flag("no-nan-guard", "keep training through a NaN/Inf loss or gradient (default: stop with an error)");
}

inline void declareOutputOptions(cli::CommandLine& cli, const char* defaultOut) {
  cli.section("output")
      .option("out", "DIR", "metrics.csv, checkpoint.safetensors, curves.png", defaultOut)
      .flag("resume", "continue the run saved in --out (same options)")
      .flag("overwrite", "start a new run in an --out that holds one, replacing it (default: refused)")
      .flag("eval-only", "evaluate the checkpoint in --out on the test set");
  cli.flag("audit", "after every epoch write audit.csv and audit.json into --out: per gated block (per Delta "
                    "sublayer in ddl-text) the gate, regimes, "
                    "|k~| vs eps, measured |e_post|/|e_pre| vs |1-beta*rho|, |k^T X|, |v| and the frozen spectrum "
                    "(with --eval-only: eval_audit.csv and eval_audit.json of the test evaluation)");
}

// The run saved in --out when resuming or evaluating (its metadata must be the program's), else none.
struct SavedRun {
  std::string out, ckpt, program;
  bool resume = false, evalOnly = false, generate = false;  // generate: ddl-text --generate
  bool initFrom = false;  // ddl-text --init-from: the model is a folder's; no checkpoint is read
  CheckpointMeta meta;
  const CheckpointMeta* from() const { return !initFrom && (resume || evalOnly || generate) ? &meta : nullptr; }
};

// keys: the metadata a checkpoint of the program holds (its absence means another program wrote it).
inline SavedRun savedRun(const cli::CommandLine& cli, const std::string& program,
                         std::initializer_list<const char*> keys = {"train_options", "input_mean", "input_std"}) {
  SavedRun s;
  s.out = cli.text("out");
  if (s.out.empty()) throw ValueError("--out is empty: name the folder of the run's checkpoint and metrics");
  s.ckpt = s.out + "/checkpoint.safetensors";
  s.resume = cli.has("resume");
  s.evalOnly = cli.has("eval-only");
  s.generate = cli.declares("generate") && cli.has("generate");
  s.program = program;
  if (s.resume && cli.has("overwrite"))
    throw ValueError("--resume continues the run in --out and --overwrite replaces it: give one of them");
  if (s.from()) {  // the saved run decides the model; explicit options still apply
    s.meta = readCheckpointMetadata(s.ckpt);
    for (const char* key : keys)
      if (!s.meta.extra.count(key))
        throw IoError(s.ckpt + ": no \"" + key + "\" metadata: not a " + program + " checkpoint");
  }
  return s;
}

// The model configuration of the saved run. A checkpoint of another program (another model) is an
// unusable checkpoint (exit 2), named as such, not a bad option.
template <class Config>
Config savedModelConfig(const SavedRun& run) {
  try {
    return configFromCheckpoint<Config>(run.meta, run.ckpt);
  } catch (const ValueError& e) {
    throw IoError(run.ckpt + ": not a " + run.program + " checkpoint (its model_config does not describe this "
                  "program's model: " + e.what() + ")");
  }
}

// With --resume, --eval-only or --generate the model is the checkpoint's; a model option given on the
// command line would be ignored, so it must name the saved value or the run is refused, naming it.
// optionKeys: the program's model options and their model_config keys.
inline void requireSavedModelOptions(const cli::CommandLine& cli, const SavedRun& run,
                                     std::initializer_list<std::pair<const char*, const char*>> optionKeys) {
  if (!run.from()) return;
  const nlohmann::json saved = nlohmann::json::parse(run.meta.modelConfig, nullptr, false);
  for (const auto& [option, key] : optionKeys) {
    if (!cli.has(option) || !saved.is_object() || !saved.contains(key) || !saved.at(key).is_string()) continue;
    const std::string given = cli.text(option), was = saved.at(key).get<std::string>();
    bool same = given == was;
    try {  // numbers compare as numbers ("032" is 32)
      same = same || parseNumber("--" + std::string(option), given, -kMaxReal) == parseNumber(key, was, -kMaxReal);
    } catch (const Error&) {
    }
    if (!same)
      throw ValueError("--" + std::string(option) + " " + given + " differs from the saved run's " + key + " " + was +
                       " (" + run.ckpt + "): the model of --resume, --eval-only and --generate is the checkpoint's; "
                       "drop --" + option + ", or start a new run with --overwrite or another --out");
  }
}

// What identifies a run's data: the path given, its size in bytes and a content digest
// (io/content_digest.hpp), recorded in the checkpoint and compared on --resume and across MPI ranks.
struct DataIdentity {
  std::string path;
  ContentDigest digest;
  std::string options = "--data";  // the options that gave path, for messages
  std::string text() const { return digest.hex() + " of " + std::to_string(digest.bytes()) + " bytes"; }
};

template <class S>
void addDataset(ContentDigest& d, const Dataset<S>& set) {
  d.add(set.images.data(), static_cast<std::size_t>(set.images.size()) * sizeof(S));
  d.add(set.labels.data(), set.labels.size() * sizeof(int));
}

// Records the data in the checkpoint's metadata; on --resume refuses data other than the saved run's
// (compared by size and digest: a moved copy passes; checkpoints without a digest are not compared)
// with exit 2; under MPI the ranks compare their data.
inline void requireSameData(const SavedRun& run, const DataIdentity& data, TrainerOptions& opt) {
  opt.extraMeta["data"] = data.path;
  opt.extraMeta["data_bytes"] = std::to_string(data.digest.bytes());
  opt.extraMeta["data_digest"] = data.digest.hex();
  requireRanksAgree({{"data", data.text()}}, "data", " (" + data.options + " " + data.path + ")");
  if (!run.resume) return;
  const auto digest = run.meta.extra.find("data_digest"), bytes = run.meta.extra.find("data_bytes");
  if (digest == run.meta.extra.end() || bytes == run.meta.extra.end()) return;
  if (digest->second == data.digest.hex() && bytes->second == std::to_string(data.digest.bytes())) return;
  const auto path = run.meta.extra.find("data");
  throw IoError(data.options + " " + data.path + " (" + data.text() + ") is not the data of the saved run in " + run.ckpt + " (" +
                (path != run.meta.extra.end() ? path->second : std::string("?")) + ", " + digest->second + " of " +
                bytes->second + " bytes): resume with that data, or start a new run with --overwrite or another --out");
}

// The --out folder of a training run, claimed by the rank that writes (rank 0) before data or model
// are touched: locked, and refused when it holds a run unless --resume or --overwrite (run_folder.hpp).
inline RunFolder claimRunFolder(const cli::CommandLine& cli, const SavedRun& run) {
  if (ranks().comm().rank() != 0) return RunFolder();
  return RunFolder::claim(run.out, run.resume, cli.has("overwrite"));
}

// Training options: the saved ones on a resume (an option given still wins), else the declared
// defaults. setAugment(opt) reads --augment (and the program's own augmentation options). warmup is
// left empty when chooseWarmup decides it.
inline TrainerOptions trainingOptions(const cli::CommandLine& cli, const SavedRun& run,
                                      const std::function<void(TrainerOptions&)>& setAugment,
                                      std::optional<std::int64_t>& warmup) {
  TrainerOptions opt;
  const CheckpointMeta* saved = run.from();
  if (saved) {
    const nlohmann::json j = nlohmann::json::parse(saved->extra.at("train_options"), nullptr, false);
    if (!j.is_object()) throw IoError(run.ckpt + ": the train_options metadata is not a JSON object");
    opt.updateFromJson(j);
  }
  auto given = [&](const char* name) { return cli.has(name) || !saved; };
  if (given("epochs")) opt.epochs = cli.integer<int>("epochs", 1, 1000000);
  if (given("batch")) opt.batchSize = cli.integer<Index>("batch", 1, 1 << 20);
  if (given("lr")) opt.adam.lr = cli.number("lr", 0, kMaxReal);
  if (given("schedule")) opt.schedule = parseLrScheduleKind(cli.choice("schedule", {"cosine", "constant", "step"}));
  if (cli.has("warmup"))
    warmup = cli.integer<std::int64_t>("warmup", 0, kMaxCount);
  else if (saved)
    warmup = opt.warmupSteps;
  if (given("weight-decay")) opt.adam.weightDecay = cli.number("weight-decay", 0, kMaxReal);
  if (given("beta2")) {
    opt.adam.beta2 = cli.number("beta2", 0, 1);
    if (opt.adam.beta2 >= 1)  // 1 never updates the average (it stays 0) and makes its bias correction 1 - 1^t = 0
      throw ValueError("--beta2 expects a number in [0, 1), got '" + cli.text("beta2") + "'");
  }
  if (cli.declares("augment") && given("augment")) setAugment(opt);
  if (cli.declares("label-smoothing") && given("label-smoothing")) {
    opt.labelSmoothing = cli.number("label-smoothing", 0, 1);
    if (opt.labelSmoothing >= 1)  // 1 would make every target uniform: nothing left to learn
      throw ValueError("--label-smoothing expects a number in [0, 1), got '" + cli.text("label-smoothing") + "'");
  }
  if (given("seed")) opt.seed = cli.integer<std::uint64_t>("seed", 0, std::numeric_limits<std::uint64_t>::max());
  opt.threads = cli.integer<int>("threads", 0, 4096);
  opt.extraMeta["precision"] = applyPrecision(cli);
  opt.checkFinite = !cli.has("no-nan-guard");
  opt.outDir = cli.text("out");
  return opt;
}

// Default warmup: 200 steps, at most a tenth of the run.
inline std::int64_t chooseWarmup(const TrainerOptions& opt, Index trainSize) {
  const std::int64_t steps = (trainSize + opt.batchSize - 1) / opt.batchSize * opt.epochs;
  return std::min<std::int64_t>(200, steps / 10);
}

// The training options a --resume may change (docs/runs.md): more epochs extend a run, a new peak
// rate applies from the resumed step on; any other option would make another run and is refused.
inline const std::vector<std::string> kMayChangeOnResume{"epochs", "lr"};

// Holds nVal training samples out as the validation set (seeded, so a resume holds out the same ones).
inline Dataset<float> splitOffValidation(Dataset<float>& train, Index nVal, std::uint64_t seed) {
  Dataset<float> validation;
  if (nVal >= train.size())
    throw ValueError("--val " + std::to_string(nVal) + " leaves no training samples (the training set has " +
                     std::to_string(train.size()) + ")");
  if (nVal > 0) {
    TrainValidation<float> tv = splitValidation(train, nVal, seed);
    train = std::move(tv.train);
    validation = std::move(tv.validation);
  }
  return validation;
}

// --eval-only: the checkpoint's test loss, accuracy and gate summary (and audit files with --audit).
template <class Net>
int evaluateCheckpoint(const cli::CommandLine& cli, Net& net, const SavedRun& run, const Dataset<float>& test,
                       Index evalBatch) {
  loadCheckpoint(run.ckpt, net);
  SoftmaxCrossEntropy<float> loss;
  NetGateAccumulator gates;
  MatX<float> logits;
  const EvalResult r =
      evaluate(net, loss, test, evalBatch, logits, [&] { gates.add(net); }, EvalStop{[] { return stopSignal() != 0; }});
  if (r.stopped)
    return report::evaluationStopped(cli.program(), "the test set", r, test.size(), "samples", "nothing was written");
  std::printf("%s (epoch %lld): test loss %.4f, test accuracy %.2f%%\n", run.ckpt.c_str(),
              static_cast<long long>(run.meta.epoch), r.loss, 100.0 * r.accuracy);
  std::cout << formatGateSummary(gates.stats());
  if (cli.has("audit")) {
    writeEvaluationAudit(net, gates.stats(), static_cast<int>(run.meta.epoch), run.out);
    std::cout << "audit of this evaluation: " << run.out << "/eval_audit.csv, " << run.out << "/eval_audit.json\n";
  }
  return 0;
}

// Trains with a progress bar and a line per epoch, --audit files, Ctrl-C / SIGTERM as a checkpointed
// stop (exit 128 + signal), then the test set once. Returns the exit status.
template <class Net, class Config>
int trainAndReport(const std::string& program, const cli::CommandLine& cli, Net& net, const Config& cfg,
                   const SavedRun& run, const TrainerOptions& opt, const Dataset<float>& train,
                   const Dataset<float>& validation, const Dataset<float>& test) {
  if (cli.has("audit") && validation.size() == 0)
    throw ValueError("--audit gathers the gate statistics over the validation set after every epoch, and --val 0 "
                     "holds none out: keep a validation split, or audit the test set after training with "
                     "--eval-only --audit");
  // The test set is not seen during training: it is evaluated once, after the last epoch.
  Trainer<float, Net> trainer(net, train, opt, validation.size() > 0 ? &validation : nullptr, nullptr,
                              ranks().forTrainer());
  const bool rankZero = trainer.isRankZero();
  if (run.resume) {
    trainer.resume(run.ckpt, kMayChangeOnResume);
    std::cout << "resumed " << run.ckpt << " at epoch " << trainer.epoch() << ", batch " << trainer.batchInEpoch()
              << ", step " << trainer.step() << "\n";
  }
  ProgressBar bar;
  trainer.onEpochStart = [&](int e) {
    bar.start("epoch " + std::to_string(e + 1) + "/" + std::to_string(opt.epochs), trainer.batchesPerEpoch());
  };
  trainer.onBatch = [&](const BatchProgress& p) { bar.update(p.batch, p.loss, p.accuracy, p.samplesPerSec); };
  trainer.onEpoch = [&](const EpochMetrics& m) {
    char val[64] = "";
    if (m.validation.count > 0)
      std::snprintf(val, sizeof val, "val loss %.4f acc %.2f%%  ", m.validation.loss, 100 * m.validation.accuracy);
    char line[256];
    std::snprintf(line, sizeof line, "epoch %d/%d  lr %.2e  train loss %.4f acc %.2f%%  %s%.1fs  %.0f/s", m.epoch,
                  opt.epochs, m.lr, m.trainLoss, 100 * m.trainAccuracy, val, m.seconds, m.samplesPerSec);
    bar.finish(line);
  };
  trainer.shouldStop = [] { return stopSignal() != 0; };
  AuditRecorder audit;
  if (cli.has("audit") && rankZero) auditEveryEpoch(trainer, trainer.gates(), net, audit, run.out);
  const EpochMetrics last = trainer.run();
  if (trainer.stopped()) {
    const int sig = stopSignal() != 0 ? stopSignal() : SIGTERM;  // another rank may have been signalled
    bar.finish("interrupted");
    std::cout << program << ": stopped by " << signalName(sig) << " at epoch " << trainer.epoch() + 1 << "/"
              << opt.epochs << ", batch " << trainer.batchInEpoch() << "/" << trainer.batchesPerEpoch() << " (step "
              << trainer.step() << ")"
              << (trainer.batchInEpoch() == trainer.batchesPerEpoch() ? ", in the epoch's validation (a resume repeats it)"
                                                                      : "")
              << "\n";
    if (trainer.step() > 0)
      std::cout << "checkpoint: " << trainer.checkpointPath() << "\ncontinue with the same options and --resume\n";
    return 128 + sig;
  }
  if (last.epoch == 0) {
    std::cout << "nothing to do: the checkpoint already holds " << trainer.epoch() << " epochs\n";
    return 0;
  }
  if (rankZero) {
    const int status = report::finalTest(program, trainer, last, test, validation.size(), cfg, opt.epochs, run.out);
    if (status != 0) return status;
  }
  if (const auto* dp = trainer.dataParallel())
    std::cout << "communication: " << dp->messages() << " collective calls, " << dp->communicationSeconds()
              << " s on rank 0\n";
  return 0;
}

// --mpi-timeout as given ("--mpi-timeout S" or "--mpi-timeout=S"), else its default, read before MPI starts
// (the command line is parsed after MPI_Init, which may remove its own options). A value that is not a
// number gives 0 here; the parser refuses it once MPI is up.
inline double mpiTimeoutBeforeParsing(const cli::CommandLine& cli, int argc, char** argv) {
  std::string value = cli.text("mpi-timeout");
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--mpi-timeout" && i + 1 < argc) value = argv[i + 1];
    if (arg.rfind("--mpi-timeout=", 0) == 0) value = arg.substr(std::string("--mpi-timeout=").size());
  }
  char* end = nullptr;
  const double seconds = std::strtod(value.c_str(), &end);
  return end != value.c_str() && *end == '\0' && seconds > 0 && seconds <= 1e7 ? seconds : 0;
}

// main(): parses the command line, prints --help, installs the stop handlers and maps errors to exit
// statuses with the program's hints.
inline int runMain(const std::string& program, cli::CommandLine& cli, int argc, char** argv,
                   const std::function<int(const cli::CommandLine&)>& run, const std::string& dataHint) {
  try {
    ranks().start(&argc, &argv, cli.declares("mpi-timeout") ? mpiTimeoutBeforeParsing(cli, argc, argv) : 0,
                  kExitRankLost);
    cli.parse(argc, argv);
    if (cli.declares("mpi-timeout")) ranks().endJobAfter(cli.number("mpi-timeout", 0, 1e7), kExitRankLost);
    requireRanksAgree(optionItems(program, cli), "command-line options");
    if (cli.has("help")) {
      std::cout << cli.help();
      return ranks().finish(0);
    }
    installStopSignalHandlers();
    // A file-size limit (ulimit -f) then fails a write with EFBIG and a message, like a full disk,
    // instead of killing the program halfway through a checkpoint.
    std::signal(SIGXFSZ, SIG_IGN);
    return ranks().finish(run(cli));
  } catch (const RanksDisagree& e) {
    // Every rank knows (the digests were gathered by all), so every rank ends normally with the usage
    // status: no MPI_Abort, whose ending of the job can lose rank 0's message on its way through
    // mpirun. The barrier keeps the other ranks until rank 0 has printed.
    if (ranks().comm().rank() == 0) std::cerr << program << ": " << e.what() << "\n" << std::flush;
    ranks().comm().barrier();
    return ranks().finish(kExitUsage);
  } catch (const OptionFileError& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return ranks().fail(kExitFile);
  } catch (const DataError& e) {
    std::cerr << program << ": " << e.what() << "\n" << dataHint;
    return ranks().fail(kExitFile);
  } catch (const NonFiniteError& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return ranks().fail(kExitNonFinite);
  } catch (const MathError& e) {  // NaN/Inf reached an operation (--no-nan-guard lets it through)
    std::cerr << program << ": " << e.what() << "\n";
    return ranks().fail(kExitNonFinite);
  } catch (const IoError& e) {
    std::cerr << program << ": " << e.what() << "\n"
              << "hint: --resume and --eval-only need a checkpoint.safetensors of " << program
              << " in --out; --out must be writable.\n";
    return ranks().fail(kExitFile);
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return ranks().fail(kExitUsage);
  }
}

}  // namespace ddl::example
