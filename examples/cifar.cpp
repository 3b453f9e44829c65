// ddl-cifar: trains a ConvDeltaNet (SPEC §4) on CIFAR-10 / CIFAR-100 binary data and reports the test
// accuracy and a per-block audit of the Delta gate.
//   ddl-cifar                              Fashion-MNIST written as CIFAR-10 files (no download needed)
//   ddl-cifar --data DIR                   real CIFAR-10 (data_batch_*.bin, test_batch.bin)
//   ddl-cifar --data DIR --cifar100        CIFAR-100 (train.bin, test.bin; fine labels)
//   ddl-cifar --residual additive          the plain residual CNN (same net, one option changed)
//   ddl-cifar --resume / --eval-only       continue / evaluate the checkpoint in --out
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "curves.hpp"
#include "final_report.hpp"
#include "ddl/core/parse.hpp"
#include "ddl/data/cifar.hpp"
#include "ddl/data/idx.hpp"
#include "ddl/diag/gate_audit.hpp"
#include "ddl/io/atomic_file.hpp"
#include "ddl/nn/conv_delta_net.hpp"
#include "ddl/train/epoch_audit.hpp"
#include "ddl/train/progress.hpp"
#include "ddl/train/stop_signal.hpp"
#include "ddl/train/trainer.hpp"

namespace {

using Net = ddl::ConvDeltaNet<float>;
constexpr ddl::Index kMaxCount = ddl::Index(1) << 40;
constexpr double kMaxReal = 1e6;

// A data problem (missing or malformed files): exit code 2 with a hint.
struct DataError : ddl::IoError {
  using ddl::IoError::IoError;
};

ddl::cli::CommandLine makeCommandLine() {
  ddl::cli::CommandLine cli("ddl-cifar", "trains a ConvDeltaNet on CIFAR-10/100 binary data (default: Fashion-MNIST as CIFAR-10)");
  cli.section("data")
      .option("data", "DIR", "CIFAR-10 binary folder (data_batch_*.bin, test_batch.bin); without it a CIFAR-10-layout copy "
                             "of Fashion-MNIST is written to --cache and used")
      .flag("cifar100", "the folder holds CIFAR-100 (train.bin, test.bin), fine labels")
      .option("cache", "DIR", "where the Fashion-MNIST copy is written", "out/fashion-mnist-as-cifar10")
      .option("limit", "N", "use only the first N training and test samples (0 = all)", "0")
      .option("val", "N", "hold out N training samples as a validation set (0 = train on all)", "5000");
  cli.section("model")
      .option("preset", "P", "code | paper | v1", "code")
      .option("residual", "R", "delta | write_only | additive", "delta")
      .option("widths", "LIST", "channels per stage, comma separated", "24,48,96")
      .option("depths", "LIST", "Delta blocks per stage", "1,1,1")
      .option("dv", "V", "value channels of the expanded state", "1")
      .option("stem-stride", "S", "1 | 2: a stride-2 stem runs every stage at half the resolution", "2");
  cli.section("training")
      .option("epochs", "E", "training epochs", "18")
      .option("batch", "B", "batch size", "128")
      .option("lr", "LR", "AdamW peak learning rate", "0.003")
      .option("schedule", "S", "cosine | constant | step", "cosine")
      .option("warmup", "W", "linear warmup steps (default: 200, at most 1/10 of all steps)")
      .option("weight-decay", "WD", "AdamW decoupled weight decay", "0.05")
      .option("augment", "A", "training images: none | flip | crop | both", "both")
      .option("crop-pad", "P", "random crop offsets in [-P, P] pixels (zero padding)", "2")
      .option("label-smoothing", "E", "label smoothing", "0.1")
      .option("seed", "S", "initialisation and batch order", "1")
      .option("threads", "T", "0 = all cores", "0")
      .flag("no-nan-guard", "do not stop on a non-finite loss or gradient");
  cli.section("output")
      .option("out", "DIR", "metrics.csv, checkpoint.safetensors, curves.png", "out/cifar")
      .flag("resume", "continue the run saved in --out (same options)")
      .flag("eval-only", "evaluate the checkpoint in --out on the test set");
  cli.flag("audit", "after every epoch write audit.csv and audit.json into --out: per block the gate, regimes, "
                    "|k~| vs eps, measured |e_post|/|e_pre| vs |1-beta*rho|, |k^T X|, |v| and the frozen spectrum "
                    "(with --eval-only: eval_audit.csv and eval_audit.json of the test evaluation)");
  return cli;
}

std::vector<ddl::Index> parseList(const std::string& what, const std::string& text, ddl::Index lo) {
  std::vector<ddl::Index> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    out.push_back(ddl::parseInteger<ddl::Index>(what, text.substr(start, comma - start), lo, 1 << 16));
    start = comma + 1;
  }
  return out;
}

