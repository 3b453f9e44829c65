// ddl-mnist: trains a DeltaNet classifier on Fashion-MNIST (or any IDX data set) and reports the
// test accuracy and a per-block audit of the Delta gate.
//   ddl-mnist                             Fashion-MNIST from Debian's dataset-fashion-mnist
//   ddl-mnist --data DIR --epochs 5       any IDX set (train-/t10k- images and labels, raw or .gz)
//   ddl-mnist --residual additive         the plain residual baseline (same net, one option changed)
//   ddl-mnist --input pixels              the pixels alone (default: pixels and oriented-gradient histograms)
//   ddl-mnist --resume / --eval-only      continue / evaluate the checkpoint in --out
// Ctrl-C (SIGINT) or SIGTERM finishes the current step, saves a checkpoint and exits with 128 + signal;
// --resume then continues exactly where it stopped.
#include <optional>
#include <string>

#include "example_run.hpp"
#include "beta_max_option.hpp"
#include "clamp_option.hpp"
#include "ddl/data/idx.hpp"
#include "ddl/data/orientation_histograms.hpp"

namespace {
using namespace ddl::example;

void declareOptions(ddl::cli::CommandLine& cli) {
  cli.option("data", "DIR", "IDX data folder", ddl::debianFashionMnistDir())
      .option("limit", "N", "use only the first N training and test samples (0 = all)", "0")
      .option("val", "N",
              "hold out N training samples (a seeded split) as the validation set that settings are chosen on; "
              "auto = a twelfth of the training set (5000 of 60000); 0 = train on all",
              "auto")
      .option("input", "I",
              "what the net sees: pixels | pixels+hog (the pixels followed by histograms of oriented gradients, "
              "docs/spec.md §9)",
              "pixels+hog")
      .section("model")
      .option("preset", "P", "code | paper | v1", "code")
      .option("residual", "R", "delta | write_only | additive", "delta")
      .option("width", "D", "state width d", "512")
      .option("depth", "L", "number of Delta blocks", "2")
      .option("dv", "V", "value channels of the expanded state", "1")
      .option("hidden", "H", "MLP hidden width per block (0 = 4 d)", "2048");
  declareBetaMaxOption(cli);
  // Chosen by validation accuracy on the held-out split (docs/mnist_defaults.md: the wide, shallow net of
  // the third sweep; with the histograms 7 epochs are within 0.1 points of 8 and keep the main job's
  // three minutes with a margin).
  TrainingDefaults d;
  d.epochs = "7";
  d.lr = "0.0005";
  d.weightDecay = "0.01";
  d.augmentHelp =
      "training images: none | flip (mirror left-right at random) | shift (random shift by up to 2 pixels) | both";
  d.augment = "none";
  d.labelSmoothing = "0";
  declareTrainingOptions(cli, d);
  declareOutputOptions(cli, "out/mnist");
  declareClampOption(cli);
}

// The model: from the command line, or (resume / eval-only) from the checkpoint.
ddl::DeltaNetConfig modelConfig(const ddl::cli::CommandLine& cli, const SavedRun& run) {
  requireSavedModelOptions(cli, run, {{"preset", "preset"}, {"residual", "residual"}, {"width", "d"}, {"depth", "depth"},
                                      {"dv", "dv"}, {"hidden", "hidden"}});
  if (run.from()) return savedModelConfig<ddl::DeltaNetConfig>(run);
  ddl::DeltaNetConfig cfg;
  ddl::applyPreset(cfg, cli.choice("preset", {"code", "paper", "v1"}));
  cfg.block.residual.residual = ddl::parseResidualKind(cli.choice("residual", {"delta", "write_only", "additive"}));
  cfg.d = cli.integer<ddl::Index>("width", 1, 1 << 16);
  cfg.depth = cli.integer<ddl::Index>("depth", 0, 1 << 10);
  cfg.dv = cli.integer<ddl::Index>("dv", 1, 1 << 10);
  cfg.block.hidden = cli.integer<ddl::Index>("hidden", 0, 1 << 20);
  return cfg;
}

// Whether the net sees the oriented-gradient histograms after the pixels: --input, or (resume /
// eval-only) what the checkpoint was trained on (checkpoints without the key saw pixels alone).
bool withHistograms(const ddl::cli::CommandLine& cli, const SavedRun& run) {
  if (!run.from()) return cli.choice("input", {"pixels", "pixels+hog"}) == "pixels+hog";
  const auto it = run.meta.extra.find("input");
  return it != run.meta.extra.end() && it->second == "pixels+hog";
}

void setAugment(const ddl::cli::CommandLine& cli, ddl::TrainerOptions& opt) {
  const std::string mode = cli.choice("augment", {"none", "flip", "shift", "both"});
  opt.augment.enabled = mode != "none";
  opt.augment.flip = mode == "flip" || mode == "both";
  opt.augment.pad = mode == "shift" || mode == "both" ? 2 : 0;
}

// The oriented-gradient histograms of d's [0, 1] images (docs/spec.md §9); an image set they do not
// fit (several channels, sides not multiples of 4) is a data error that names the remedy.
ddl::MatX<float> histograms(const std::string& dir, const ddl::Dataset<float>& d) {
  try {
    return ddl::orientationHistograms(d);
  } catch (const ddl::Error& e) {
    throw DataError(dir + ": " + e.what() + " (use --input pixels)");
  }
}

ddl::MatX<float> standardized(const ddl::MatX<float>& F, double mean, double stddev) {
  return ((F.array() - static_cast<float>(mean)) / static_cast<float>(stddev)).matrix();
}

const std::string& metadata(const SavedRun& run, const char* key) {
  const auto it = run.meta.extra.find(key);
  if (it == run.meta.extra.end()) throw ddl::IoError(run.ckpt + ": no \"" + key + "\" metadata");
  return it->second;
}

ddl::Dataset<float> loadPart(const std::string& dir, ddl::DataPart part, const ddl::LoadOptions& lo) {
  try {
    return ddl::loadIdxDir<float>(dir, part, lo);
  } catch (const ddl::IoError& e) {
    throw DataError(e.what());
  }
}

int run(const ddl::cli::CommandLine& cli) {
  const SavedRun saved = savedRun(cli, "ddl-mnist");
  ddl::DeltaNetConfig cfg = modelConfig(cli, saved);
  applyBetaMax(cli, cfg.block.residual, saved.from() ? saved.ckpt : std::string());
  const std::optional<ClampSpec> clamp = clampOption(cli, saved.evalOnly, cfg.depth, cfg.block.residual.residual);
  std::optional<std::int64_t> warmup;
  ddl::TrainerOptions opt = trainingOptions(cli, saved, [&](ddl::TrainerOptions& o) { setAugment(cli, o); }, warmup);
  const std::optional<ddl::Index> valOption =  // empty: "auto"
      cli.text("val") == "auto" ? std::nullopt : std::make_optional(cli.integer<ddl::Index>("val", 0, kMaxCount));
  ddl::LoadOptions lo;
  lo.limit = cli.integer<ddl::Index>("limit", 0, kMaxCount);
  lo.numClasses = static_cast<int>(cfg.classes);
  ddl::setNumThreads(opt.threads);

  const bool hog = withHistograms(cli, saved);
  if (hog && opt.augment.enabled)
    throw ddl::ValueError("--augment " + cli.text("augment") +
                          " transforms the images at every step, but the oriented-gradient histograms of "
                          "--input pixels+hog are computed once before training: use --input pixels with it");
  // Every option is checked before the output folder is claimed and the data is read.
  const RunFolder folder = saved.evalOnly ? RunFolder() : claimRunFolder(cli, saved);

  // Data: scaled to [0, 1], then normalised with the training set's mean and deviation; with --input
  // pixels+hog the histograms (computed from the [0, 1] pixels) follow, standardised with their own.
  const std::string dir = cli.text("data");
  ddl::Dataset<float> train, test = loadPart(dir, ddl::DataPart::Test, lo);
  DataIdentity identity{dir, {}};  // the images and labels as read, before normalisation
  ddl::ChannelStats<float> st{ddl::VecX<float>(1), ddl::VecX<float>(1)};
  double hogMean = 0, hogStd = 1;
  if (saved.evalOnly) {
    st.mean(0) = static_cast<float>(ddl::parseNumber(saved.ckpt + ": input_mean", saved.meta.extra.at("input_mean")));
    st.stddev(0) =
        static_cast<float>(ddl::parseNumber(saved.ckpt + ": input_std", saved.meta.extra.at("input_std"), 1e-30));
    if (hog) {
      hogMean = ddl::parseNumber(saved.ckpt + ": hog_mean", metadata(saved, "hog_mean"));
      hogStd = ddl::parseNumber(saved.ckpt + ": hog_std", metadata(saved, "hog_std"), 1e-30);
    }
  } else {
    train = loadPart(dir, ddl::DataPart::Train, lo);
    addDataset(identity.digest, train);
    addDataset(identity.digest, test);
    if (train.features() != test.features()) {
      const auto dims = [](const ddl::ImageShape& s) {
        return std::to_string(s.channels) + " x " + std::to_string(s.height) + " x " + std::to_string(s.width);
      };
      throw DataError(dir + ": the training images are " + dims(train.shape) + " (" +
                      std::to_string(train.features()) + " values) but the test images are " + dims(test.shape) +
                      " (" + std::to_string(test.features()) + " values): both splits must have one image size");
    }
    const ddl::MatX<float> trainHog = hog ? histograms(dir, train) : ddl::MatX<float>();
    if (hog) {
      ddl::featureMeanStd(trainHog, hogMean, hogStd);
      if (!(hogStd > 0))
        throw DataError(dir + ": the oriented-gradient histograms of the training images are all " +
                        ddl::csvNumber(hogMean) + " (flat images): use --input pixels");
    }
    st = ddl::channelStats(train);
    ddl::normalize(train, st);
    if (hog) train = ddl::withFeatures(train, standardized(trainHog, hogMean, hogStd));
  }
  const ddl::MatX<float> testHog = hog ? histograms(dir, test) : ddl::MatX<float>();
  ddl::normalize(test, st);
  if (hog) test = ddl::withFeatures(test, standardized(testHog, hogMean, hogStd));
  cfg.inputDim = test.features();
  opt.extraMeta.insert({{"input_mean", ddl::csvNumber(st.mean(0))}, {"input_std", ddl::csvNumber(st.stddev(0))},
                   {"data", dir}, {"input", hog ? "pixels+hog" : "pixels"}});
  if (hog) {
    opt.extraMeta["hog_mean"] = ddl::csvNumber(hogMean);
    opt.extraMeta["hog_std"] = ddl::csvNumber(hogStd);
  }
  if (!saved.evalOnly) requireSameData(saved, identity, opt);

  ddl::DeltaNet<float> net(cfg, opt.seed);
  std::cout << "ddl-mnist: preset " << ddl::toString(cfg.preset) << ", residual " << ddl::toString(cfg.block.residual.residual)
            << ", d " << cfg.d << ", depth " << cfg.depth << ", dv " << cfg.dv << ", hidden " << cfg.block.hidden
            << ", " << ddl::numParams(net) << " parameters, " << ddl::numThreads() << " threads" << ranks().note() << "\n"
            << "config: " << ddl::configJson(cfg) << "\n";
  if (saved.evalOnly)
    return clamp ? evaluateClampedCheckpoint(cli, net, saved, test, 1000, *clamp)
                 : evaluateCheckpoint(cli, net, saved, test, 1000);

  const ddl::Dataset<float> validation =
      splitOffValidation(train, valOption ? *valOption : train.size() / 12, opt.seed);
  opt.warmupSteps = warmup ? *warmup : chooseWarmup(opt, train.size());
  std::cout << "data: " << dir << " (" << train.size() << " train, " << validation.size() << " validation, "
            << test.size() << " test; input " << (hog ? "pixels+hog: " : "pixels: ") << test.features()
            << " numbers per image); training: " << opt.toJson().dump() << "\n";
  return trainAndReport("ddl-mnist", cli, net, cfg, saved, opt, train, validation, test);
}

}  // namespace

int main(int argc, char** argv) {
  ddl::cli::CommandLine cli("ddl-mnist",
                            "trains a DeltaNet on Fashion-MNIST (or any IDX set). Ctrl-C / SIGTERM: finish the step,\n"
                            "save a checkpoint, exit 128 + signal. Exit 1: bad option, 2: unusable data or files,\n"
                            "3: NaN/Inf in training (the last checkpoint is the last good state).");
  declareOptions(cli);
  return runMain("ddl-mnist", cli, argc, argv, run,
                 "hint: install Fashion-MNIST with `sudo apt-get install dataset-fashion-mnist`, or pass --data DIR\n"
                 "      with train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-... files.\n");
}
