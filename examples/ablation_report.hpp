#pragma once
// examples/ablation_report.hpp: what ddl-ablation writes once its runs are done: the runs' records,
// mean curves at equal steps and equal training time, paired t tests between residual kinds
// (ddl/diag/t_test.hpp), the gnuplot figures and ablation.md.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "curves.hpp"
#include "ddl/diag/gate_audit.hpp"
#include "ddl/diag/t_test.hpp"
#include "ddl/io/atomic_file.hpp"
#include "ddl/train/trainer.hpp"

namespace ddl::ablation {

inline constexpr const char* kKinds[] = {"additive", "delta", "write_only"};
inline constexpr const char* kGatedKinds[] = {"delta", "write_only"};

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

inline double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}
inline double stddev(const std::vector<double>& v) {  // sample standard deviation (n - 1)
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

inline std::string fmt(const char* f, double a, double b = 0) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a, b);
  return buf;
}

// The runs of one (kind, dv), in seed order.
inline std::vector<const Run*> runsOf(const std::vector<Run>& runs, const std::string& kind, ddl::Index dv) {
  std::vector<const Run*> out;
  for (const Run& r : runs)
    if (r.kind == kind && r.dv == dv) out.push_back(&r);
  return out;
}

// The curve of a (kind, dv) averaged over seeds point by point (all seeds share the step grid).
inline std::vector<CurvePoint> meanCurve(const std::vector<const Run*>& group) {
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
inline double accuracyAtTime(const std::vector<CurvePoint>& c, double t) {
  for (std::size_t i = 1; i < c.size(); ++i)
    if (c[i].seconds >= t) {
      const double span = c[i].seconds - c[i - 1].seconds;
      const double w = span > 0 ? (t - c[i - 1].seconds) / span : 1;
      return c[i - 1].valAcc + w * (c[i].valAcc - c[i - 1].valAcc);
    }
  return c.back().valAcc;
}

// "| mean diff | t | df | p | better / worse / tie" of paired differences b - a over seeds.
inline std::string pairedCells(const std::vector<double>& a, const std::vector<double>& b) {
  const ddl::PairedTTest r = ddl::pairedTTest(a, b);
  std::string s = fmt("%+.3f", r.meanDiff);
  if (r.defined)
    s += " | " + fmt("%.3f", r.t) + " | " + std::to_string(r.df) + " | " + fmt("%.4f", r.p);
  else
    s += " | n/a | " + std::to_string(r.df) + " | n/a";
  return s + " | " + std::to_string(r.better) + " / " + std::to_string(r.worse) + " / " + std::to_string(r.ties);
}

inline std::vector<double> column(const std::vector<const Run*>& group, double Run::*field) {
  std::vector<double> v;
  for (const Run* r : group) v.push_back(100 * (r->*field));
  return v;
}

// curves.dat (one gnuplot data block per (dv, kind): step, seconds, val loss, val acc %), curves.gp
// and curves.png: validation accuracy and loss against the step and against the training time. The
// y axes show the last three quarters of training (the first steps would squash the differences).
inline void plotCurves(const std::string& out, const std::vector<Run>& runs, const std::vector<ddl::Index>& dvs) {
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
inline bool plotBeta(const std::string& out, const std::vector<Run>& runs, const std::vector<ddl::Index>& dvs) {
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

inline void writeReport(const Setup& su, const std::vector<Run>& runs, bool haveBeta) {
  ddl::writeFileAtomically(su.out + "/ablation.md", [&](std::ostream& os) {
    os << "# Residual ablation: " << (su.net == "conv" ? "ConvDeltaNet" : "DeltaNet MLP") << "\n\n"
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
         << "Regimes of the effective gate b = βρ, the operator's taxonomy (`classifyRegime`, the bands of docs/spec.md §6).\n\n"
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

}  // namespace ddl::ablation
