#pragma once
// examples/claim_report.hpp: ddl-claim's learning-rate choice, statistics and outputs (docs/claims.md,
// "Training and selection", "Outcomes", "Statistics", "The clamp intervention"), each file written
// atomically into the run's folder:
//   report.md       the protocol block and its id (or the statement that it is not the protocol), the
//                   chosen rates, solve rates with Wilson and Clopper–Pearson intervals, Fisher's exact test
//                   with Newcombe's interval, the sign test with the median-difference interval, both
//                   Holm-adjusted, the gate audit and the clamp intervention
//   runs.csv        every run;  curves.csv  validation score per epoch;  selection.csv  the rate grid
//   comparisons.csv the tests;  gates.csv  beta per block and run;  beta_hist.csv  histogram counts
//   clamp.csv       the intervention;  beta.png  the histograms per block (gnuplot, when installed)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <ostream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "claim_protocol.hpp"
#include "claim_run.hpp"
#include "curves.hpp"
#include "ddl/diag/confidence_intervals.hpp"
#include "ddl/diag/exact_tests.hpp"
#include "ddl/io/atomic_file.hpp"

namespace ddl::claim {

// One cell of the rate grid on the selection seeds.
struct GridCell {
  std::string task, kind;
  Form form = Form::DepthAsTime;
  double lr = 0;
  int solved = 0, runs = 0;
  double meanEpochsTo = 0, meanBest = 0;
  bool chosen = false;
};

// The grid of one task, form and kind from its selection runs, with the chosen rate marked: most seeds
// solved, then the lower mean epochs to threshold (censored), the higher mean best validation score, the
// lower rate.
inline std::vector<GridCell> gridOf(const std::vector<RunResult>& runs, const std::string& task, Form form,
                                    const std::string& kind, const std::vector<double>& lrs) {
  std::vector<GridCell> cells;
  for (double lr : lrs) {
    GridCell c;
    c.task = task;
    c.kind = kind;
    c.form = form;
    c.lr = lr;
    for (const RunResult& r : runs)
      if (r.phase == "selection" && r.task == task && r.form == form && r.kind == kind && r.lr == lr) {
        ++c.runs;
        c.solved += r.solved;
        c.meanEpochsTo += static_cast<double>(r.epochsTo);
        c.meanBest += r.bestVal;
      }
    if (c.runs > 0) {
      c.meanEpochsTo /= c.runs;
      c.meanBest /= c.runs;
      cells.push_back(c);
    }
  }
  auto better = [](const GridCell& a, const GridCell& b) {
    return std::make_tuple(-a.solved, a.meanEpochsTo, -a.meanBest, a.lr) <
           std::make_tuple(-b.solved, b.meanEpochsTo, -b.meanBest, b.lr);
  };
  if (!cells.empty()) std::min_element(cells.begin(), cells.end(), better)->chosen = true;
  return cells;
}

// Holm's step-down adjustment of p-values (same order as given).
inline std::vector<double> holm(const std::vector<double>& p) {
  std::vector<std::size_t> order(p.size());
  std::iota(order.begin(), order.end(), std::size_t(0));
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p[a] < p[b]; });
  std::vector<double> adj(p.size());
  double running = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    running = std::max(running, std::min(1.0, static_cast<double>(p.size() - i) * p[order[i]]));
    adj[order[i]] = running;
  }
  return adj;
}

// The evaluation runs of a task, form and kind, by seed order.
inline std::vector<const RunResult*> evalRuns(const std::vector<RunResult>& runs, const std::string& task, Form form,
                                              const std::string& kind) {
  std::vector<const RunResult*> out;
  for (const RunResult& r : runs)
    if (r.phase == "evaluation" && r.task == task && r.form == form && r.kind == kind) out.push_back(&r);
  std::sort(out.begin(), out.end(), [](const RunResult* a, const RunResult* b) { return a->seed < b->seed; });
  return out;
}

// delta_bmax2 against another kind on the evaluation seeds both ran.
struct Comparison {
  std::string task, other;
  Form form = Form::DepthAsTime;
  int n = 0, solvedDelta = 0, solvedOther = 0;
  FisherExact fisher;
  Interval diff;  // Newcombe, rate(delta) - rate(other)
  SignTest sign;  // b = other's epochs, a = delta's: "greater" = delta reached the threshold first
  MedianDifference median;  // other - delta epochs (an unsolved run counted at the pair's larger budget + 1)
  double fisherHolm = 1, signHolm = 1;
};

