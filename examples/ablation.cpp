// ddl-ablation: the residual ablation of issue 9. Trains the same DeltaNet MLP on Fashion-MNIST with
// residual kinds additive, delta and write_only for each --dvs value over --seeds seeds. All kinds of
// one seed index share the Trainer seed (initialisation, validation split and batch order), the
// optimizer and the budget. Writes a markdown report (mean ± std per kind and dv, paired delta vs
// additive comparison with a Student t test) and a CSV of every run, both atomically.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "ddl/data/idx.hpp"
#include "ddl/io/atomic_file.hpp"
#include "ddl/train/trainer.hpp"

namespace {

constexpr std::int64_t kMaxCount = std::numeric_limits<std::int64_t>::max();

struct Run {
  std::string kind;
  ddl::Index dv = 1;
  std::uint64_t seed = 0;
  double testAcc = 0, valAcc = 0, trainLoss = 0, seconds = 0;
  std::int64_t params = 0;
};

// Continued fraction of the regularized incomplete beta function (modified Lentz).
double betaContinuedFraction(double a, double b, double x) {
  const double tiny = 1e-300;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::fabs(d) < tiny) d = tiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 300; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    h *= d * c;
    aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
    d = 1 + aa * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < 1e-15) break;
  }
  return h;
}

// I_x(a, b), the regularized incomplete beta function.
double incompleteBeta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * betaContinuedFraction(a, b, x) / a;
  return 1 - front * betaContinuedFraction(b, a, 1 - x) / b;
}

// Two-sided p-value of Student's t with nu degrees of freedom: P(|T| >= |t|) = I_{nu/(nu+t²)}(nu/2, 1/2).
double twoSidedP(double t, double nu) {
  if (!std::isfinite(t)) return 0;
  return incompleteBeta(nu / 2, 0.5, nu / (nu + t * t));
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}
double stddev(const std::vector<double>& v) {  // sample standard deviation (n - 1)
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

std::string fmt(const char* f, double a, double b = 0) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a, b);
  return buf;
}

std::vector<ddl::Index> parseDvs(const std::string& text) {
  std::vector<ddl::Index> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(ddl::parseInteger<ddl::Index>("--dvs", item, 1, 1 << 10));
  if (out.empty()) throw ddl::ValueError("--dvs expects a comma-separated list such as 1,4");
  return out;
}