// One Fashion-MNIST image (28 x 28, row-major bytes) as a CIFAR-10 record: label, then the image
// centred in 32 x 32 (2 zero pixels on each side), repeated as the R, G and B planes.
void writeRecord(std::ostream& os, int label, const ddl::MatX<float>& images, ddl::Index col) {
  std::vector<char> rec(1 + 3 * 1024, 0);
  rec[0] = static_cast<char>(label);
  for (ddl::Index y = 0; y < 28; ++y)
    for (ddl::Index x = 0; x < 28; ++x) {
      const auto v = static_cast<unsigned char>(images(y * 28 + x, col));
      for (int c = 0; c < 3; ++c) rec[static_cast<std::size_t>(1 + c * 1024 + (y + 2) * 32 + (x + 2))] = static_cast<char>(v);
    }
  os.write(rec.data(), static_cast<std::streamsize>(rec.size()));
}

// Writes data_batch_1..5.bin and test_batch.bin from Debian's Fashion-MNIST into dir (each file
// atomically; files already there with the right size are kept) and returns dir.
std::string fashionMnistAsCifar(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw DataError("cannot create cache folder '" + dir + "': " + ec.message());
  ddl::LoadOptions raw;
  raw.scale = false;
  raw.numClasses = 10;
  auto load = [&](ddl::DataPart part) {
    try {
      return ddl::loadIdxDir<float>(ddl::debianFashionMnistDir(), part, raw);
    } catch (const ddl::IoError& e) {
      throw DataError(e.what());
    }
  };
  const std::uint64_t record = 3073;
  auto write = [&](const std::string& name, const ddl::Dataset<float>& d, ddl::Index first, ddl::Index n) {
    const std::string path = dir + "/" + name;
    if (fs::exists(path, ec) && fs::file_size(path, ec) == record * static_cast<std::uint64_t>(n)) return;
    ddl::writeFileAtomically(path, [&](std::ostream& os) {
      for (ddl::Index i = first; i < first + n; ++i) writeRecord(os, d.labels[static_cast<std::size_t>(i)], d.images, i);
    });
  };
  const ddl::Dataset<float> train = load(ddl::DataPart::Train), test = load(ddl::DataPart::Test);
  const ddl::Index per = train.size() / 5;
  for (int b = 0; b < 5; ++b)
    write("data_batch_" + std::to_string(b + 1) + ".bin", train, b * per, b == 4 ? train.size() - 4 * per : per);
  write("test_batch.bin", test, 0, test.size());
  return dir;
}

ddl::Dataset<float> loadPart(const std::string& dir, bool cifar100, ddl::DataPart part, const ddl::LoadOptions& lo) {
  try {
    return cifar100 ? ddl::loadCifar100<float>(dir, part, ddl::CifarLabels::Fine, lo) : ddl::loadCifar10<float>(dir, part, lo);
  } catch (const ddl::IoError& e) {
    throw DataError(e.what());
  }
}

ddl::ConvDeltaNetConfig modelConfig(const ddl::cli::CommandLine& cli, const ddl::CheckpointMeta* saved,
                                    const std::string& ckpt) {
  if (saved) return ddl::configFromCheckpoint<ddl::ConvDeltaNetConfig>(*saved, ckpt);
  ddl::ConvDeltaNetConfig cfg;
  cfg.block.residual.residual = ddl::parseResidualKind(cli.choice("residual", {"delta", "write_only", "additive"}));
  ddl::applyPreset(cfg, cli.choice("preset", {"code", "paper", "v1"}));
  cfg.widths = parseList("--widths", cli.text("widths"), 1);
  cfg.depths = parseList("--depths", cli.text("depths"), 0);
  cfg.dv = cli.integer<ddl::Index>("dv", 1, 64);
  cfg.stemStride = cli.integer<ddl::Index>("stem-stride", 1, 2);
  cfg.learnedExpansion = cfg.dv > 1;
  cfg.classes = cli.has("cifar100") ? 100 : 10;
  cfg.validate();
  return cfg;
}

