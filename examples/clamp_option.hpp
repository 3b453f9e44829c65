#pragma once
// examples/clamp_option.hpp: --clamp-beta BLOCKS:C of ddl-mnist, ddl-cifar and ddl-text (docs/runs.md): with
// --eval-only, the evaluation intervention beta <- min(beta, C) (docs/claims.md) in the blocks BLOCKS all at
// once and in each alone, reported per block (a table, and clamp_beta.csv in the run folder). Checked
// against the model before anything runs, naming the option and its value.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli.hpp"
#include "example_run.hpp"
#include "final_report.hpp"
#include "ddl/core/parse.hpp"
#include "ddl/diag/beta_clamp.hpp"
#include "ddl/io/atomic_file.hpp"
#include "ddl/io/metrics_csv.hpp"
#include "ddl/nn/blocks/delta_residual_options.hpp"

namespace ddl::example {

inline void declareClampOption(cli::CommandLine& cli) {
  cli.option("clamp-beta", "BLOCKS:C",
             "with --eval-only: evaluate with beta <- min(beta, C) (C > 0) in the blocks BLOCKS (indices from 0, "
             "a list and ranges: 0-2, 0,3, 1-2,5), all at once and in each alone, and report the change per "
             "block (a table and clamp_beta.csv in --out)");
}

// A parsed --clamp-beta: the blocks (ascending, distinct) and the clamp c.
struct ClampSpec {
  std::vector<Index> blocks;
  double c = 0;
  std::string text;  // as given, for messages and the CSV
};

inline ClampSpec parseClampSpec(const std::string& text) {
  const auto refuse = [&](const std::string& why) {
    return ValueError("--clamp-beta expects BLOCKS:C (e.g. 0-2:1.0: blocks 0 to 2 at beta <= 1), got '" + text +
                      "': " + why);
  };
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos) throw refuse("no ':' before the clamp C");
  ClampSpec s;
  s.text = text;
  const std::string list = text.substr(0, colon), value = text.substr(colon + 1);
  try {
    s.c = parseNumber("C", value, 0);
  } catch (const ValueError& e) {
    throw refuse(e.what());
  }
  if (!(s.c > 0)) throw refuse("C must be > 0 (beta is positive), got " + value);
  std::set<Index> blocks;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    const std::size_t dash = item.find('-');
    try {
      const Index lo = parseInteger<Index>("block", item.substr(0, dash), 0, Index(1) << 20);
      const Index hi = dash == std::string::npos ? lo : parseInteger<Index>("block", item.substr(dash + 1), 0, Index(1) << 20);
      if (hi < lo) throw refuse("the range " + item + " runs backwards");
      for (Index b = lo; b <= hi; ++b)
        if (!blocks.insert(b).second) throw refuse("block " + std::to_string(b) + " is named twice");
    } catch (const ValueError& e) {
      if (std::string(e.what()).rfind("--clamp-beta", 0) == 0) throw;
      throw refuse(item.empty() ? std::string("an empty block index") : e.what());
    }
    start = comma + 1;
  }
  s.blocks.assign(blocks.begin(), blocks.end());
  return s;
}

// --clamp-beta as given, checked against the model (blocks of it, its residual kind) before anything
// runs: only with --eval-only, only for a gated residual, only blocks that exist, no --audit with it.
inline std::optional<ClampSpec> clampOption(const cli::CommandLine& cli, bool evalOnly, Index blocks, ResidualKind kind) {
  if (!cli.declares("clamp-beta") || !cli.has("clamp-beta")) return std::nullopt;
  const ClampSpec s = parseClampSpec(cli.text("clamp-beta"));
  const std::string named = "--clamp-beta " + s.text;
  if (!evalOnly) throw ValueError(named + " is an evaluation intervention: give it with --eval-only");
  if (cli.declares("audit") && cli.has("audit"))
    throw ValueError(named + " with --audit: audit the unclamped model with --eval-only --audit on its own");
  if (kind == ResidualKind::Additive)
    throw ValueError(named + ": the model's residual is additive (X + h): it has no gate to clamp");
  for (Index b : s.blocks)
    if (b >= blocks)
      throw ValueError(named + ": block " + std::to_string(b) + " does not exist (the model has " +
                       std::to_string(blocks) + " blocks, 0 to " + std::to_string(blocks - 1) + ")");
  return s;
}

