// ddl-ablation: the residual ablation of issue 9. Trains the same net (--net mlp: a DeltaNet MLP;
// --net conv: a ConvDeltaNet on the images) on Fashion-MNIST with residual kinds additive, delta and
// write_only for each --dvs value over --seeds seeds. All kinds of one seed index share the Trainer
// seed (initialisation, validation split and batch order), the optimizer and the budget.
//
// Protocol: kinds are compared on a validation split held out from the training data; the test set
// is evaluated once per run, after its last epoch, and only reported. Outputs in --out, each written
// atomically:
//   ablation.md      mean ± std per kind and dv, paired comparisons (Student t), equal-time table
//   runs.csv         every run;  curves.csv  validation loss/accuracy every --eval-every steps
//   curves.png       equal-step and equal-time curves (mean over seeds), via gnuplot (curves.gp)
//   beta.png         β histograms per block of the delta and write_only nets (beta.gp, beta.dat)
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "curves.hpp"
#include "ddl/data/idx.hpp"
#include "ddl/io/atomic_file.hpp"
#include "ddl/nn/conv_delta_net.hpp"
#include "ddl/train/trainer.hpp"

namespace {

constexpr std::int64_t kMaxCount = std::numeric_limits<std::int64_t>::max();
constexpr const char* kKinds[] = {"additive", "delta", "write_only"};
constexpr const char* kGatedKinds[] = {"delta", "write_only"};
using Clock = std::chrono::steady_clock;

// Validation loss and accuracy after `step` training steps and `seconds` of training (evaluation
// time excluded, so that the time axis compares the kinds' training cost only).
struct CurvePoint {
  std::int64_t step = 0;
  double seconds = 0, valLoss = 0, valAcc = 0;
};

struct Run {
  std::string kind;
  ddl::Index dv = 1;
  std::uint64_t seed = 0;
  double valAcc = 0, valLoss = 0, testAcc = 0, testLoss = 0, trainLoss = 0, seconds = 0;
  std::int64_t params = 0;
  std::vector<CurvePoint> curve;
  std::vector<ddl::GateStats> gates;  // per block, over the validation set after the last epoch
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

double secondsBetween(Clock::time_point from, Clock::time_point to) { return std::chrono::duration<double>(to - from).count(); }

std::vector<ddl::Index> parseList(const std::string& option, const std::string& text, ddl::Index lo) {
  std::vector<ddl::Index> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(ddl::parseInteger<ddl::Index>(option, item, lo, 1 << 16));
  if (out.empty()) throw ddl::ValueError(option + " expects a comma-separated list such as 1,4");
  return out;
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
  r.gates = last.gates;
  const ddl::EvalResult t = trainer.evaluate(test);
  r.testAcc = t.accuracy;
  r.testLoss = t.loss;
}

// The runs of one (kind, dv), in seed order.
std::vector<const Run*> runsOf(const std::vector<Run>& runs, const std::string& kind, ddl::Index dv) {
  std::vector<const Run*> out;
  for (const Run& r : runs)
    if (r.kind == kind && r.dv == dv) out.push_back(&r);
  return out;
}

// The curve of a (kind, dv) averaged over seeds point by point (all seeds share the step grid).
std::vector<CurvePoint> meanCurve(const std::vector<const Run*>& group) {
  std::vector<CurvePoint> m = group.front()->curve;
  for (std::size_t i = 0; i < m.size(); ++i) {
    m[i].seconds = m[i].valLoss = m[i].valAcc = 0;
    for (const Run* r : group) {
      m[i].seconds += r->curve[i].seconds;
      m[i].valLoss += r->curve[i].valLoss;
      m[i].valAcc += r->curve[i].valAcc;
    }
    const double n = static_cast<double>(group.size());
    m[i].seconds /= n, m[i].valLoss /= n, m[i].valAcc /= n;
  }
  return m;
}

// Validation accuracy of a mean curve at training time t (linear between points; the last point
// beyond its end).
double accuracyAtTime(const std::vector<CurvePoint>& c, double t) {
  for (std::size_t i = 1; i < c.size(); ++i)
    if (c[i].seconds >= t) {
      const double span = c[i].seconds - c[i - 1].seconds;
      const double w = span > 0 ? (t - c[i - 1].seconds) / span : 1;
      return c[i - 1].valAcc + w * (c[i].valAcc - c[i - 1].valAcc);
    }
  return c.back().valAcc;
}

// "| mean diff | t | df | p | better / worse / tie" of paired differences b - a over seeds.
std::string pairedCells(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> diff;
  int better = 0, worse = 0, tie = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff.push_back(b[i] - a[i]);
    (b[i] > a[i] ? better : b[i] < a[i] ? worse : tie)++;
  }
  const double m = mean(diff), sd = stddev(diff), n = static_cast<double>(diff.size());
  std::string s = fmt("%+.3f", m);
  if (diff.size() >= 2 && sd > 0) {
    const double t = m / (sd / std::sqrt(n));
    s += " | " + fmt("%.3f", t) + " | " + std::to_string(diff.size() - 1) + " | " + fmt("%.4f", twoSidedP(t, n - 1));
  } else {
    s += " | n/a | " + std::to_string(diff.size() - 1) + " | n/a";
  }
  return s + " | " + std::to_string(better) + " / " + std::to_string(worse) + " / " + std::to_string(tie);
}

std::vector<double> column(const std::vector<const Run*>& group, double Run::*field) {
  std::vector<double> v;
  for (const Run* r : group) v.push_back(100 * (r->*field));
  return v;
}

// curves.dat (one gnuplot data block per (dv, kind): step, seconds, val loss, val acc %), curves.gp
// and curves.png: validation accuracy and loss against the step and against the training time. The
// y axes show the last three quarters of training (the first steps would squash the differences).
void plotCurves(const std::string& out, const std::vector<Run>& runs, const std::vector<ddl::Index>& dvs) {
  std::vector<std::string> titles;
  double accLow = 100, lossHigh = 0;
  ddl::writeFileAtomically(out + "/curves.dat", [&](std::ostream& os) {
    for (ddl::Index dv : dvs)
      for (const char* kind : kKinds) {
        titles.push_back(std::string(kind) + " dv " + std::to_string(dv));
        os << "# " << titles.back() << ": step, training seconds, val loss, val acc % (mean over seeds)\n";
        const std::vector<CurvePoint> curve = meanCurve(runsOf(runs, kind, dv));
        for (std::size_t i = 0; i < curve.size(); ++i) {
          const CurvePoint& p = curve[i];
          os << p.step << ' ' << ddl::csvNumber(p.seconds) << ' ' << ddl::csvNumber(p.valLoss) << ' '
             << ddl::csvNumber(100 * p.valAcc) << '\n';
          if (4 * i >= curve.size()) accLow = std::min(accLow, 100 * p.valAcc), lossHigh = std::max(lossHigh, p.valLoss);
        }
        os << "\n\n";
      }
  });
  auto plot = [&](int x, int y) {
    std::string line = "plot ";
    for (std::size_t i = 0; i < titles.size(); ++i)
      line += std::string(i ? ", '' " : "ARG1 ") + "index " + std::to_string(i) + " using " + std::to_string(x) + ":" +
              std::to_string(y) + " with linespoints pointsize 0.5 title '" + titles[i] + "'";
    return line + "\n";
  };
  const std::string script = out + "/curves.gp", png = out + "/curves.png";
  ddl::writeFileAtomically(script, [&](std::ostream& gp) {
    gp << "# gnuplot -c curves.gp curves.dat curves.png\n"
       << "set terminal png size 1200,860 noenhanced\nset output ARG2\nset multiplot layout 2,2\nset grid\n"
       << "set key bottom right\nset ylabel 'validation accuracy %'\nset yrange [" << std::floor(accLow - 0.5) << ":*]\n"
       << "set title 'equal steps: validation accuracy'\nset xlabel 'training step'\n" << plot(1, 4)
       << "set title 'equal time: validation accuracy'\nset xlabel 'training seconds (evaluation excluded)'\n" << plot(2, 4)
       << "set key top right\nset ylabel 'validation loss'\nset yrange [*:" << std::ceil(lossHigh * 20 + 0.5) / 20 << "]\n"
       << "set title 'equal steps: validation loss'\nset xlabel 'training step'\n" << plot(1, 3)
       << "set title 'equal time: validation loss'\nset xlabel 'training seconds (evaluation excluded)'\n" << plot(2, 3)
       << "unset multiplot\n";
  });
  ddl::plot::gnuplot(script, {out + "/curves.dat", png}, png, "curves");
}

// beta.dat (one block per (dv, block, gated kind): bin centre, fraction of tokens, summed over
// seeds), beta.gp and beta.png: one panel per block and dv. False when there are no blocks.
bool plotBeta(const std::string& out, const std::vector<Run>& runs, const std::vector<ddl::Index>& dvs) {
  const std::size_t blocks = runsOf(runs, "delta", dvs.front()).front()->gates.size();
  if (blocks == 0) return false;
  ddl::writeFileAtomically(out + "/beta.dat", [&](std::ostream& os) {
    for (ddl::Index dv : dvs)
      for (std::size_t b = 0; b < blocks; ++b)
        for (const char* kind : kGatedKinds) {
          std::vector<double> hist;
          double total = 0;
          for (const Run* r : runsOf(runs, kind, dv)) {
            const std::vector<ddl::Index>& h = r->gates[b].histogram;
            hist.resize(h.size());
            for (std::size_t i = 0; i < h.size(); ++i) hist[i] += static_cast<double>(h[i]), total += static_cast<double>(h[i]);
          }
          os << "# block " << b << ", dv " << dv << ", " << kind << ": beta bin centre, fraction of validation tokens\n";
          for (std::size_t i = 0; i < hist.size(); ++i)
            os << ddl::csvNumber(2.0 * (static_cast<double>(i) + 0.5) / static_cast<double>(hist.size())) << ' '
               << ddl::csvNumber(total > 0 ? hist[i] / total : 0) << '\n';
          os << "\n\n";
        }
  });
  const std::string script = out + "/beta.gp", png = out + "/beta.png";
  ddl::writeFileAtomically(script, [&](std::ostream& gp) {
    gp << "# gnuplot -c beta.gp beta.dat beta.png\n"
       << "set terminal png size " << 520 * dvs.size() << "," << 300 * blocks << " noenhanced\nset output ARG2\n"
       << "set multiplot layout " << blocks << "," << dvs.size() << " rowsfirst\nset grid\nset xrange [0:2]\n"
       << "set xlabel 'beta'\nset ylabel 'fraction of tokens'\nset key top center\nset style fill transparent solid 0.35\n";
    for (std::size_t b = 0; b < blocks; ++b)
      for (std::size_t d = 0; d < dvs.size(); ++d) {
        const std::size_t first = (d * blocks + b) * 2;
        gp << "set title 'block " << b << ", dv " << dvs[d] << "'\nplot ARG1 index " << first
           << " using 1:2 with boxes title 'delta', '' index " << first + 1
           << " using 1:2 with histeps linewidth 2 title 'write_only'\n";
      }
    gp << "unset multiplot\n";
  });
  ddl::plot::gnuplot(script, {out + "/beta.dat", png}, png, "beta histograms");
  return true;
}

struct Setup {
  std::string net, dir, out, commandLine;
  std::vector<ddl::Index> dvs;
  int seeds = 1;
  std::uint64_t seed0 = 0;
  ddl::Index trainSize = 0, nVal = 0, testSize = 0;
  std::int64_t evalEvery = 1;
  ddl::TrainerOptions base;
  std::string model;  // one line describing the net
  double wallSeconds = 0;
};

void writeReport(const Setup& su, const std::vector<Run>& runs, bool haveBeta) {
  ddl::writeFileAtomically(su.out + "/ablation.md", [&](std::ostream& os) {
    os << "# Residual ablation (issue 9): " << (su.net == "conv" ? "ConvDeltaNet" : "DeltaNet MLP") << "\n\n"
       << "Command: `" << su.commandLine << "`\n\n"
       << "Wall time of the whole ablation: " << fmt("%.0f", su.wallSeconds) << " s for " << runs.size()
       << " runs on " << ddl::numThreads()
       << " threads (wall times include waiting for other jobs when the machine is shared).\n\n"
       << "Model: " << su.model << ". Budget: " << su.base.epochs << " epochs, batch " << su.base.batchSize
       << ", AdamW lr " << su.base.adam.lr << " (cosine, warmup min(200, steps/10)), weight decay "
       << su.base.adam.weightDecay << ", fixed before the runs.\n\n"
       << "Data: " << su.dir << ", " << su.trainSize - su.nVal << " training, " << su.nVal << " validation (held out "
       << "from the training data, seeded by the run's seed), " << su.testSize << " test samples; " << su.seeds
       << " seeds from " << su.seed0 << " (all kinds of one seed share initialisation seed, validation split and "
       << "batch order).\n\n"
       << "Protocol: the kinds are compared on the validation split; the test set is evaluated once per run, "
          "after its last epoch, and only reported.\n\n"
       << "| kind | dv | val acc % (mean ± std) | val loss | test acc % (once, mean ± std) | final train loss "
          "| train s / run | params |\n|---|---|---|---|---|---|---|---|\n";
    for (ddl::Index dv : su.dvs)
      for (const char* kind : kKinds) {
        const std::vector<const Run*> g = runsOf(runs, kind, dv);
        const std::vector<double> va = column(g, &Run::valAcc), te = column(g, &Run::testAcc);
        std::vector<double> vl, lo, se;
        for (const Run* r : g) vl.push_back(r->valLoss), lo.push_back(r->trainLoss), se.push_back(r->seconds);
        os << "| " << kind << " | " << dv << " | " << fmt("%.2f ± %.2f", mean(va), stddev(va)) << " | "
           << fmt("%.4f", mean(vl)) << " | " << fmt("%.2f ± %.2f", mean(te), stddev(te)) << " | "
           << fmt("%.4f ± %.4f", mean(lo), stddev(lo)) << " | " << fmt("%.1f", mean(se)) << " | "
           << g.front()->params << " |\n";
      }

    os << "\n## Paired comparisons on validation accuracy (percentage points, equal steps)\n\n"
       << "b − a per seed; Student t test of the paired differences. The last column is the same "
          "difference on the test set (reported, not used for any choice).\n\n"
       << "| dv | b − a | mean diff | t | df | two-sided p | b better / worse / tie | test mean diff |\n"
       << "|---|---|---|---|---|---|---|---|\n";
    const std::pair<const char*, const char*> pairs[] = {
        {"additive", "delta"}, {"additive", "write_only"}, {"write_only", "delta"}};
    for (ddl::Index dv : su.dvs)
      for (const auto& [a, b] : pairs) {
        const std::vector<const Run*> ga = runsOf(runs, a, dv), gb = runsOf(runs, b, dv);
        const std::vector<double> ta = column(ga, &Run::testAcc), tb = column(gb, &Run::testAcc);
        std::vector<double> td;
        for (std::size_t i = 0; i < ta.size(); ++i) td.push_back(tb[i] - ta[i]);
        os << "| " << dv << " | " << b << " − " << a << " | "
           << pairedCells(column(ga, &Run::valAcc), column(gb, &Run::valAcc)) << " | " << fmt("%+.3f", mean(td))
           << " |\n";
      }

    os << "\n## Equal steps and equal time\n\n![validation curves](curves.png)\n\n"
       << "Validation loss and accuracy every " << su.evalEvery << " steps, mean over seeds (`curves.csv` holds every "
       << "seed, `curves.dat` the means); the y axes show the last three quarters of training. The time axis is "
          "training wall time only (evaluations excluded); it moves with the machine's load. At equal time, the "
          "validation accuracy of each kind at the time the fastest kind (mean over seeds) finished its budget:\n\n"
       << "| dv | time budget s | additive | delta | write_only |\n|---|---|---|---|---|\n";
    for (ddl::Index dv : su.dvs) {
      std::vector<std::vector<CurvePoint>> curves;
      double budget = std::numeric_limits<double>::infinity();
      for (const char* kind : kKinds) {
        curves.push_back(meanCurve(runsOf(runs, kind, dv)));
        budget = std::min(budget, curves.back().back().seconds);
      }
      os << "| " << dv << " | " << fmt("%.1f", budget);
      for (const auto& c : curves) os << " | " << fmt("%.2f", 100 * accuracyAtTime(c, budget));
      os << " |\n";
    }

    if (haveBeta) {
      os << "\n## Gate β per block (validation set after the last epoch, all seeds)\n\n![beta histograms](beta.png)\n\n"
         << "Regimes of the effective gate b = βρ, the operator's taxonomy (`classifyRegime`, SPEC §6 bands).\n\n"
         << "| dv | kind | block | β mean |";
      for (int r = 0; r < ddl::kDeltaRegimeCount; ++r) os << " " << ddl::regimeName(static_cast<ddl::DeltaRegime>(r)) << " |";
      os << " saturated |\n|---|---|---|---|";
      for (int r = 0; r <= ddl::kDeltaRegimeCount; ++r) os << "---|";
      os << "\n";
      for (ddl::Index dv : su.dvs)
        for (const char* kind : kGatedKinds) {
          const std::vector<const Run*> g = runsOf(runs, kind, dv);
          for (std::size_t b = 0; b < g.front()->gates.size(); ++b) {
            double tokens = 0, sum = 0, sat = 0;
            std::array<double, ddl::kDeltaRegimeCount> regime{};
            for (const Run* r : g) {
              const ddl::GateStats& st = r->gates[b];
              const double n = static_cast<double>(st.tokens);
              tokens += n, sum += n * st.betaMean, sat += static_cast<double>(st.saturated);
              for (std::size_t i = 0; i < regime.size(); ++i) regime[i] += static_cast<double>(st.regimes[i]);
            }
            auto pct = [&](double c) { return fmt("%.1f %%", tokens > 0 ? 100 * c / tokens : 0); };
            os << "| " << dv << " | " << kind << " | " << b << " | " << fmt("%.3f", tokens > 0 ? sum / tokens : 0) << " |";
            for (double c : regime) os << " " << pct(c) << " |";
            os << " " << pct(sat) << " |\n";
          }
        }
    }
  });
}

int run(const ddl::cli::CommandLine& cli, const std::string& commandLine) {
  const Clock::time_point start = Clock::now();
  Setup su;
  su.net = cli.choice("net", {"mlp", "conv"});
  su.dir = cli.text("data");
  su.out = cli.text("out");
  su.commandLine = commandLine;
  su.dvs = parseList("--dvs", cli.text("dvs"), 1);
  su.seeds = cli.integer<int>("seeds", 1, 1000);
  su.seed0 = cli.integer<std::uint64_t>("seed", 0, std::numeric_limits<std::uint64_t>::max() / 2);
  su.nVal = cli.integer<ddl::Index>("val", 1, kMaxCount);
  su.evalEvery = cli.integer<std::int64_t>("eval-every", 1, kMaxCount);
  const ddl::Index width = cli.integer<ddl::Index>("width", 1, 1 << 16), depth = cli.integer<ddl::Index>("depth", 0, 1 << 10),
                   hidden = cli.integer<ddl::Index>("hidden", 0, 1 << 20);
  const std::vector<ddl::Index> widths = parseList("--widths", cli.text("widths"), 1),
                                depths = parseList("--depths", cli.text("depths"), 0);
  const ddl::Index stemStride = cli.integer<ddl::Index>("stem-stride", 1, 2);
  ddl::TrainerOptions& base = su.base;
  base.epochs = cli.integer<int>("epochs", 1, 1000000);
  base.batchSize = cli.integer<ddl::Index>("batch", 1, 1 << 20);
  base.adam.lr = cli.number("lr", 0, 1e6);
  base.adam.weightDecay = cli.number("weight-decay", 0, 1e6);
  base.threads = cli.integer<int>("threads", 0, 4096);
  base.evalBatch = 500;
  ddl::setNumThreads(base.threads);

  ddl::LoadOptions trainLo, testLo;
  trainLo.limit = cli.integer<ddl::Index>("train-limit", 0, kMaxCount);
  testLo.limit = cli.integer<ddl::Index>("test-limit", 0, kMaxCount);
  ddl::Dataset<float> train0 = ddl::loadIdxDir<float>(su.dir, ddl::DataPart::Train, trainLo);
  ddl::Dataset<float> test = ddl::loadIdxDir<float>(su.dir, ddl::DataPart::Test, testLo);
  const ddl::ChannelStats<float> st = ddl::channelStats(train0);
  ddl::normalize(train0, st);
  ddl::normalize(test, st);
  if (su.nVal >= train0.size())
    throw ddl::ValueError("--val " + std::to_string(su.nVal) + " leaves no training samples (the training set has " +
                          std::to_string(train0.size()) + ")");
  su.trainSize = train0.size();
  su.testSize = test.size();
  std::filesystem::create_directories(su.out);

  std::vector<Run> runs;
  for (int s = 0; s < su.seeds; ++s) {
    const std::uint64_t seed = su.seed0 + static_cast<std::uint64_t>(s);
    const ddl::TrainValidation<float> tv = ddl::splitValidation(train0, su.nVal, seed);
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
        if (su.net == "mlp") {
          ddl::DeltaNetConfig cfg;
          ddl::applyPreset(cfg, "code");
          cfg.block.residual.residual = ddl::parseResidualKind(kind);
          cfg.d = width;
          cfg.depth = depth;
          cfg.dv = dv;
          cfg.block.hidden = hidden;
          cfg.inputDim = test.features();
          su.model = "DeltaNet MLP, preset code, d " + std::to_string(width) + ", depth " + std::to_string(depth) +
                     ", hidden " + std::to_string(hidden);
          ddl::DeltaNet<float> net(cfg, seed);
          trainOne(net, tv, test, opt, su.evalEvery, r);
        } else {
          ddl::ConvDeltaNetConfig cfg;
          cfg.block.residual.residual = ddl::parseResidualKind(kind);
          ddl::applyPreset(cfg, "code");
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
                     std::to_string(cfg.width) + " images";
          ddl::ConvDeltaNet<float> net(cfg, seed);
          trainOne(net, tv, test, opt, su.evalEvery, r);
        }
        std::printf("seed %llu dv %lld %-10s val %.2f%% test %.2f%% train loss %.4f %.1fs %lld params\n",
                    static_cast<unsigned long long>(seed), static_cast<long long>(dv), kind, 100 * r.valAcc,
                    100 * r.testAcc, r.trainLoss, r.seconds, static_cast<long long>(r.params));
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
                            "residual ablation: additive vs delta vs write_only on Fashion-MNIST, compared on a "
                            "validation split;\nthe test set is evaluated once per run and only reported");
  cli.option("data", "DIR", "IDX data folder", ddl::debianFashionMnistDir())
      .option("train-limit", "N", "use only the first N training samples (0 = all)", "20000")
      .option("test-limit", "N", "use only the first N test samples (0 = all)", "0")
      .option("val", "N", "hold out N training samples as the validation set (seeded per run)", "2000")
      .section("model")
      .option("net", "NET", "mlp (DeltaNet on the pixel vector) | conv (ConvDeltaNet on the images)", "mlp")
      .option("dvs", "LIST", "value channels to compare, comma-separated", "1,4")
      .option("width", "D", "mlp: state width d", "64")
      .option("depth", "L", "mlp: number of Delta blocks", "2")
      .option("hidden", "H", "mlp: MLP hidden width per block", "256")
      .option("widths", "LIST", "conv: channels per stage, comma-separated", "8,16")
      .option("depths", "LIST", "conv: Delta blocks per stage", "1,1")
      .option("stem-stride", "S", "conv: 1 | 2 (2 runs the stages at half the resolution)", "2")
      .section("training")
      .option("seeds", "N", "seeds per (kind, dv)", "5")
      .option("seed", "S", "first seed", "1")
      .option("epochs", "E", "training epochs", "2")
      .option("batch", "B", "batch size", "128")
      .option("lr", "LR", "AdamW peak learning rate (cosine schedule)", "0.001")
      .option("weight-decay", "WD", "AdamW decoupled weight decay", "0.01")
      .option("threads", "T", "0 = all cores", "2")
      .section("output")
      .option("eval-every", "N", "validation point of the curves every N steps", "20")
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