ddl::TrainerOptions trainingOptions(const ddl::cli::CommandLine& cli, const ddl::CheckpointMeta* saved,
                                    const std::string& ckpt, std::optional<std::int64_t>& warmup) {
  ddl::TrainerOptions opt;
  if (saved) {
    const nlohmann::json j = nlohmann::json::parse(saved->extra.at("train_options"), nullptr, false);
    if (!j.is_object()) throw ddl::IoError(ckpt + ": the train_options metadata is not a JSON object");
    opt.updateFromJson(j);
  }
  // An option given wins; otherwise the saved value (resume) or the declared default (new run).
  auto given = [&](const char* name) { return cli.has(name) || !saved; };
  if (given("epochs")) opt.epochs = cli.integer<int>("epochs", 1, 1000000);
  if (given("batch")) opt.batchSize = cli.integer<ddl::Index>("batch", 1, 1 << 20);
  if (given("lr")) opt.adam.lr = cli.number("lr", 0, kMaxReal);
  if (given("schedule")) opt.schedule = ddl::parseLrScheduleKind(cli.choice("schedule", {"cosine", "constant", "step"}));
  if (cli.has("warmup"))
    warmup = cli.integer<std::int64_t>("warmup", 0, kMaxCount);
  else if (saved)
    warmup = opt.warmupSteps;
  if (given("weight-decay")) opt.adam.weightDecay = cli.number("weight-decay", 0, kMaxReal);
  if (given("augment")) {
    const std::string mode = cli.choice("augment", {"none", "flip", "crop", "both"});
    opt.augment.enabled = mode != "none";
    opt.augment.flip = mode == "flip" || mode == "both";
    opt.augment.pad = mode == "crop" || mode == "both" ? cli.integer<ddl::Index>("crop-pad", 1, 16) : 0;
  }
  if (given("label-smoothing")) opt.labelSmoothing = cli.number("label-smoothing", 0, 0.999);
  if (given("seed")) opt.seed = cli.integer<std::uint64_t>("seed", 0, std::numeric_limits<std::uint64_t>::max());
  opt.threads = cli.integer<int>("threads", 0, 4096);
  opt.checkFinite = !cli.has("no-nan-guard");
  opt.outDir = cli.text("out");
  return opt;
}