inline std::vector<Comparison> compare(const std::vector<RunResult>& runs, const std::vector<std::string>& tasks,
                                       const std::vector<std::pair<Form, std::string>>& pairs) {
  std::vector<Comparison> out;
  for (const std::string& task : tasks)
    for (const auto& [form, other] : pairs) {
      const auto a = evalRuns(runs, task, form, "delta_bmax2"), b = evalRuns(runs, task, form, other);
      std::vector<double> ea, eb;
      Comparison c;
      c.task = task;
      c.other = other;
      c.form = form;
      // An unsolved run is censored at one value for both kinds, the larger budget + 1, so that it loses
      // to every solved run and two unsolved runs tie (docs/claims.md, "Outcomes"), also against
      // additive_3x, whose own censoring value (121) is not delta's (41).
      for (const RunResult* x : a)
        for (const RunResult* y : b)
          if (x->seed == y->seed) {
            ++c.n;
            c.solvedDelta += x->solved;
            c.solvedOther += y->solved;
            const double censored = static_cast<double>(std::max(x->budget, y->budget) + 1);
            ea.push_back(x->solved ? static_cast<double>(x->epochsTo) : censored);
            eb.push_back(y->solved ? static_cast<double>(y->epochsTo) : censored);
          }
      if (c.n == 0) continue;
      c.fisher = fisherExact(c.solvedDelta, c.n - c.solvedDelta, c.solvedOther, c.n - c.solvedOther);
      c.diff = newcombeDifference(c.solvedDelta, c.n, c.solvedOther, c.n);
      c.sign = signTest(ea, eb);
      c.median = pairedMedianDifference(ea, eb);
      out.push_back(c);
    }
  return out;
}

// Holm within each family: the depth-as-time comparisons (primary: Fisher; secondary: sign test) and the
// control form's, apart.
inline void adjust(std::vector<Comparison>& cs) {
  for (Form form : {Form::DepthAsTime, Form::Control}) {
    std::vector<double> pf, ps;
    std::vector<Comparison*> members;
    for (Comparison& c : cs)
      if (c.form == form) {
        members.push_back(&c);
        pf.push_back(c.fisher.p);
        ps.push_back(c.sign.p);
      }
    const auto hf = holm(pf), hs = holm(ps);
    for (std::size_t i = 0; i < members.size(); ++i) {
      members[i]->fisherHolm = hf[i];
      members[i]->signHolm = hs[i];
    }
  }
}

inline std::string fmt(double x, int digits = 3) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}
inline std::string pText(double p) {
  char buf[64];
  std::snprintf(buf, sizeof buf, p < 1e-3 ? "%.2e" : "%.4f", p);
  return buf;
}

// The CSV files (every figure of the report).
inline void writeCsvs(const std::string& out, const std::vector<RunResult>& runs, const std::vector<GridCell>& grid,
                      const std::vector<Comparison>& cs) {
  writeFileAtomically(out + "/runs.csv", [&](std::ostream& os) {
    os << "phase,task,form,kind,seed,lr,hidden,params,epochs,solved,epochs_to,best_val,final_val,test,diverged,seconds\n";
    for (const RunResult& r : runs)
      os << r.phase << ',' << r.task << ',' << toString(r.form) << ',' << r.kind << ',' << r.seed << ',' << r.lr << ','
         << r.hidden << ',' << r.params << ',' << r.budget << ',' << r.solved << ',' << r.epochsTo << ',' << r.bestVal
         << ',' << r.finalVal << ',' << r.test << ',' << r.diverged << ',' << fmt(r.seconds, 2) << '\n';
  });
  writeFileAtomically(out + "/curves.csv", [&](std::ostream& os) {
    os << "phase,task,form,kind,seed,lr,epoch,val_score\n";
    for (const RunResult& r : runs)
      for (std::size_t e = 0; e < r.curve.size(); ++e)
        os << r.phase << ',' << r.task << ',' << toString(r.form) << ',' << r.kind << ',' << r.seed << ',' << r.lr << ','
           << e + 1 << ',' << r.curve[e] << '\n';
  });
  writeFileAtomically(out + "/selection.csv", [&](std::ostream& os) {
    os << "task,form,kind,lr,runs,solved,mean_epochs_to,mean_best_val,chosen\n";
    for (const GridCell& c : grid)
      os << c.task << ',' << toString(c.form) << ',' << c.kind << ',' << c.lr << ',' << c.runs << ',' << c.solved << ','
         << c.meanEpochsTo << ',' << c.meanBest << ',' << c.chosen << '\n';
  });
  writeFileAtomically(out + "/comparisons.csv", [&](std::ostream& os) {
    os << "task,form,delta,other,pairs,solved_delta,solved_other,fisher_p,fisher_p_holm,diff,diff_lower,diff_upper,"
          "sign_delta_first,sign_other_first,sign_ties,sign_p,sign_p_holm,median_epoch_diff,median_lower,median_upper,"
          "median_coverage\n";
    for (const Comparison& c : cs)
      os << c.task << ',' << toString(c.form) << ",delta_bmax2," << c.other << ',' << c.n << ',' << c.solvedDelta << ','
         << c.solvedOther << ',' << c.fisher.p << ',' << c.fisherHolm << ',' << c.fisher.rate1 - c.fisher.rate2 << ','
         << c.diff.lower << ',' << c.diff.upper << ',' << c.sign.greater << ',' << c.sign.less << ',' << c.sign.ties << ','
         << c.sign.p << ',' << c.signHolm << ',' << c.median.median << ',' << c.median.lower << ',' << c.median.upper
         << ',' << c.median.coverage << '\n';
  });
  writeFileAtomically(out + "/gates.csv", [&](std::ostream& os) {
    os << "phase,task,form,kind,seed,block,beta_mean,beta_min,beta_max,share_beta_above_1\n";
    for (const RunResult& r : runs)
      for (std::size_t t = 0; t < r.gates.size(); ++t)
        os << r.phase << ',' << r.task << ',' << toString(r.form) << ',' << r.kind << ',' << r.seed << ',' << t << ','
           << r.gates[t].mean << ',' << r.gates[t].min << ',' << r.gates[t].max << ',' << r.gates[t].shareAbove1 << '\n';
  });
  writeFileAtomically(out + "/beta_hist.csv", [&](std::ostream& os) {
    os << "phase,task,form,kind,seed,block,bin_lower,bin_upper,count\n";
    for (const RunResult& r : runs)
      for (std::size_t t = 0; t < r.gates.size(); ++t)
        for (int i = 0; i < kBetaBins; ++i)
          os << r.phase << ',' << r.task << ',' << toString(r.form) << ',' << r.kind << ',' << r.seed << ',' << t << ','
             << 2.0 * i / kBetaBins << ',' << 2.0 * (i + 1) / kBetaBins << ','
             << r.gates[t].histogram[static_cast<std::size_t>(i)] << '\n';
  });
  writeFileAtomically(out + "/clamp.csv", [&](std::ostream& os) {
    os << "task,seed,clamped_blocks,val_score,val_score_unclamped,share_beta_above_1\n";
    for (const RunResult& r : runs) {
      if (!r.clamped) continue;
      os << r.task << ',' << r.seed << ",all," << r.clampAll << ',' << r.finalVal << ",\n";
      for (std::size_t t = 0; t < r.clampEach.size(); ++t)
        os << r.task << ',' << r.seed << ',' << t << ',' << r.clampEach[t] << ',' << r.finalVal << ','
           << r.gates[t].shareAbove1 << '\n';
    }
  });
}

