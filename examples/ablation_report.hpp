#pragma once
// examples/ablation_report.hpp: what ddl-ablation writes once its runs are done: the runs' records,
// mean curves at equal steps and equal training time, paired t tests between residual kinds
// (ddl/diag/t_test.hpp), the gnuplot figures and ablation.md. The metric is the validation accuracy
// (higher is better) for the image nets and the validation loss in nats and bits per byte (lower is
// better) for the language model (--net lm).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "curves.hpp"
#include "ddl/diag/net_gate_audit.hpp"
#include "ddl/diag/t_test.hpp"
#include "ddl/io/atomic_file.hpp"
#include "ddl/train/next_token_task.hpp"
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

// A field of a mean curve (valAcc, valLoss) at training time t (linear between points; the last
// point beyond its end).
inline double valueAtTime(const std::vector<CurvePoint>& c, double t, double CurvePoint::*field) {
  for (std::size_t i = 1; i < c.size(); ++i)
    if (c[i].seconds >= t) {
      const double span = c[i].seconds - c[i - 1].seconds;
      const double w = span > 0 ? (t - c[i - 1].seconds) / span : 1;
      return c[i - 1].*field + w * (c[i].*field - c[i - 1].*field);
    }
  return c.back().*field;
}

// "| mean diff | t | df | p | better / worse / tie" of paired differences b - a over seeds; b is
// better when larger, or when smaller with lowerIsBetter (a loss).
inline std::string pairedCells(const std::vector<double>& a, const std::vector<double>& b, bool lowerIsBetter = false) {
  ddl::PairedTTest r = ddl::pairedTTest(a, b);
  if (lowerIsBetter) std::swap(r.better, r.worse);
  std::string s = fmt(lowerIsBetter ? "%+.4f" : "%+.3f", r.meanDiff);
  if (r.defined)
    s += " | " + fmt("%.3f", r.t) + " | " + std::to_string(r.df) + " | " + fmt("%.4f", r.p);
  else
    s += " | n/a | " + std::to_string(r.df) + " | n/a";
  return s + " | " + std::to_string(r.better) + " / " + std::to_string(r.worse) + " / " + std::to_string(r.ties);
}

inline std::vector<double> column(const std::vector<const Run*>& group, double Run::*field, double scale = 100) {
  std::vector<double> v;
  for (const Run* r : group) v.push_back(scale * (r->*field));
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
  std::string precision = "float";  // what ran: float, bf16 or bf16-emulated (--precision)
  std::vector<ddl::Index> dvs;
  int seeds = 1;
  std::uint64_t seed0 = 0;
  ddl::Index trainSize = 0, nVal = 0, testSize = 0;
  std::int64_t evalEvery = 1;
  ddl::TrainerOptions base;
  std::string model;  // one line describing the net
  std::string budget, data;  // --net lm: the report's budget and data sentences (else the image ones)
  double wallSeconds = 0;
  bool lm() const { return net == "lm"; }
};

// The line printed after each run.
inline std::string runLine(const Run& r, bool lm) {
  char line[256];
  if (lm)
    std::snprintf(line, sizeof line, "seed %llu dv %lld %-10s val loss %.4f (%.3f bpb) test %.4f (%.3f bpb) train loss %.4f %.1fs %lld params",
                  static_cast<unsigned long long>(r.seed), static_cast<long long>(r.dv), r.kind.c_str(), r.valLoss,
                  ddl::bitsPerByte(r.valLoss), r.testLoss, ddl::bitsPerByte(r.testLoss), r.trainLoss, r.seconds,
                  static_cast<long long>(r.params));
  else
    std::snprintf(line, sizeof line, "seed %llu dv %lld %-10s val %.2f%% test %.2f%% train loss %.4f %.1fs %lld params",
                  static_cast<unsigned long long>(r.seed), static_cast<long long>(r.dv), r.kind.c_str(), 100 * r.valAcc,
                  100 * r.testAcc, r.trainLoss, r.seconds, static_cast<long long>(r.params));
  return line;
}

// The language model's table: loss in nats and bits per byte (lower is better).
inline void writeLmTable(std::ostream& os, const Setup& su, const std::vector<Run>& runs) {
  const double bpb = ddl::bitsPerByte(1.0);
  os << "| kind | dv | val loss, nats (mean ± std) | val bits per byte | test loss (once, mean ± std) | test bits per byte "
        "| final train loss | train s / run | params |\n|---|---|---|---|---|---|---|---|---|\n";
  for (ddl::Index dv : su.dvs)
    for (const char* kind : kKinds) {
      const std::vector<const Run*> g = runsOf(runs, kind, dv);
      const std::vector<double> vl = column(g, &Run::valLoss, 1), tl = column(g, &Run::testLoss, 1),
                                lo = column(g, &Run::trainLoss, 1), se = column(g, &Run::seconds, 1);
      os << "| " << kind << " | " << dv << " | " << fmt("%.4f ± %.4f", mean(vl), stddev(vl)) << " | "
         << fmt("%.4f ± %.4f", bpb * mean(vl), bpb * stddev(vl)) << " | " << fmt("%.4f ± %.4f", mean(tl), stddev(tl))
         << " | " << fmt("%.4f", bpb * mean(tl)) << " | " << fmt("%.4f ± %.4f", mean(lo), stddev(lo)) << " | "
         << fmt("%.1f", mean(se)) << " | " << g.front()->params << " |\n";
    }
}