// "<dir>/clamp_beta.csv", else the first of clamp_beta.2.csv, .3, ... that does not exist: a file already
// in the folder (an earlier clamp, or a user's) is never replaced.
inline std::string freeClampCsvPath(const std::string& dir) {
  for (int i = 1; i < 10000; ++i) {
    const std::string path = dir + "/clamp_beta" + (i == 1 ? std::string() : "." + std::to_string(i)) + ".csv";
    std::error_code ec;
    if (!std::filesystem::exists(path, ec) && !ec) return path;
  }
  throw IoError(dir + ": clamp_beta.csv to clamp_beta.9999.csv all exist; move them away");
}

namespace detail {
inline std::string blockList(const std::vector<Index>& blocks) {
  std::string out;
  for (Index b : blocks) out += (out.empty() ? "" : " ") + std::to_string(b);
  return out;
}
}  // namespace detail

// The intervention on net (its weights loaded): evaluate() (-> EvalResult) unclamped, with the clamp in
// every named block at once, and in each alone; prints the table and writes the CSV (rank 0, writes
// true) into outDir. what / total / unit name the evaluated set for a stop (Ctrl-C: nothing written).
// Returns the exit status. The net is left unclamped.
template <class Net, class Evaluate>
int evaluateClamps(const std::string& program, Net& net, const ClampSpec& spec, const std::string& outDir, bool writes,
                   const std::string& what, Index total, const std::string& unit, Evaluate&& evaluate) {
  struct Row {
    std::string clamped;
    std::vector<Index> blocks;
    EvalResult r;
  };
  std::vector<Row> rows{{"none", {}, {}}, {"all", spec.blocks, {}}};
  for (Index b : spec.blocks) rows.push_back({"block " + std::to_string(b), {b}, {}});
  const std::string path = writes ? freeClampCsvPath(outDir) : std::string();
  if (writes) prepareOutputFolder(outDir, path, "ddl::example::evaluateClamps");  // unwritable: before evaluating
  for (Row& row : rows) {
    clearBetaClamps(net);
    for (Index b : row.blocks) setBlockBetaClamp(net, b, spec.c);
    row.r = evaluate();
    if (row.r.stopped) {
      clearBetaClamps(net);
      return report::evaluationStopped(program, what + " (clamp: " + row.clamped + ")", row.r, total, unit,
                                       "nothing was written");
    }
  }
  clearBetaClamps(net);
  const EvalResult& base = rows[0].r;
  std::printf("beta <- min(beta, %s) on %s (%lld %s):\n  %-12s %10s %10s %12s %14s\n", csvNumber(spec.c).c_str(),
              what.c_str(), static_cast<long long>(base.count), unit.c_str(), "clamped", "loss", "accuracy",
              "loss change", "accuracy change");
  for (const Row& row : rows)
    std::printf("  %-12s %10.4f %9.2f%% %+12.4f %+13.2f%%\n",
                (row.clamped == "all" ? "all " + detail::blockList(row.blocks) : row.clamped).c_str(), row.r.loss,
                100 * row.r.accuracy, row.r.loss - base.loss, 100 * (row.r.accuracy - base.accuracy));
  if (!writes) return 0;
  writeFileAtomically(path, [&](std::ostream& os) {
    os << "clamped,blocks,c,loss,accuracy,loss_change,accuracy_change,count\n";
    for (const Row& row : rows)
      os << (row.clamped == "none" ? "none" : row.clamped == "all" ? "all" : "block") << ',' << detail::blockList(row.blocks)
         << ',' << (row.blocks.empty() ? std::string() : csvNumber(spec.c)) << ',' << csvNumber(row.r.loss) << ','
         << csvNumber(row.r.accuracy) << ',' << csvNumber(row.r.loss - base.loss) << ','
         << csvNumber(row.r.accuracy - base.accuracy) << ',' << row.r.count << '\n';
  });
  std::cout << "clamp intervention: " << path << "\n";
  return 0;
}

// --eval-only --clamp-beta of ddl-mnist and ddl-cifar: the checkpoint's test set under the clamps.
template <class Net>
int evaluateClampedCheckpoint(const cli::CommandLine& cli, Net& net, const SavedRun& run, const Dataset<float>& test,
                              Index evalBatch, const ClampSpec& spec) {
  loadCheckpoint(run.ckpt, net);
  SoftmaxCrossEntropy<float> loss;
  MatX<float> logits;
  std::printf("%s (epoch %lld):\n", run.ckpt.c_str(), static_cast<long long>(run.meta.epoch));
  return evaluateClamps(cli.program(), net, spec, run.out, ranks().comm().rank() == 0, "the test set", test.size(),
                        "samples", [&] {
                          return evaluate(net, loss, test, evalBatch, logits,
                                          EvalStop{[] { return stopSignal() != 0; }});
                        });
}

}  // namespace ddl::example