int run(const ddl::cli::CommandLine& cli, const std::string& commandLine) {
  const std::string dir = cli.text("data"), out = cli.text("out");
  const std::vector<ddl::Index> dvs = parseDvs(cli.text("dvs"));
  const int seeds = cli.integer<int>("seeds", 1, 1000);
  const std::uint64_t seed0 = cli.integer<std::uint64_t>("seed", 0, std::numeric_limits<std::uint64_t>::max() / 2);
  const ddl::Index nVal = cli.integer<ddl::Index>("val", 1, kMaxCount);
  ddl::LoadOptions trainLo, testLo;
  trainLo.limit = cli.integer<ddl::Index>("train-limit", 0, kMaxCount);
  testLo.limit = cli.integer<ddl::Index>("test-limit", 0, kMaxCount);
  ddl::Dataset<float> train0 = ddl::loadIdxDir<float>(dir, ddl::DataPart::Train, trainLo);
  ddl::Dataset<float> test = ddl::loadIdxDir<float>(dir, ddl::DataPart::Test, testLo);
  const ddl::ChannelStats<float> st = ddl::channelStats(train0);
  ddl::normalize(train0, st);
  ddl::normalize(test, st);
  if (nVal >= train0.size())
    throw ddl::ValueError("--val " + std::to_string(nVal) + " leaves no training samples (the training set has " +
                          std::to_string(train0.size()) + ")");

  ddl::TrainerOptions base;
  base.epochs = cli.integer<int>("epochs", 1, 1000000);
  base.batchSize = cli.integer<ddl::Index>("batch", 1, 1 << 20);
  base.adam.lr = cli.number("lr", 0, 1e6);
  base.adam.weightDecay = cli.number("weight-decay", 0, 1e6);
  base.threads = cli.integer<int>("threads", 0, 4096);
  ddl::setNumThreads(base.threads);

  const char* kinds[] = {"additive", "delta", "write_only"};
  std::vector<Run> runs;
  for (int s = 0; s < seeds; ++s) {
    const std::uint64_t seed = seed0 + static_cast<std::uint64_t>(s);
    ddl::TrainValidation<float> tv = ddl::splitValidation(train0, nVal, seed);
    for (ddl::Index dv : dvs)
      for (const char* kind : kinds) {
        ddl::DeltaNetConfig cfg;
        ddl::applyPreset(cfg, "code");
        cfg.block.residual.residual = ddl::parseResidualKind(kind);
        cfg.d = cli.integer<ddl::Index>("width", 1, 1 << 16);
        cfg.depth = cli.integer<ddl::Index>("depth", 0, 1 << 10);
        cfg.dv = dv;
        cfg.block.hidden = cli.integer<ddl::Index>("hidden", 0, 1 << 20);
        cfg.inputDim = test.features();
        ddl::TrainerOptions opt = base;
        opt.seed = seed;
        const std::int64_t steps = (tv.train.size() + opt.batchSize - 1) / opt.batchSize * opt.epochs;
        opt.warmupSteps = std::min<std::int64_t>(200, steps / 10);
        ddl::DeltaNet<float> net(cfg, seed);
        Run r{kind, dv, seed};
        r.params = static_cast<std::int64_t>(ddl::numParams(net));
        ddl::Trainer<float> trainer(net, tv.train, opt, &tv.validation, &test);
        const auto t0 = std::chrono::steady_clock::now();
        const ddl::EpochMetrics last = trainer.run();
        r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        r.testAcc = last.test.accuracy;
        r.valAcc = last.validation.accuracy;
        r.trainLoss = last.trainLoss;
        std::printf("seed %llu dv %lld %-10s test %.2f%% val %.2f%% train loss %.4f %.1fs %lld params\n",
                    static_cast<unsigned long long>(seed), static_cast<long long>(dv), kind, 100 * r.testAcc,
                    100 * r.valAcc, r.trainLoss, r.seconds, static_cast<long long>(r.params));
        std::fflush(stdout);
        runs.push_back(r);
      }
  }

  std::filesystem::create_directories(out);
  ddl::writeFileAtomically(out + "/ablation_runs.csv", [&](std::ostream& os) {
    os << "kind,dv,seed,test_accuracy,val_accuracy,train_loss,seconds,params\n";
    for (const Run& r : runs)
      os << r.kind << ',' << r.dv << ',' << r.seed << ',' << ddl::csvNumber(r.testAcc) << ','
         << ddl::csvNumber(r.valAcc) << ',' << ddl::csvNumber(r.trainLoss) << ',' << ddl::csvNumber(r.seconds) << ','
         << r.params << '\n';
  });
  ddl::writeFileAtomically(out + "/ablation.md", [&](std::ostream& os) {
    os << "# Residual ablation (issue 9)\n\nCommand: `" << commandLine << "`\n\n"
       << "Data: " << dir << ", " << train0.size() - nVal << " training, " << nVal << " validation, " << test.size()
       << " test samples; " << seeds << " seeds from " << seed0
       << " (all kinds of one seed share initialisation seed, validation split and batch order).\n\n"
       << "| kind | dv | test acc % (mean ± std) | val acc % (mean ± std) | final train loss | s / run | params |\n"
       << "|---|---|---|---|---|---|---|\n";
    for (ddl::Index dv : dvs)
      for (const char* kind : kinds) {
        std::vector<double> te, va, lo, se;
        std::int64_t params = 0;
        for (const Run& r : runs)
          if (r.kind == kind && r.dv == dv) {
            te.push_back(100 * r.testAcc), va.push_back(100 * r.valAcc), lo.push_back(r.trainLoss),
                se.push_back(r.seconds), params = r.params;
          }
        os << "| " << kind << " | " << dv << " | " << fmt("%.2f ± %.2f", mean(te), stddev(te)) << " | "
           << fmt("%.2f ± %.2f", mean(va), stddev(va)) << " | " << fmt("%.4f ± %.4f", mean(lo), stddev(lo)) << " | "
           << fmt("%.1f", mean(se)) << " | " << params << " |\n";
      }
    os << "\n## Paired comparison: delta − additive test accuracy (percentage points)\n\n"
       << "| dv | mean diff | t | df | two-sided p | delta better / worse / tie |\n|---|---|---|---|---|---|\n";
    for (ddl::Index dv : dvs) {
      std::vector<double> diff;
      int better = 0, worse = 0, tie = 0;
      for (int s = 0; s < seeds; ++s) {
        const std::uint64_t seed = seed0 + static_cast<std::uint64_t>(s);
        double a = 0, d = 0;
        for (const Run& r : runs)
          if (r.dv == dv && r.seed == seed) {
            if (r.kind == "additive") a = 100 * r.testAcc;
            if (r.kind == "delta") d = 100 * r.testAcc;
          }
        diff.push_back(d - a);
        (d > a ? better : d < a ? worse : tie)++;
      }
      const double m = mean(diff), sd = stddev(diff), n = static_cast<double>(diff.size());
      os << "| " << dv << " | " << fmt("%+.3f", m);
      if (diff.size() >= 2 && sd > 0) {
        const double t = m / (sd / std::sqrt(n));
        os << " | " << fmt("%.3f", t) << " | " << diff.size() - 1 << " | " << fmt("%.4f", twoSidedP(t, n - 1));
      } else {
        os << " | n/a | " << diff.size() - 1 << " | n/a";
      }
      os << " | " << better << " / " << worse << " / " << tie << " |\n";
    }
  });
  std::cout << "report: " << out << "/ablation.md\nruns: " << out << "/ablation_runs.csv\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ddl::cli::CommandLine cli("ddl-ablation", "residual ablation: additive vs delta vs write_only on Fashion-MNIST");
  cli.option("data", "DIR", "IDX data folder", ddl::debianFashionMnistDir())
      .option("train-limit", "N", "use only the first N training samples (0 = all)", "20000")
      .option("test-limit", "N", "use only the first N test samples (0 = all)", "0")
      .option("val", "N", "hold out N training samples as a validation set", "2000")
      .section("model")
      .option("width", "D", "state width d", "64")
      .option("depth", "L", "number of Delta blocks", "2")
      .option("dvs", "LIST", "value channels to compare, comma-separated", "1,4")
      .option("hidden", "H", "MLP hidden width per block", "256")
      .section("training")
      .option("seeds", "N", "seeds per (kind, dv)", "5")
      .option("seed", "S", "first seed", "1")
      .option("epochs", "E", "training epochs", "2")
      .option("batch", "B", "batch size", "128")
      .option("lr", "LR", "AdamW peak learning rate (cosine schedule)", "0.001")
      .option("weight-decay", "WD", "AdamW decoupled weight decay", "0.01")
      .option("threads", "T", "0 = all cores", "2")
      .option("out", "DIR", "ablation.md and ablation_runs.csv", "out/ablation");
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
