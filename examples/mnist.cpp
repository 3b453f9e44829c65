// ddl-mnist: trains a DeltaNet classifier on Fashion-MNIST (or any IDX data set) and reports the
// test accuracy and a per-block audit of the Delta gate.
//   ddl-mnist                             Fashion-MNIST from Debian's dataset-fashion-mnist
//   ddl-mnist --data DIR --epochs 5       any IDX set (train-/t10k- images and labels, raw or .gz)
//   ddl-mnist --residual additive         the plain residual baseline (same net, one option changed)
//   ddl-mnist --resume / --eval-only      continue / evaluate the checkpoint in --out
// Ctrl-C (SIGINT) or SIGTERM finishes the current step, saves a checkpoint and exits with 128 + signal;
// --resume then continues exactly where it stopped.
#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "curves.hpp"
#include "final_report.hpp"
#include "ddl/data/idx.hpp"
#include "ddl/diag/gate_audit.hpp"
#include "ddl/io/atomic_file.hpp"
#include "ddl/train/epoch_audit.hpp"
#include "ddl/train/progress.hpp"
#include "ddl/train/stop_signal.hpp"
#include "ddl/train/trainer.hpp"

namespace {

// Exit statuses besides 0 (done) and 128 + signal (stopped by SIGINT/SIGTERM, checkpoint saved).
constexpr int kExitUsage = 1;      // a bad option or another error
constexpr int kExitFile = 2;       // data, checkpoint or output folder unusable
constexpr int kExitNonFinite = 3;  // training produced NaN/Inf; the last checkpoint is the last good state

constexpr std::int64_t kMaxCount = std::numeric_limits<std::int64_t>::max();
constexpr double kMaxReal = std::numeric_limits<double>::max();

// The data could not be loaded: the message is followed by a hint on where to get it.
struct DataError : ddl::IoError {
  using ddl::IoError::IoError;
};

void declareOptions(ddl::cli::CommandLine& cli) {
  cli.option("data", "DIR", "IDX data folder", ddl::debianFashionMnistDir())
      .option("limit", "N", "use only the first N training and test samples (0 = all)", "0")
      .option("val", "N",
              "hold out N training samples (a seeded split) as the validation set that settings are chosen on; "
              "auto = a twelfth of the training set (5000 of 60000); 0 = train on all",
              "auto")
      .section("model")
      .option("preset", "P", "code | paper | v1", "code")
      .option("residual", "R", "delta | write_only | additive", "delta")
      .option("width", "D", "state width d", "256")
      .option("depth", "L", "number of Delta blocks", "4")
      .option("dv", "V", "value channels of the expanded state", "1")
      .option("hidden", "H", "MLP hidden width per block (0 = 4 d)", "1024")
      .section("training")
      .option("epochs", "E", "training epochs", "10")
      .option("batch", "B", "batch size", "128")
      .option("lr", "LR", "AdamW peak learning rate", "0.0005")
      .option("schedule", "S", "cosine | constant | step", "cosine")
      .option("warmup", "W", "linear warmup steps (default: 200, at most 1/10 of all steps)")
      .option("weight-decay", "WD", "AdamW decoupled weight decay", "0.01")
      .option("augment", "A",
              "training images: none | flip (mirror left-right at random) | shift (random shift by up to 2 "
              "pixels) | both",
              "none")
      .option("label-smoothing", "E", "label smoothing in [0, 1)", "0")
      .option("seed", "S", "initialisation and batch order", "1")
      .option("threads", "T", "0 = all cores", "0")
      .flag("no-nan-guard", "keep training through a NaN/Inf loss or gradient (default: stop with an error)")
      .section("output")
      .option("out", "DIR", "metrics.csv, checkpoint.safetensors, curves.png", "out/mnist")
      .flag("resume", "continue the run saved in --out (same options)")
      .flag("eval-only", "evaluate the checkpoint in --out on the test set");
  cli.flag("audit", "after every epoch write audit.csv and audit.json into --out: per block the gate, regimes, "
                    "|k~| vs eps, measured |e_post|/|e_pre| vs |1-beta*rho|, |k^T X|, |v| and the frozen spectrum "
                    "(with --eval-only: eval_audit.csv and eval_audit.json of the test evaluation)");
}

// The model: from the command line, or (resume / eval-only) from the checkpoint.
ddl::DeltaNetConfig modelConfig(const ddl::cli::CommandLine& cli, const ddl::CheckpointMeta* saved,
                                const std::string& ckpt) {
  if (saved) return ddl::configFromCheckpoint(*saved, ckpt);
  ddl::DeltaNetConfig cfg;
  ddl::applyPreset(cfg, cli.choice("preset", {"code", "paper", "v1"}));
  cfg.block.residual.residual = ddl::parseResidualKind(cli.choice("residual", {"delta", "write_only", "additive"}));
  cfg.d = cli.integer<ddl::Index>("width", 1, 1 << 16);
  cfg.depth = cli.integer<ddl::Index>("depth", 0, 1 << 10);
  cfg.dv = cli.integer<ddl::Index>("dv", 1, 1 << 10);
  cfg.block.hidden = cli.integer<ddl::Index>("hidden", 0, 1 << 20);
  return cfg;
}

// Training options: the saved ones on a resume (explicit options still apply), else the defaults,
// chosen by validation accuracy on the held-out split (docs/mnist_defaults.md). warmup is empty
// when it is left to chooseWarmup().
ddl::TrainerOptions trainingOptions(const ddl::cli::CommandLine& cli, const ddl::CheckpointMeta* saved,
                                    const std::string& ckpt, std::optional<std::int64_t>& warmup) {
  ddl::TrainerOptions opt;
  if (saved) {
    const nlohmann::json j = nlohmann::json::parse(saved->extra.at("train_options"), nullptr, false);
    if (!j.is_object()) throw ddl::IoError(ckpt + ": the train_options metadata is not a JSON object");
    opt.updateFromJson(j);
  }
  // An option given wins; otherwise the saved value (resume) or the declared default (new run).
  auto keep = [saved](auto value) { return saved ? std::make_optional(value) : std::nullopt; };
  opt.epochs = cli.integer<int>("epochs", 1, 1000000, keep(opt.epochs));
  opt.batchSize = cli.integer<ddl::Index>("batch", 1, 1 << 20, keep(opt.batchSize));
  opt.adam.lr = cli.number("lr", 0, kMaxReal, keep(opt.adam.lr));
  opt.schedule = ddl::parseLrScheduleKind(cli.choice("schedule", {"cosine", "constant", "step"}, keep(ddl::toString(opt.schedule))));
  warmup = cli.has("warmup") ? cli.integer<std::int64_t>("warmup", 0, kMaxCount) : keep(opt.warmupSteps);
  opt.adam.weightDecay = cli.number("weight-decay", 0, kMaxReal, keep(opt.adam.weightDecay));
  if (cli.has("augment") || !saved) {
    const std::string mode = cli.choice("augment", {"none", "flip", "shift", "both"});
    opt.augment.enabled = mode != "none";
    opt.augment.flip = mode == "flip" || mode == "both";
    opt.augment.pad = mode == "shift" || mode == "both" ? 2 : 0;
  }
  opt.labelSmoothing = cli.number("label-smoothing", 0, 1, keep(opt.labelSmoothing));
  opt.seed = cli.integer<std::uint64_t>("seed", 0, std::numeric_limits<std::uint64_t>::max(), keep(opt.seed));
  opt.threads = cli.integer<int>("threads", 0, 4096);
  opt.checkFinite = !cli.has("no-nan-guard");
  opt.outDir = cli.text("out");
  return opt;
}

// Default warmup: 200 steps, at most a tenth of the run.
std::int64_t chooseWarmup(const ddl::TrainerOptions& opt, ddl::Index trainSize) {
  const std::int64_t steps = (trainSize + opt.batchSize - 1) / opt.batchSize * opt.epochs;
  return std::min<std::int64_t>(200, steps / 10);
}

ddl::Dataset<float> loadPart(const std::string& dir, ddl::DataPart part, const ddl::LoadOptions& lo) {
  try {
    return ddl::loadIdxDir<float>(dir, part, lo);
  } catch (const ddl::IoError& e) {
    throw DataError(e.what());
  }
}

int run(const ddl::cli::CommandLine& cli) {
  const std::string out = cli.text("out"), ckpt = out + "/checkpoint.safetensors";
  const bool resume = cli.has("resume"), evalOnly = cli.has("eval-only");
  ddl::CheckpointMeta saved;
  if (resume || evalOnly) {  // the saved run decides the model; explicit options still apply
    saved = ddl::readCheckpointMetadata(ckpt);
    for (const char* key : {"train_options", "input_mean", "input_std"})
      if (!saved.extra.count(key)) throw ddl::IoError(ckpt + ": no \"" + key + "\" metadata: not a ddl-mnist checkpoint");
  }
  const ddl::CheckpointMeta* from = resume || evalOnly ? &saved : nullptr;
  ddl::DeltaNetConfig cfg = modelConfig(cli, from, ckpt);
  std::optional<std::int64_t> warmup;
  ddl::TrainerOptions opt = trainingOptions(cli, from, ckpt, warmup);
  const std::optional<ddl::Index> valOption =  // empty: "auto"
      cli.text("val") == "auto" ? std::nullopt : std::make_optional(cli.integer<ddl::Index>("val", 0, kMaxCount));
  ddl::LoadOptions lo;
  lo.limit = cli.integer<ddl::Index>("limit", 0, kMaxCount);
  lo.numClasses = static_cast<int>(cfg.classes);
  ddl::setNumThreads(opt.threads);

  // Data: scaled to [0, 1], then normalised with the training set's mean and deviation.
  const std::string dir = cli.text("data");
  ddl::Dataset<float> train, test = loadPart(dir, ddl::DataPart::Test, lo);
  ddl::ChannelStats<float> st{ddl::VecX<float>(1), ddl::VecX<float>(1)};
  if (evalOnly) {
    st.mean(0) = static_cast<float>(ddl::parseNumber(ckpt + ": input_mean", saved.extra.at("input_mean")));
    st.stddev(0) = static_cast<float>(ddl::parseNumber(ckpt + ": input_std", saved.extra.at("input_std"), 1e-30));
  } else {
    train = loadPart(dir, ddl::DataPart::Train, lo);
    if (train.features() != test.features()) {
      const auto dims = [](const ddl::ImageShape& s) {
        return std::to_string(s.channels) + " x " + std::to_string(s.height) + " x " + std::to_string(s.width);
      };
      throw DataError(dir + ": the training images are " + dims(train.shape) + " (" +
                      std::to_string(train.features()) + " values) but the test images are " + dims(test.shape) +
                      " (" + std::to_string(test.features()) + " values): both splits must have one image size");
    }
    st = ddl::channelStats(train);
    ddl::normalize(train, st);
  }
  ddl::normalize(test, st);
  cfg.inputDim = test.features();
  opt.extraMeta = {{"input_mean", ddl::csvNumber(st.mean(0))}, {"input_std", ddl::csvNumber(st.stddev(0))},
                   {"data", dir}};

  ddl::DeltaNet<float> net(cfg, opt.seed);
  std::cout << "ddl-mnist: preset " << cfg.preset << ", residual " << ddl::toString(cfg.block.residual.residual)
            << ", d " << cfg.d << ", depth " << cfg.depth << ", dv " << cfg.dv << ", hidden " << cfg.block.hidden
            << ", " << ddl::numParams(net) << " parameters, " << ddl::numThreads() << " threads\n"
            << "config: " << ddl::configJson(cfg) << "\n";
  if (evalOnly) {
    ddl::loadCheckpoint(ckpt, net);
    ddl::SoftmaxCrossEntropy<float> loss;
    ddl::NetGateAccumulator gates;
    ddl::MatX<float> logits;
    const ddl::EvalResult r = ddl::evaluate(net, loss, test, 1000, logits, [&] { gates.add(net); });
    std::printf("%s (epoch %lld): test loss %.4f, test accuracy %.2f%%\n", ckpt.c_str(),
                static_cast<long long>(saved.epoch), r.loss, 100.0 * r.accuracy);
    std::cout << ddl::formatGateSummary(gates.stats());
    if (cli.has("audit")) {
      ddl::writeEvaluationAudit(net, gates.stats(), static_cast<int>(saved.epoch), out);
      std::cout << "audit of this evaluation: " << out << "/eval_audit.csv, " << out << "/eval_audit.json\n";
    }
    return 0;
  }

  // The validation split: seeded by --seed, so a resume holds out the same samples.
  const ddl::Index nVal = valOption ? *valOption : train.size() / 12;
  ddl::Dataset<float> validation;
  if (nVal >= train.size())
    throw ddl::ValueError("--val " + std::to_string(nVal) + " leaves no training samples (the training set has " +
                          std::to_string(train.size()) + ")");
  if (nVal > 0) {
    ddl::TrainValidation<float> tv = ddl::splitValidation(train, nVal, opt.seed);
    train = std::move(tv.train);
    validation = std::move(tv.validation);
  }
  opt.warmupSteps = warmup ? *warmup : chooseWarmup(opt, train.size());
  std::cout << "data: " << dir << " (" << train.size() << " train, " << validation.size() << " validation, "
            << test.size() << " test); training: " << opt.toJson().dump() << "\n";
  // The test set is not seen during training: it is evaluated once, after the last epoch.
  ddl::Trainer<float> trainer(net, train, opt, nVal > 0 ? &validation : nullptr, nullptr);
  if (resume) {
    trainer.resume(ckpt);
    std::cout << "resumed " << ckpt << " at epoch " << trainer.epoch() << ", batch " << trainer.batchInEpoch()
              << ", step " << trainer.step() << "\n";
  }
  ddl::ProgressBar bar;
  trainer.onEpochStart = [&](int e) {
    bar.start("epoch " + std::to_string(e + 1) + "/" + std::to_string(opt.epochs), trainer.batchesPerEpoch());
  };
  trainer.onBatch = [&](const ddl::BatchProgress& p) { bar.update(p.batch, p.loss, p.accuracy, p.samplesPerSec); };
  trainer.onEpoch = [&](const ddl::EpochMetrics& m) {
    char val[64] = "";
    if (m.validation.count > 0)
      std::snprintf(val, sizeof val, "val loss %.4f acc %.2f%%  ", m.validation.loss, 100 * m.validation.accuracy);
    char line[256];
    std::snprintf(line, sizeof line, "epoch %d/%d  lr %.2e  train loss %.4f acc %.2f%%  %s%.1fs  %.0f/s", m.epoch,
                  opt.epochs, m.lr, m.trainLoss, 100 * m.trainAccuracy, val, m.seconds, m.samplesPerSec);
    bar.finish(line);
  };
  trainer.shouldStop = [] { return ddl::stopSignal() != 0; };
  ddl::AuditRecorder audit;
  if (cli.has("audit")) ddl::auditEveryEpoch(trainer, net, audit, out);
  const ddl::EpochMetrics last = trainer.run();
  if (trainer.stopped()) {
    const int sig = ddl::stopSignal();
    bar.finish("interrupted");
    std::cout << "ddl-mnist: stopped by " << ddl::signalName(sig) << " at epoch " << trainer.epoch() + 1 << "/"
              << opt.epochs << ", batch " << trainer.batchInEpoch() << "/" << trainer.batchesPerEpoch() << " (step "
              << trainer.step() << ")\n";
    if (trainer.step() > 0)
      std::cout << "checkpoint: " << trainer.checkpointPath() << "\ncontinue with the same options and --resume\n";
    return 128 + sig;
  }
  if (last.epoch == 0) {
    std::cout << "nothing to do: the checkpoint already holds " << trainer.epoch() << " epochs\n";
    return 0;
  }
  ddl::report::finalTest(trainer, last, test, validation.size(), cfg, opt.epochs, out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ddl::cli::CommandLine cli("ddl-mnist",
                            "trains a DeltaNet on Fashion-MNIST (or any IDX set). Ctrl-C / SIGTERM: finish the step,\n"
                            "save a checkpoint, exit 128 + signal. Exit 1: bad option, 2: unusable data or files,\n"
                            "3: NaN/Inf in training (the last checkpoint is the last good state).");
  try {
    declareOptions(cli);
    cli.parse(argc, argv);
    if (cli.has("help")) {
      std::cout << cli.help();
      return 0;
    }
    ddl::installStopSignalHandlers();
    // A file-size limit (ulimit -f) then fails a write with EFBIG and a message, like a full disk,
    // instead of killing the program halfway through a checkpoint.
    std::signal(SIGXFSZ, SIG_IGN);
    return run(cli);
  } catch (const DataError& e) {
    std::cerr << "ddl-mnist: " << e.what() << "\n"
              << "hint: install Fashion-MNIST with `sudo apt-get install dataset-fashion-mnist`, or pass --data DIR\n"
              << "      with train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-... files.\n";
    return kExitFile;
  } catch (const ddl::NonFiniteError& e) {
    std::cerr << "ddl-mnist: " << e.what() << "\n";
    return kExitNonFinite;
  } catch (const ddl::IoError& e) {
    std::cerr << "ddl-mnist: " << e.what() << "\n"
              << "hint: --resume and --eval-only need a checkpoint.safetensors in --out; --out must be writable.\n";
    return kExitFile;
  } catch (const std::exception& e) {
    std::cerr << "ddl-mnist: " << e.what() << "\n";
    return kExitUsage;
  }
}