inline void writeReport(const Setup& su, const std::vector<Run>& runs, bool haveBeta) {
  ddl::writeFileAtomically(su.out + "/ablation.md", [&](std::ostream& os) {
    os << "# Residual ablation: " << (su.net == "conv" ? "ConvDeltaNet" : su.lm() ? "DeltaLM" : "DeltaNet MLP") << "\n\n"
       << "Command: `" << su.commandLine << "`\n\n"
       << "Wall time of the whole ablation: " << fmt("%.0f", su.wallSeconds) << " s for " << runs.size()
       << " runs on " << ddl::numThreads()
       << " threads, products in " << su.precision
       << " (wall times include waiting for other jobs when the machine is shared).\n\n";
    if (su.lm()) {
      os << "Model: " << su.model << ". Budget: " << su.budget << "\n\nData: " << su.data << "\n\n"
         << "Protocol: the kinds are compared on the validation loss; the test split is evaluated once per run, "
            "after its last epoch, and only reported.\n\n";
      writeLmTable(os, su, runs);
    } else {
      os << "Model: " << su.model << ". Budget: " << su.base.epochs << " epochs, batch " << su.base.batchSize
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
    }

    // The metric compared: validation accuracy in percentage points, or the LM's loss in nats.
    double Run::*metric = su.lm() ? &Run::valLoss : &Run::valAcc;
    double Run::*testMetric = su.lm() ? &Run::testLoss : &Run::testAcc;
    const double scale = su.lm() ? 1 : 100;
    os << (su.lm() ? "\n## Paired comparisons on validation loss (nats, equal steps)\n\n"
                   : "\n## Paired comparisons on validation accuracy (percentage points, equal steps)\n\n")
       << "b − a per seed; Student t test of the paired differences" << (su.lm() ? " (negative: b is better)" : "")
       << ". The last column is the same difference on the test set (reported, not used for any choice).\n\n"
       << "| dv | b − a | mean diff | t | df | two-sided p | b better / worse / tie | "
       << (su.lm() ? "mean diff, bits per byte | test mean diff, bits per byte |\n|---|---|---|---|---|---|---|---|---|\n"
                   : "test mean diff |\n|---|---|---|---|---|---|---|---|\n");
    const std::pair<const char*, const char*> pairs[] = {
        {"additive", "delta"}, {"additive", "write_only"}, {"write_only", "delta"}};
    for (ddl::Index dv : su.dvs)
      for (const auto& [a, b] : pairs) {
        const std::vector<const Run*> ga = runsOf(runs, a, dv), gb = runsOf(runs, b, dv);
        const std::vector<double> va = column(ga, metric, scale), vb = column(gb, metric, scale),
                                  ta = column(ga, testMetric, scale), tb = column(gb, testMetric, scale);
        std::vector<double> vd, td;
        for (std::size_t i = 0; i < ta.size(); ++i) vd.push_back(vb[i] - va[i]), td.push_back(tb[i] - ta[i]);
        os << "| " << dv << " | " << b << " − " << a << " | " << pairedCells(va, vb, su.lm()) << " | ";
        if (su.lm())
          os << fmt("%+.4f", ddl::bitsPerByte(mean(vd))) << " | " << fmt("%+.4f", ddl::bitsPerByte(mean(td))) << " |\n";
        else
          os << fmt("%+.3f", mean(td)) << " |\n";
      }

    os << "\n## Equal steps and equal time\n\n![validation curves](curves.png)\n\n"
       << "Validation loss and " << (su.lm() ? "next-byte accuracy after every epoch" : "accuracy every " + std::to_string(su.evalEvery) + " steps")
       << ", mean over seeds (`curves.csv` holds every "
       << "seed, `curves.dat` the means); the y axes show the last three quarters of training. The time axis is "
          "training wall time only (evaluations excluded); it moves with the machine's load. At equal time, the "
          "validation " << (su.lm() ? "loss (nats)" : "accuracy") << " of each kind at the time the fastest kind "
          "(mean over seeds) finished its budget:\n\n"
       << "| dv | time budget s | additive | delta | write_only |\n|---|---|---|---|---|\n";
    for (ddl::Index dv : su.dvs) {
      std::vector<std::vector<CurvePoint>> curves;
      double budget = std::numeric_limits<double>::infinity();
      for (const char* kind : kKinds) {
        curves.push_back(meanCurve(runsOf(runs, kind, dv)));
        budget = std::min(budget, curves.back().back().seconds);
      }
      os << "| " << dv << " | " << fmt("%.1f", budget);
      for (const auto& c : curves)
        os << " | " << (su.lm() ? fmt("%.4f", valueAtTime(c, budget, &CurvePoint::valLoss))
                                : fmt("%.2f", 100 * valueAtTime(c, budget, &CurvePoint::valAcc)));
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
