#pragma once
// examples/claim_markdown.hpp: report.md of ddl-claim: the protocol block with its id, what ran, and the
// tables of docs/claims.md's "Outcomes", "Statistics" and "The clamp intervention".
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "claim_protocol.hpp"
#include "claim_report.hpp"
#include "claim_run.hpp"
#include "ddl/io/atomic_file.hpp"

namespace ddl::claim {

struct ReportContext {
  Parameters params;
  std::vector<std::string> tasks;  // the tasks this run covered
  std::vector<std::string> kinds;  // depth-as-time kinds
  bool control = false;            // the control form ran (params.controlKinds)
  bool smoke = false;
  bool complete = false;           // every planned run finished
  std::string command;
};

inline void writeReport(const std::string& out, const ReportContext& ctx, const std::vector<RunResult>& runs,
                        const std::vector<GridCell>& grid, const std::vector<Comparison>& cs) {
  const auto block = protocolBlock(ctx.params);
  const std::string id = blockId(block);
  const bool isProtocol = id == kProtocolId && !ctx.smoke;
  writeFileAtomically(out + "/report.md", [&](std::ostream& os) {
    os << "# ddl-claim report\n\n";
    if (isProtocol)
      os << "This report comes from the pre-registered protocol of docs/claims.md: its block below hashes to the "
            "protocol's id.\n\n";
    else
      os << "**Not the pre-registered protocol**" << (ctx.smoke ? " (a --smoke run: one seed, a few steps)" : "")
         << ": the parameters below differ from docs/claims.md's, so the block hashes to another id.\n\n";
    os << (ctx.complete ? "Status: complete.\n\n" : "Status: **incomplete** (the runs so far).\n\n");
    os << "Command: `" << ctx.command << "`\n\nTasks run: " << joinList(ctx.tasks) << "; depth-as-time kinds: "
       << joinList(ctx.kinds) << "; control form: " << (ctx.control ? joinList(ctx.params.controlKinds) : std::string("not run")) << ".\n\n";
    os << (isProtocol ? "Protocol id: `" : "Block id: `") << id << "`\n\n<!-- protocol:begin -->\n```text\n"
       << blockText(block) << "```\n<!-- protocol:end -->\n\n";

    os << "## Learning rates (selection seeds " << joinList(ctx.params.selectionSeeds) << ")\n\n"
       << "| task | form | kind | lr | solved | mean epochs to " << ctx.params.threshold
       << " | mean best val | chosen |\n|---|---|---|---|---|---|---|---|\n";
    for (const GridCell& c : grid)
      os << "| " << c.task << " | " << toString(c.form) << " | " << c.kind << " | " << c.lr << " | " << c.solved << "/"
         << c.runs << " | " << fmt(c.meanEpochsTo, 1) << " | " << fmt(c.meanBest) << " | " << (c.chosen ? "yes" : "")
         << " |\n";

    os << "\n## Outcomes (evaluation seeds " << joinList(ctx.params.seeds) << ")\n\n"
       << "Solved: validation score >= " << ctx.params.threshold << " after some epoch (accuracy; householder R²). "
       << "Epochs to the threshold are censored at budget + 1.\n\n"
       << "| task | form | kind | lr | hidden | params | solved | Wilson 95% | Clopper–Pearson 95% | median epochs to | "
          "mean final val | mean test |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const std::string& task : ctx.tasks)
      for (Form form : {Form::DepthAsTime, Form::Control})
        for (const Kind& k : allKinds()) {
          const auto rs = evalRuns(runs, task, form, k.name);
          if (rs.empty()) continue;
          int solved = 0;
          double fv = 0, te = 0;
          std::vector<double> e;
          for (const RunResult* r : rs) {
            solved += r->solved;
            fv += r->finalVal;
            te += r->test;
            e.push_back(static_cast<double>(r->epochsTo));
          }
          std::sort(e.begin(), e.end());
          const double med = e.size() % 2 ? e[e.size() / 2] : (e[e.size() / 2 - 1] + e[e.size() / 2]) / 2;
          const auto n = static_cast<std::int64_t>(rs.size());
          const Interval w = wilsonInterval(solved, n), cp = clopperPearsonInterval(solved, n);
          os << "| " << task << " | " << toString(form) << " | " << k.name << " | " << rs.front()->lr << " | "
             << rs.front()->hidden << " | " << rs.front()->params << " | " << solved << "/" << n << " | ["
             << fmt(w.lower) << ", " << fmt(w.upper) << "] | [" << fmt(cp.lower) << ", " << fmt(cp.upper) << "] | "
             << fmt(med, 1) << " | " << fmt(fv / static_cast<double>(n)) << " | " << fmt(te / static_cast<double>(n))
             << " |\n";
        }

    os << "\n## delta_bmax2 against each kind\n\n"
       << "Fisher's exact test on solved / unsolved (two-sided; primary for depth_as_time), the difference of solve "
          "rates with Newcombe's hybrid score 95% interval; the paired sign test on epochs to the threshold (ties "
          "dropped; secondary) with the median of (other − delta) epochs and its sign-test interval (censored runs "
          "count as budget + 1). Holm-adjusted within each form over the "
       << "comparisons of this report (the protocol's family of 25 when all five tasks ran).\n\n"
       << "| task | form | other | solved delta / other | Fisher p | Holm | rate diff [95%] | delta first / other "
          "first / ties | sign p | Holm | median epoch diff [interval, coverage] |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const Comparison& c : cs)
      os << "| " << c.task << " | " << toString(c.form) << " | " << c.other << " | " << c.solvedDelta << " / "
         << c.solvedOther << " of " << c.n << " | " << pText(c.fisher.p) << " | " << pText(c.fisherHolm) << " | "
         << fmt(c.fisher.rate1 - c.fisher.rate2, 2) << " [" << fmt(c.diff.lower, 2) << ", " << fmt(c.diff.upper, 2)
         << "] | " << c.sign.greater << " / " << c.sign.less << " / " << c.sign.ties << " | " << pText(c.sign.p)
         << " | " << pText(c.signHolm) << " | " << fmt(c.median.median, 1) << " ["
         << (c.median.attained ? fmt(c.median.lower, 1) + ", " + fmt(c.median.upper, 1) : std::string("-inf, inf"))
         << ", " << fmt(c.median.coverage, 4) << "] |\n";

    os << "\n## Gate audit (evaluation runs, validation split, after training)\n\n"
       << "| task | form | kind | block | beta mean | beta min | beta max | share beta > 1 |\n"
          "|---|---|---|---|---|---|---|---|\n";
    for (const std::string& task : ctx.tasks)
      for (Form form : {Form::DepthAsTime, Form::Control})
        for (const Kind& k : allKinds()) {
          const auto rs = evalRuns(runs, task, form, k.name);
          if (rs.empty() || rs.front()->gates.empty()) continue;
          for (std::size_t t = 0; t < rs.front()->gates.size(); ++t) {
            double mean = 0, mn = 2, mx = 0, share = 0;
            for (const RunResult* r : rs) {
              mean += r->gates[t].mean;
              mn = std::min(mn, r->gates[t].min);
              mx = std::max(mx, r->gates[t].max);
              share += r->gates[t].shareAbove1;
            }
            const double n = static_cast<double>(rs.size());
            os << "| " << task << " | " << toString(form) << " | " << k.name << " | " << t << " | " << fmt(mean / n)
               << " | " << fmt(mn) << " | " << fmt(mx) << " | " << fmt(share / n) << " |\n";
          }
        }

    os << "\n## The clamp intervention (solved delta_bmax2 evaluation runs, beta <- min(beta, 1))\n\n"
       << "| task | seed | unclamped | all blocks | each block alone (share beta > 1) |\n|---|---|---|---|---|\n";
    for (const RunResult& r : runs) {
      if (!r.clamped || r.phase != "evaluation") continue;
      os << "| " << r.task << " | " << r.seed << " | " << fmt(r.finalVal) << " | " << fmt(r.clampAll) << " | ";
      for (std::size_t t = 0; t < r.clampEach.size(); ++t)
        os << (t ? "; " : "") << t << ": " << fmt(r.clampEach[t]) << " (" << fmt(r.gates[t].shareAbove1, 2) << ")";
      os << " |\n";
    }
    os << "\nFiles: runs.csv, curves.csv, selection.csv, comparisons.csv, gates.csv, beta_hist.csv (the β "
          "histogram counts, 20 bins over [0, 2]), clamp.csv, beta.png (when gnuplot is installed).\n";
  });
}

}  // namespace ddl::claim
