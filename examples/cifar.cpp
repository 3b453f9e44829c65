// ddl-cifar: trains a ConvDeltaNet (docs/spec.md §4) on CIFAR-10 / CIFAR-100 binary data and reports the test
// accuracy and a per-block audit of the Delta gate.
//   ddl-cifar                              Fashion-MNIST written as CIFAR-10 files (no download needed)
//   ddl-cifar --data DIR                   real CIFAR-10 (data_batch_*.bin, test_batch.bin)
//   ddl-cifar --data DIR --cifar100        CIFAR-100 (train.bin, test.bin; fine labels)
//   ddl-cifar --residual additive          the plain residual CNN (same net, one option changed)
//   ddl-cifar --resume / --eval-only       continue / evaluate the checkpoint in --out
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "example_run.hpp"
#include "beta_max_option.hpp"
#include "clamp_option.hpp"
#include "ddl/core/parse.hpp"
#include "ddl/data/cifar.hpp"
#include "ddl/data/idx.hpp"
#include "ddl/io/atomic_file.hpp"
#include "ddl/nn/models/conv_delta_net.hpp"

namespace {
using namespace ddl::example;
using Net = ddl::ConvDeltaNet<float>;

void declareOptions(ddl::cli::CommandLine& cli) {
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
  declareBetaMaxOption(cli);
  // Chosen on the validation split (docs/cifar_defaults.md).
  TrainingDefaults d;
  d.epochs = "18";
  d.lr = "0.003";
  d.weightDecay = "0.05";
  d.augmentHelp = "training images: none | flip | crop | both";
  d.augment = "both";
  d.labelSmoothing = "0.1";
  declareTrainingOptions(cli, d);
  cli.option("crop-pad", "P", "random crop offsets in [-P, P] pixels (zero padding)", "2");
  declareOutputOptions(cli, "out/cifar");
  declareClampOption(cli);
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

ddl::ConvDeltaNetConfig modelConfig(const ddl::cli::CommandLine& cli, const SavedRun& run) {
  requireSavedModelOptions(cli, run, {{"preset", "preset"}, {"residual", "residual"}, {"widths", "widths"},
                                      {"depths", "depths"}, {"dv", "dv"}, {"stem-stride", "stem_stride"}});
  if (run.from()) return savedModelConfig<ddl::ConvDeltaNetConfig>(run);
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

void setAugment(const ddl::cli::CommandLine& cli, ddl::TrainerOptions& opt) {
  const std::string mode = cli.choice("augment", {"none", "flip", "crop", "both"});
  opt.augment.enabled = mode != "none";
  opt.augment.flip = mode == "flip" || mode == "both";
  opt.augment.pad = mode == "crop" || mode == "both" ? cli.integer<ddl::Index>("crop-pad", 1, 16) : 0;
}

std::string joinList(const std::vector<ddl::Index>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// Per-channel statistics as "a,b,c" (checkpoint metadata) and back.
std::string statsText(const ddl::VecX<float>& v) {
  std::string s;
  for (ddl::Index i = 0; i < v.size(); ++i) s += (i ? "," : "") + ddl::csvNumber(v(i));
  return s;
}
void readStats(const std::string& what, const std::string& text, double lo, ddl::VecX<float>& v) {
  std::size_t start = 0;
  for (ddl::Index c = 0; c < v.size(); ++c) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    v(c) = static_cast<float>(ddl::parseNumber(what, text.substr(start, comma - start), lo));
    start = comma + 1;
  }
}

int run(const ddl::cli::CommandLine& cli) {
  const SavedRun saved = savedRun(cli, "ddl-cifar");
  ddl::ConvDeltaNetConfig cfg = modelConfig(cli, saved);
  applyBetaMax(cli, cfg.block.residual, saved.from() ? saved.ckpt : std::string());
  ddl::Index blocks = 0;
  for (ddl::Index n : cfg.depths) blocks += n;
  const std::optional<ClampSpec> clamp = clampOption(cli, saved.evalOnly, blocks, cfg.block.residual.residual);
  std::optional<std::int64_t> warmup;
  ddl::TrainerOptions opt = trainingOptions(cli, saved, [&](ddl::TrainerOptions& o) { setAugment(cli, o); }, warmup);
  const ddl::Index nVal = cli.integer<ddl::Index>("val", 0, kMaxCount);
  ddl::LoadOptions lo;
  lo.limit = cli.integer<ddl::Index>("limit", 0, kMaxCount);
  // Every option is checked before the output folder is claimed and the data is read.
  const RunFolder folder = saved.evalOnly ? RunFolder() : claimRunFolder(cli, saved);
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
  ddl::setNumThreads(opt.threads);

  // Pixels scaled to [0, 1], then normalised per channel with the training set's statistics.
  ddl::Dataset<float> train, test = loadPart(dir, cli.has("cifar100"), ddl::DataPart::Test, lo);
  DataIdentity identity{dir, {}};  // the images and labels as read, before normalisation
  ddl::ChannelStats<float> st{ddl::VecX<float>(3), ddl::VecX<float>(3)};
  if (saved.evalOnly) {
    readStats(saved.ckpt + ": input_mean", saved.meta.extra.at("input_mean"), -kMaxReal, st.mean);
    readStats(saved.ckpt + ": input_std", saved.meta.extra.at("input_std"), 1e-30, st.stddev);
  } else {
    train = loadPart(dir, cli.has("cifar100"), ddl::DataPart::Train, lo);
    addDataset(identity.digest, train);
    addDataset(identity.digest, test);
    st = ddl::channelStats(train);
    ddl::normalize(train, st);
  }
  ddl::normalize(test, st);
  opt.extraMeta.insert({{"input_mean", statsText(st.mean)}, {"input_std", statsText(st.stddev)}, {"data", dir}});
  if (!saved.evalOnly) requireSameData(saved, identity, opt);

  Net net(cfg, opt.seed);
  std::cout << "model: ConvDeltaNet, preset " << ddl::toString(cfg.preset) << ", residual " << ddl::toString(cfg.block.residual.residual)
            << ", stem stride " << cfg.stemStride << ", widths " << joinList(cfg.widths) << ", depths "
            << joinList(cfg.depths) << ", dv " << cfg.dv << ", " << ddl::numParams(net) << " parameters, "
            << ddl::numThreads() << " threads" << ranks().note() << "\n";
  if (saved.evalOnly)
    return clamp ? evaluateClampedCheckpoint(cli, net, saved, test, 500, *clamp)
                 : evaluateCheckpoint(cli, net, saved, test, 500);

  const ddl::Dataset<float> validation = splitOffValidation(train, nVal, opt.seed);
  opt.warmupSteps = warmup ? *warmup : chooseWarmup(opt, train.size());
  opt.evalBatch = 500;
  std::cout << "data: " << train.size() << " train, " << validation.size() << " validation, " << test.size()
            << " test; training: " << opt.toJson().dump() << "\n";
  return trainAndReport("ddl-cifar", cli, net, cfg, saved, opt, train, validation, test);
}

}  // namespace

int main(int argc, char** argv) {
  ddl::cli::CommandLine cli("ddl-cifar", "trains a ConvDeltaNet on CIFAR-10/100 binary data (default: Fashion-MNIST as CIFAR-10)");
  declareOptions(cli);
  return runMain("ddl-cifar", cli, argc, argv, run,
                 "hint: pass --data DIR with CIFAR-10 binary files (cifar-10-batches-bin: data_batch_1..5.bin,\n"
                 "      test_batch.bin), or install Fashion-MNIST (`sudo apt-get install dataset-fashion-mnist`)\n"
                 "      to train on its CIFAR-layout copy.\n");
}
