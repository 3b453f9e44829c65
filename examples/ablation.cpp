// ddl-ablation: the residual ablation. Trains the same net (--net mlp: a DeltaNet MLP;
// --net conv: a ConvDeltaNet on the images) on Fashion-MNIST, or (--net lm) ddl-text's DeltaLM on a
// byte corpus (examples/ablation_lm.hpp), with residual kinds additive, delta and write_only for each
// --dvs value over --seeds seeds. All kinds of one seed index share the seed (initialisation,
// validation split and batch order), the optimizer and the budget.
//
// Protocol: kinds are compared on a validation split held out from the training data (accuracy,
// higher is better; for lm the validation loss, lower is better); the test set is evaluated once per
// run, after its last epoch, and only reported. Outputs in --out, each written atomically:
//   ablation.md      mean ± std per kind and dv, paired comparisons (Student t), equal-time table
//   runs.csv         every run;  curves.csv  validation loss/accuracy every --eval-every steps (lm:
//                    every epoch, the loop's own evaluation)
//   curves.png       equal-step and equal-time curves (mean over seeds), via gnuplot (curves.gp)
//   beta.png         β histograms per block of the delta and write_only nets (beta.gp, beta.dat);
//                    none for lm (the loop collects no gate statistics of a DeltaLM)
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "ablation_lm.hpp"
#include "beta_max_option.hpp"
#include "ablation_report.hpp"
#include "curves.hpp"
#include "precision_option.hpp"
#include "ddl/data/idx.hpp"
#include "ddl/io/atomic_file.hpp"
#include "ddl/nn/models/conv_delta_net.hpp"
#include "ddl/train/trainer.hpp"