std::string joinList(const std::vector<ddl::Index>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

int run(const ddl::cli::CommandLine& cli) {
  const std::string out = cli.text("out"), ckpt = out + "/checkpoint.safetensors";
  const bool resume = cli.has("resume"), evalOnly = cli.has("eval-only");
  std::string dir;
  if (cli.has("data")) {
    dir = cli.text("data");
    std::cout << "ddl-cifar: " << (cli.has("cifar100") ? "CIFAR-100" : "CIFAR-10") << " binary data from " << dir << "\n";
  } else {
    dir = cli.text("cache");
    std::cout << "ddl-cifar: no --data given: training on Fashion-MNIST (" << ddl::debianFashionMnistDir()
              << ") written as CIFAR-10 binary files (28x28 padded to 32x32, 3 equal channels) in " << dir << "\n";
    fashionMnistAsCifar(dir);
  }
  ddl::CheckpointMeta saved;
  if (resume || evalOnly) {
    saved = ddl::readCheckpointMetadata(ckpt);
    for (const char* key : {"train_options", "input_mean", "input_std"})
      if (!saved.extra.count(key)) throw ddl::IoError(ckpt + ": no \"" + key + "\" metadata: not a ddl-cifar checkpoint");
  }
  const ddl::CheckpointMeta* from = resume || evalOnly ? &saved : nullptr;
  const ddl::ConvDeltaNetConfig cfg = modelConfig(cli, from, ckpt);
  std::optional<std::int64_t> warmup;
  ddl::TrainerOptions opt = trainingOptions(cli, from, ckpt, warmup);
  const ddl::Index nVal = cli.integer<ddl::Index>("val", 0, kMaxCount);
  ddl::LoadOptions lo;
  lo.limit = cli.integer<ddl::Index>("limit", 0, kMaxCount);
  ddl::setNumThreads(opt.threads);

  // Pixels scaled to [0, 1], then normalised per channel with the training set's statistics.
  ddl::Dataset<float> train, test = loadPart(dir, cli.has("cifar100"), ddl::DataPart::Test, lo);
  ddl::ChannelStats<float> st{ddl::VecX<float>(3), ddl::VecX<float>(3)};
  auto statsText = [](const ddl::VecX<float>& v) {
    std::string s;
    for (ddl::Index i = 0; i < v.size(); ++i) s += (i ? "," : "") + ddl::csvNumber(v(i));
    return s;
  };
  if (evalOnly) {
    const std::vector<std::string> keys{"input_mean", "input_std"};
    for (int k = 0; k < 2; ++k) {
      const std::string& text = saved.extra.at(keys[static_cast<std::size_t>(k)]);
      std::size_t start = 0;
      for (ddl::Index c = 0; c < 3; ++c) {
        const std::size_t comma = std::min(text.find(',', start), text.size());
        const double v = ddl::parseNumber(ckpt + ": " + keys[static_cast<std::size_t>(k)], text.substr(start, comma - start),
                                          k == 0 ? -kMaxReal : 1e-30);
        (k == 0 ? st.mean : st.stddev)(c) = static_cast<float>(v);
        start = comma + 1;
      }
    }
  } else {
    train = loadPart(dir, cli.has("cifar100"), ddl::DataPart::Train, lo);
    st = ddl::channelStats(train);
    ddl::normalize(train, st);
  }
  ddl::normalize(test, st);
  opt.extraMeta = {{"input_mean", statsText(st.mean)}, {"input_std", statsText(st.stddev)}, {"data", dir}};

  Net net(cfg, opt.seed);
  std::cout << "model: ConvDeltaNet, preset " << cfg.preset << ", residual " << ddl::toString(cfg.block.residual.residual)
            << ", stem stride " << cfg.stemStride << ", widths " << joinList(cfg.widths) << ", depths " << joinList(cfg.depths) << ", dv " << cfg.dv << ", "
            << ddl::numParams(net) << " parameters, " << ddl::numThreads() << " threads\n";
  if (evalOnly) {
    ddl::loadCheckpoint(ckpt, net);
    ddl::SoftmaxCrossEntropy<float> loss;
    ddl::NetGateAccumulator gates;
    ddl::MatX<float> logits;
    const ddl::EvalResult r = ddl::evaluate(net, loss, test, 500, logits, [&] { gates.add(net); });
    std::printf("%s (epoch %lld): test loss %.4f, test accuracy %.2f%%\n", ckpt.c_str(),
                static_cast<long long>(saved.epoch), r.loss, 100.0 * r.accuracy);
    std::cout << ddl::formatGateSummary(gates.stats());
    if (cli.has("audit")) {
      ddl::writeEvaluationAudit(net, gates.stats(), static_cast<int>(saved.epoch), out);
      std::cout << "audit of this evaluation: " << out << "/eval_audit.csv, " << out << "/eval_audit.json\n";
    }
    return 0;
  }

  ddl::Dataset<float> validation;
  if (nVal > 0) {
    ddl::TrainValidation<float> tv = ddl::splitValidation(train, nVal, opt.seed);
    train = std::move(tv.train);
    validation = std::move(tv.validation);
  }
  opt.warmupSteps = warmup ? *warmup
                           : std::min<std::int64_t>(200, (train.size() + opt.batchSize - 1) / opt.batchSize * opt.epochs / 10);
  opt.evalBatch = 500;
  std::cout << "data: " << train.size() << " train, " << validation.size() << " validation, " << test.size()
            << " test; training: " << opt.toJson().dump() << "\n";
  // The test set is not seen during training: it is evaluated once, after the last epoch.
  ddl::Trainer<float, Net> trainer(net, train, opt, nVal > 0 ? &validation : nullptr, nullptr);
  if (resume) {
    trainer.resume(ckpt);
    std::cout << "resumed " << ckpt << " at epoch " << trainer.epoch() << ", step " << trainer.step() << "\n";
  }
  ddl::installStopSignalHandlers();
  trainer.shouldStop = [] { return ddl::stopSignal() != 0; };
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
  ddl::AuditRecorder audit;
  if (cli.has("audit")) ddl::auditEveryEpoch(trainer, net, audit, out);
  const ddl::EpochMetrics last = trainer.run();
  if (ddl::stopSignal() != 0) {
    std::cout << "\nstopped by signal " << ddl::stopSignal() << "; the checkpoint in " << out
              << " holds the last finished step: continue with --resume\n";
    return 130;
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
  try {
    ddl::cli::CommandLine cli = makeCommandLine();
    cli.parse(argc, argv);
    if (cli.has("help")) {
      std::cout << cli.help();
      return 0;
    }
    return run(cli);
  } catch (const DataError& e) {
    std::cerr << "ddl-cifar: " << e.what() << "\n"
              << "hint: pass --data DIR with CIFAR-10 binary files (cifar-10-batches-bin: data_batch_1..5.bin,\n"
              << "      test_batch.bin), or install Fashion-MNIST (`sudo apt-get install dataset-fashion-mnist`)\n"
              << "      to train on its CIFAR-layout copy.\n";
    return 2;
  } catch (const ddl::IoError& e) {
    std::cerr << "ddl-cifar: " << e.what() << "\n"
              << "hint: --resume and --eval-only need a checkpoint.safetensors of ddl-cifar in --out.\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "ddl-cifar: " << e.what() << "\n";
    return 1;
  }
}