// beta.png: the depth-as-time evaluation runs' histograms summed per task, kind and block (beta.dat,
// beta.gp); a missing gnuplot leaves the counts in beta_hist.csv only.
inline void plotBeta(const std::string& out, const std::vector<RunResult>& runs) {
  std::map<std::tuple<std::string, std::string, std::size_t>, std::array<std::int64_t, kBetaBins>> sums;
  for (const RunResult& r : runs)
    if (r.phase == "evaluation" && r.form == Form::DepthAsTime)
      for (std::size_t t = 0; t < r.gates.size(); ++t) {
        auto& s = sums[{r.task, r.kind, t}];
        for (int i = 0; i < kBetaBins; ++i) s[static_cast<std::size_t>(i)] += r.gates[t].histogram[static_cast<std::size_t>(i)];
      }
  if (sums.empty()) return;
  std::vector<std::string> series;
  writeFileAtomically(out + "/beta.dat", [&](std::ostream& os) {
    for (const auto& [key, counts] : sums) {  // one gnuplot data block per task, kind and block
      os << "# " << std::get<0>(key) << ' ' << std::get<1>(key) << " block " << std::get<2>(key) << '\n';
      std::int64_t total = 0;
      for (auto c : counts) total += c;
      for (int i = 0; i < kBetaBins; ++i)
        os << 2.0 * (i + 0.5) / kBetaBins << ' '
           << static_cast<double>(counts[static_cast<std::size_t>(i)]) / static_cast<double>(std::max<std::int64_t>(total, 1))
           << '\n';
      os << "\n\n";
      series.push_back(std::get<0>(key) + " " + std::get<1>(key) + " block " + std::to_string(std::get<2>(key)));
    }
  });
  const std::string script = out + "/beta.gp", png = out + "/beta.png";
  writeFileAtomically(script, [&](std::ostream& gp) {
    gp << "# gnuplot -c beta.gp beta.dat beta.png\nset terminal png size 1400," << 260 * ((series.size() + 3) / 4)
       << " noenhanced\nset output ARG2\nset multiplot layout " << (series.size() + 3) / 4
       << ",4\nset xrange [0:2]\nset yrange [0:*]\nset style fill solid 0.6\nset boxwidth 0.09\n";
    for (std::size_t i = 0; i < series.size(); ++i)
      gp << "set title '" << series[i] << "'\nplot ARG1 index " << i << " using 1:2 with boxes notitle\n";
    gp << "unset multiplot\n";
  });
  plot::gnuplot(script, {out + "/beta.dat", png}, png, "beta histograms");
}

}  // namespace ddl::claim