namespace {

constexpr std::int64_t kMaxCount = std::numeric_limits<std::int64_t>::max();
using namespace ddl::ablation;
using Clock = std::chrono::steady_clock;

double secondsBetween(Clock::time_point from, Clock::time_point to) { return std::chrono::duration<double>(to - from).count(); }

std::vector<ddl::Index> parseList(const std::string& option, const std::string& text, ddl::Index lo) {
  std::vector<ddl::Index> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(ddl::parseInteger<ddl::Index>(option, item, lo, 1 << 16));
  if (out.empty()) throw ddl::ValueError(option + " expects a comma-separated list such as 1,4");
  return out;
}

// The IDX training and test sets, normalised by the training set's channel statistics.
void loadImages(const ddl::cli::CommandLine& cli, Setup& su, ddl::Dataset<float>& train0, ddl::Dataset<float>& test) {
  ddl::LoadOptions trainLo, testLo;
  trainLo.limit = cli.integer<ddl::Index>("train-limit", 0, kMaxCount);
  testLo.limit = cli.integer<ddl::Index>("test-limit", 0, kMaxCount);
  train0 = ddl::loadIdxDir<float>(su.dir, ddl::DataPart::Train, trainLo);
  test = ddl::loadIdxDir<float>(su.dir, ddl::DataPart::Test, testLo);
  const ddl::ChannelStats<float> st = ddl::channelStats(train0);
  ddl::normalize(train0, st);
  ddl::normalize(test, st);
  if (su.nVal >= train0.size())
    throw ddl::ValueError("--val " + std::to_string(su.nVal) + " leaves no training samples (the training set has " +
                          std::to_string(train0.size()) + ")");
  su.trainSize = train0.size();
  su.testSize = test.size();
}

// Trains one net and fills r: the curve (validation every evalEvery steps, and at steps 0 and the
// last), the final validation result and gate statistics, and the test result (evaluated once).
template <class Net>
void trainOne(Net& net, const ddl::TrainValidation<float>& tv, const ddl::Dataset<float>& test,
              const ddl::TrainerOptions& opt, std::int64_t evalEvery, Run& r) {
  r.params = static_cast<std::int64_t>(ddl::numParams(net));
  ddl::Trainer<float, Net> trainer(net, tv.train, opt, &tv.validation, nullptr);
  double trained = 0;
  Clock::time_point mark = Clock::now();
  auto record = [&] {
    const ddl::EvalResult v = trainer.evaluate(tv.validation);
    r.curve.push_back(CurvePoint{trainer.step(), trained, v.loss, v.accuracy});
  };
  record();
  // Evaluating between steps leaves training unchanged: the next step's forward rebuilds every cache.
  trainer.onEpochStart = [&](int) { mark = Clock::now(); };
  trainer.onBatch = [&](const ddl::BatchProgress&) {
    trained += secondsBetween(mark, Clock::now());
    if (trainer.step() % evalEvery == 0) record();
    mark = Clock::now();
  };
  const ddl::EpochMetrics last = trainer.run();
  if (r.curve.back().step != trainer.step())
    r.curve.push_back(CurvePoint{trainer.step(), trained, last.validation.loss, last.validation.accuracy});
  r.seconds = trained;
  r.valAcc = last.validation.accuracy;
  r.valLoss = last.validation.loss;
  r.trainLoss = last.trainLoss;
  r.gates = trainer.gates().stats();
  const ddl::EvalResult t = trainer.evaluate(test);
  r.testAcc = t.accuracy;
  r.testLoss = t.loss;
}


int run(const ddl::cli::CommandLine& cli, const std::string& commandLine) {
  const Clock::time_point start = Clock::now();
  Setup su;
  su.net = cli.choice("net", {"mlp", "conv", "lm"});
  const bool lm = su.lm();
  // --net lm: ddl-text's defaults (docs/text_defaults.md) where the image nets' differ.
  auto lmOr = [lm](auto value) { return lm ? std::optional<decltype(value)>(value) : std::nullopt; };
  su.dir = cli.text("data", lmOr(std::string(ddl::example::kFortunes)));
  su.out = cli.text("out");
  su.commandLine = commandLine;
  su.dvs = parseList("--dvs", cli.text("dvs", lmOr(std::string("1"))), 1);
  su.seeds = cli.integer<int>("seeds", 1, 1000);
  su.seed0 = cli.integer<std::uint64_t>("seed", 0, std::numeric_limits<std::uint64_t>::max() / 2);
  su.nVal = cli.integer<ddl::Index>("val", 1, kMaxCount);
  su.evalEvery = cli.integer<std::int64_t>("eval-every", 1, kMaxCount);
  const ddl::Index width = cli.integer<ddl::Index>("width", 1, 1 << 16, lmOr(ddl::Index(128))),
                   depth = cli.integer<ddl::Index>("depth", 0, 1 << 10, lmOr(ddl::Index(4))),
                   hidden = cli.integer<ddl::Index>("hidden", 0, 1 << 20);
  const double betaMax = ddl::example::givenBetaMax(cli).value_or(2.0);  // the gated kinds' cap
  const LmShape shape{width, depth, cli.integer<ddl::Index>("heads", 1, 1 << 14),
                      cli.integer<ddl::Index>("context", 1, 1 << 16), cli.integer<ddl::Index>("steps", 1, 1 << 30),
                      betaMax};
  const std::string capNote = betaMax == 2.0 ? std::string() : ", beta max " + ddl::csvNumber(betaMax);
  const std::vector<ddl::Index> widths = parseList("--widths", cli.text("widths"), 1),
                                depths = parseList("--depths", cli.text("depths"), 0);
  const ddl::Index stemStride = cli.integer<ddl::Index>("stem-stride", 1, 2);
  ddl::TrainerOptions& base = su.base;
  base.epochs = cli.integer<int>("epochs", 1, 1000000, lmOr(10));
  base.batchSize = cli.integer<ddl::Index>("batch", 1, 1 << 20, lmOr(ddl::Index(32)));
  base.adam.lr = cli.number("lr", 0, 1e6, lmOr(0.002));
  base.adam.weightDecay = cli.number("weight-decay", 0, 1e6, lmOr(0.1));
  base.clipNorm = cli.number("clip", 0, 1e6, lmOr(1.0));
  base.threads = cli.integer<int>("threads", 0, 4096);
  base.evalBatch = 500;
  ddl::setNumThreads(base.threads);
  su.precision = ddl::example::applyPrecision(cli);  // refused here, before any data is read or written

  ddl::Dataset<float> train0, test;
  TextData text;
  if (lm) {
    text = readTextData(su.dir, cli.integer<ddl::Index>("eval-bytes", 0, kMaxCount));
    describeLmSetup(su, text, shape);
  } else {
    loadImages(cli, su, train0, test);
  }
  std::filesystem::create_directories(su.out);

  std::vector<Run> runs;
  for (int s = 0; s < su.seeds; ++s) {
    const std::uint64_t seed = su.seed0 + static_cast<std::uint64_t>(s);
    const ddl::TrainValidation<float> tv = lm ? ddl::TrainValidation<float>{} : ddl::splitValidation(train0, su.nVal, seed);
    for (ddl::Index dv : su.dvs)
      for (const char* kind : kKinds) {
        ddl::TrainerOptions opt = base;
        opt.seed = seed;
        const std::int64_t steps = (tv.train.size() + opt.batchSize - 1) / opt.batchSize * opt.epochs;
        opt.warmupSteps = std::min<std::int64_t>(200, steps / 10);
        Run r;
        r.kind = kind;
        r.dv = dv;
        r.seed = seed;
        if (lm) {
          su.model = describeLm(shape, dv) + capNote;
          trainLm(text, shape, kind, dv, opt, r);
        } else if (su.net == "mlp") {
          ddl::DeltaNetConfig cfg;
          ddl::applyPreset(cfg, "code");
          cfg.block.residual.residual = ddl::parseResidualKind(kind);
          capGate(cfg.block.residual, betaMax);
          cfg.d = width;
          cfg.depth = depth;
          cfg.dv = dv;
          cfg.block.hidden = hidden;
          cfg.inputDim = test.features();
          su.model = "DeltaNet MLP, preset code, d " + std::to_string(width) + ", depth " + std::to_string(depth) +
                     ", hidden " + std::to_string(hidden) + capNote;
          ddl::DeltaNet<float> net(cfg, seed);
          trainOne(net, tv, test, opt, su.evalEvery, r);
        } else {
          ddl::ConvDeltaNetConfig cfg;
          cfg.block.residual.residual = ddl::parseResidualKind(kind);
          ddl::applyPreset(cfg, "code");
          capGate(cfg.block.residual, betaMax);
          cfg.channels = test.shape.channels;
          cfg.height = test.shape.height;
          cfg.width = test.shape.width;
          cfg.widths = widths;
          cfg.depths = depths;
          cfg.stemStride = stemStride;
          cfg.dv = dv;
          cfg.learnedExpansion = dv > 1;
          cfg.validate();
          su.model = "ConvDeltaNet, preset code, widths " + cli.text("widths") + ", depths " + cli.text("depths") +
                     ", stem stride " + std::to_string(stemStride) + " on " + std::to_string(cfg.height) + "x" +
                     std::to_string(cfg.width) + " images" + capNote;
          ddl::ConvDeltaNet<float> net(cfg, seed);
          trainOne(net, tv, test, opt, su.evalEvery, r);
        }
        std::printf("%s\n", runLine(r, lm).c_str());
        std::fflush(stdout);
        runs.push_back(std::move(r));
      }
  }
  su.wallSeconds = secondsBetween(start, Clock::now());

  ddl::writeFileAtomically(su.out + "/runs.csv", [&](std::ostream& os) {
    os << "kind,dv,seed,val_accuracy,val_loss,test_accuracy,test_loss,train_loss,train_seconds,params\n";
    for (const Run& r : runs)
      os << r.kind << ',' << r.dv << ',' << r.seed << ',' << ddl::csvNumber(r.valAcc) << ',' << ddl::csvNumber(r.valLoss)
         << ',' << ddl::csvNumber(r.testAcc) << ',' << ddl::csvNumber(r.testLoss) << ',' << ddl::csvNumber(r.trainLoss)
         << ',' << ddl::csvNumber(r.seconds) << ',' << r.params << '\n';
  });
  ddl::writeFileAtomically(su.out + "/curves.csv", [&](std::ostream& os) {
    os << "kind,dv,seed,step,train_seconds,val_loss,val_accuracy\n";
    for (const Run& r : runs)
      for (const CurvePoint& p : r.curve)
        os << r.kind << ',' << r.dv << ',' << r.seed << ',' << p.step << ',' << ddl::csvNumber(p.seconds) << ','
           << ddl::csvNumber(p.valLoss) << ',' << ddl::csvNumber(p.valAcc) << '\n';
  });
  plotCurves(su.out, runs, su.dvs);
  const bool haveBeta = plotBeta(su.out, runs, su.dvs);
  writeReport(su, runs, haveBeta);
  std::cout << "report: " << su.out << "/ablation.md (whole ablation " << fmt("%.0f", su.wallSeconds) << " s)\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ddl::cli::CommandLine cli("ddl-ablation",
                            "residual ablation: additive vs delta vs write_only on Fashion-MNIST (mlp, conv) or on\n"
                            "bytes of text (lm), compared on a validation split; the test set is evaluated once per run\n"
                            "and only reported. Defaults in brackets (lm: ...) are those of --net lm (ddl-text's).");
  cli.option("data", "PATH", "IDX data folder (lm: a text file, or a folder read as ddl-text reads it: " +
                                std::string(ddl::example::kFortunes) + ")", ddl::debianFashionMnistDir())
      .option("train-limit", "N", "mlp, conv: use only the first N training samples (0 = all)", "20000")
      .option("test-limit", "N", "mlp, conv: use only the first N test samples (0 = all)", "0")
      .option("val", "N", "mlp, conv: hold out N training samples as the validation set (seeded per run)", "2000")
      .option("eval-bytes", "N", "lm: validation bytes evaluated after every epoch (0 = all)", "65536")
      .section("model")
      .option("net", "NET", "mlp (DeltaNet on the pixel vector) | conv (ConvDeltaNet on the images) | lm (DeltaLM)", "mlp")
      .option("dvs", "LIST", "value channels to compare, comma-separated (lm: 1; dv > 1 is the variant cc)", "1,4")
      .option("width", "D", "mlp, lm: state width d (lm: 128)", "64")
      .option("depth", "L", "mlp, lm: number of blocks (lm: 4)", "2")
      .option("heads", "H", "lm: attention heads", "4")
      .option("context", "T", "lm: bytes per training window and longest context", "128")
      .option("hidden", "H", "mlp: MLP hidden width per block", "256")
      .option("widths", "LIST", "conv: channels per stage, comma-separated", "8,16")
      .option("depths", "LIST", "conv: Delta blocks per stage", "1,1")
      .option("stem-stride", "S", "conv: 1 | 2 (2 runs the stages at half the resolution)", "2")
      .option("beta-max", "B", "the gate's cap of the delta and write_only kinds: beta = B sigma(z), B in (0, 2], "
              "starting at B/2 (1 allows no reflection)", "2")
      .section("training")
      .option("seeds", "N", "seeds per (kind, dv)", "5")
      .option("seed", "S", "first seed", "1")
      .option("epochs", "E", "training epochs (lm: 10)", "2")
      .option("steps", "S", "lm: steps per epoch", "100")
      .option("batch", "B", "batch size (lm: 32 windows)", "128")
      .option("lr", "LR", "AdamW peak learning rate (cosine schedule) (lm: 0.002)", "0.001")
      .option("weight-decay", "WD", "AdamW decoupled weight decay (lm: 0.1)", "0.01")
      .option("clip", "C", "global gradient-norm clipping, 0 = off (lm: 1)", "0")
      .option("threads", "T", "0 = all cores", "2");
  ddl::example::declarePrecisionOption(cli);
  cli.section("output")
      .option("eval-every", "N", "mlp, conv: validation point of the curves every N steps (lm: every epoch)", "20")
      .option("out", "DIR", "ablation.md, runs.csv, curves.csv, curves.png, beta.png", "out/ablation");
  std::string commandLine = "ddl-ablation";
  for (int i = 1; i < argc; ++i) commandLine += std::string(" ") + argv[i];
  try {
    cli.parse(argc, argv);
    if (cli.has("help")) {
      std::cout << cli.help();
      return 0;
    }
    return run(cli, commandLine);
  } catch (const std::exception& e) {
    std::cerr << "ddl-ablation: " << e.what() << "\n";
    return 1;
  }
}
