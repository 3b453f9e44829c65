// ddl-claim: the pre-registered experiment of docs/claims.md. For each task it chooses every kind's
// learning rate on the selection seeds, trains the kinds on the evaluation seeds at their chosen rates
// (the same data, initialisation and batch order per seed), and writes report.md and the CSV files
// (examples/claim_report.hpp) into --out, a folder that must not hold anything yet. The report carries
// the protocol's id only when the parameters are the protocol's (docs/claims.md, "Protocol id"); --smoke
// runs one seed for a few steps on small sets, labelled as not the protocol.
//   ddl-claim --task swap --out /work/claim-runs/swap
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "claim_markdown.hpp"
#include "claim_protocol.hpp"
#include "claim_report.hpp"
#include "claim_run.hpp"
#include "cli.hpp"
#include "ddl/core/parse.hpp"
#include "ddl/core/threading.hpp"

namespace {

using namespace ddl::claim;

std::vector<std::string> splitList(const std::string& option, const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  if (out.empty()) throw ddl::ValueError("--" + option + " expects a comma-separated list");
  return out;
}

template <class T>
std::vector<T> numberList(const std::string& option, const std::string& text, T lo, T hi) {
  std::vector<T> out;
  for (const std::string& item : splitList(option, text)) {
    if constexpr (std::is_floating_point_v<T>)
      out.push_back(ddl::parseNumber("--" + option, item, lo, hi));
    else
      out.push_back(ddl::parseInteger<T>("--" + option, item, lo, hi));
  }
  return out;
}

int run(const ddl::cli::CommandLine& cli, const std::string& command) {
  Parameters p;
  p.tasks = protocolTasks();
  const bool smoke = cli.has("smoke");
  if (smoke) {  // one seed, a few steps, small sets and net: a check that everything runs, not the protocol
    for (TaskSpec& t : p.tasks) t.split = {256, 128, 128};
    p.epochs = 2;
    p.epochs3x = 6;
    p.batch = 64;
    p.lrs = {0.003};
    p.selectionSeeds = {1001};
    p.seeds = {1};
    p.d = 16;
    p.hidden = 32;
  }
  if (cli.has("epochs")) {
    p.epochs = cli.integer<ddl::Index>("epochs", 1, 100000);
    p.epochs3x = 3 * p.epochs;
  }
  if (cli.has("lrs")) p.lrs = numberList<double>("lrs", cli.text("lrs"), 1e-8, 10.0);
  if (cli.has("seeds")) p.seeds = numberList<std::uint64_t>("seeds", cli.text("seeds"), 0, ~std::uint64_t(0) >> 1);
  if (cli.has("selection-seeds"))
    p.selectionSeeds = numberList<std::uint64_t>("selection-seeds", cli.text("selection-seeds"), 0, ~std::uint64_t(0) >> 1);
  if (cli.has("d")) p.d = cli.integer<ddl::Index>("d", 1, 4096);
  if (cli.has("hidden")) p.hidden = cli.integer<ddl::Index>("hidden", 1, 65536);
  if (cli.has("readout")) p.readout = ddl::parseEnumName(ddl::kStepReadoutNames, cli.text("readout"), "--readout", "readout");
  if (cli.has("tied")) p.tied = true;
  if (cli.has("stop-when-solved")) p.stopWhenSolved = cli.text("stop-when-solved") == "yes";
  if (cli.has("stop-when-solved") && !p.stopWhenSolved && cli.text("stop-when-solved") != "no")
    throw ddl::ValueError("--stop-when-solved expects yes or no, got '" + cli.text("stop-when-solved") + "'");
  std::vector<std::string> taskNames = splitList("task", cli.text("task"));
  std::vector<TaskSpec> chosen;
  for (const std::string& name : taskNames) {
    bool found = false;
    for (TaskSpec& t : p.tasks)
      if (t.name == name) {
        if (cli.has("steps")) t.steps = cli.integer<ddl::Index>("steps", 1, 4096);
        if (cli.has("sizes")) {
          const auto s = numberList<ddl::Index>("sizes", cli.text("sizes"), 0, ddl::Index(1) << 24);
          if (s.size() != 3) throw ddl::ValueError("--sizes expects train,validation,test");
          t.split = {s[0], s[1], s[2]};
        }
        chosen.push_back(t);
        found = true;
      }
    if (!found)
      throw ddl::ValueError("--task: unknown task '" + name + "' (swap, parity, householder, permutation_s3, permutation_s5)");
  }
  if (cli.has("control-kinds")) {
    p.controlKinds = splitList("control-kinds", cli.text("control-kinds"));
    for (const std::string& k : p.controlKinds) kindNamed(k);  // refuses an unknown kind
    if (std::find(p.controlKinds.begin(), p.controlKinds.end(), "delta_bmax2") == p.controlKinds.end())
      throw ddl::ValueError("--control-kinds must include delta_bmax2: every comparison is against it");
  }
  std::vector<std::string> kinds = splitList("kinds", cli.text("kinds"));
  for (const std::string& k : kinds) kindNamed(k);  // refuses an unknown kind
  const std::string form = cli.text("form");
  if (form != "depth_as_time" && form != "control" && form != "both")
    throw ddl::ValueError("--form expects depth_as_time, control or both, got '" + form + "'");
  const bool depth = form != "control", control = form != "depth_as_time";
  if (cli.has("print-block")) {  // the block these parameters give and its id; nothing runs
    const auto block = protocolBlock(p);
    std::cout << blockText(block) << "id: " << blockId(block)
              << (blockId(block) == kProtocolId && !smoke ? " (the pre-registered protocol)" : " (not the protocol)")
              << std::endl;
    return 0;
  }
  const int jobs = cli.integer<int>("jobs", 1, 256);
  const int threads = cli.integer<int>("threads", 0, 4096);
  ddl::setNumThreads(threads);
  // Every task must be able to make its splits before anything is written (the generators' refusals).
  for (const TaskSpec& t : chosen) makeTask(t, p.selectionSeeds.front());
  const std::string out = cli.text("out");
  if (std::filesystem::exists(out) && !(std::filesystem::is_directory(out) && std::filesystem::is_empty(out)))
    throw ddl::IoError("--out " + out + " already exists and is not an empty folder: ddl-claim never writes into a "
                       "folder that holds anything; name a new one");
  std::filesystem::create_directories(out);

  // (form, kind) pairs in the order they run
  std::vector<std::pair<Form, Kind>> plan;
  if (depth)
    for (const std::string& k : kinds) plan.push_back({Form::DepthAsTime, kindNamed(k)});
  if (control)
    for (const std::string& k : p.controlKinds) plan.push_back({Form::Control, kindNamed(k)});
  ReportContext ctx;
  ctx.params = p;
  ctx.tasks = taskNames;
  if (depth) ctx.kinds = kinds;
  ctx.control = control;
  ctx.smoke = smoke;
  ctx.command = command;
  std::vector<RunResult> runs;
  std::vector<GridCell> grid;
  std::vector<Comparison> cs;
  std::vector<std::pair<Form, std::string>> pairs;
  for (const auto& [f, k] : plan)
    if (k.name != "delta_bmax2") pairs.push_back({f, k.name});
  auto refresh = [&] {
    grid.clear();
    for (const TaskSpec& t : chosen)
      for (const auto& [f, k] : plan)
        for (const GridCell& c : gridOf(runs, t.name, f, k.name, p.lrs)) grid.push_back(c);
    cs = compare(runs, taskNames, pairs);
    adjust(cs);
    writeCsvs(out, runs, grid, cs);
    writeReport(out, ctx, runs, grid, cs);
  };
  // A phase's runs go to --jobs workers; the report lists them in the phase's order whatever order they
  // finish in, so it does not depend on the job count.
  auto runPhase = [&](const std::vector<RunSpec>& specs) {
    std::vector<RunResult> done = runParallel(specs, jobs, threads, [&](const RunResult& r) {
      std::cout << r.phase << " " << r.task << " " << toString(r.form) << " " << r.kind << " seed " << r.seed
                << " lr " << r.lr << ": "
                << (r.solved ? "solved at epoch " + std::to_string(r.epochsTo) : std::string("not solved"))
                << ", best val " << fmt(r.bestVal) << ", test " << fmt(r.test) << ", " << fmt(r.seconds, 1) << " s"
                << std::endl;
    });
    for (RunResult& r : done) runs.push_back(std::move(r));
    refresh();
  };
  for (const TaskSpec& t : chosen) {
    std::vector<SeedData> selection, evaluation;
    for (std::uint64_t seed : p.selectionSeeds) selection.push_back(seedData(t, seed, p));
    std::vector<RunSpec> specs;
    for (const SeedData& sd : selection)
      for (const auto& [f, k] : plan)
        for (double lr : p.lrs) specs.push_back({"selection", &t, &sd, f, k, lr, &p});
    runPhase(specs);
    selection.clear();
    for (std::uint64_t seed : p.seeds) evaluation.push_back(seedData(t, seed, p));
    specs.clear();
    for (const SeedData& sd : evaluation)
      for (const auto& [f, k] : plan) {
        double lr = p.lrs.front();
        for (const GridCell& c : gridOf(runs, t.name, f, k.name, p.lrs))
          if (c.chosen) lr = c.lr;
        specs.push_back({"evaluation", &t, &sd, f, k, lr, &p});
      }
    runPhase(specs);
  }
  ctx.complete = true;
  refresh();
  plotBeta(out, runs);
  std::cout << "block id: " << blockId(protocolBlock(p))
            << (blockId(protocolBlock(p)) == kProtocolId && !smoke ? " (the pre-registered protocol)" : " (not the protocol)")
            << "\nreport: " << out << "/report.md" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ddl::cli::CommandLine cli("ddl-claim", "runs the pre-registered claim test of docs/claims.md and writes its report");
  cli.section("protocol")
      .option("task", "LIST", "swap, parity, householder, permutation_s3, permutation_s5 (comma-separated)",
              "swap,parity,householder,permutation_s3,permutation_s5")
      .option("kinds", "LIST", "depth-as-time kinds", "delta_bmax2,delta_bmax1,write_only,additive,additive_wide,additive_3x")
      .option("form", "FORM", "depth_as_time | control (delta_bmax2, additive with all inputs at the first layer) | both",
              "both")
      .section("changes (the report is then not the protocol)")
      .option("seeds", "LIST", "evaluation seeds (protocol: 1..10)")
      .option("selection-seeds", "LIST", "learning-rate selection seeds (protocol: 1001,1002,1003)")
      .option("lrs", "LIST", "learning-rate grid (protocol: 0.001,0.003,0.01)")
      .option("epochs", "E", "epochs per run, additive_3x 3 E (protocol: 40)")
      .option("d", "D", "state width (protocol: 64)")
      .option("hidden", "H", "MLP hidden width (protocol: 256)")
      .option("control-kinds", "LIST", "kinds run in the control form (protocol: delta_bmax2,additive)")
      .option("readout", "R", "final | every_step: where the depth-as-time net is supervised")
      .flag("tied", "the depth-as-time net's blocks share one cell (a recurrence; each keeps its step projection)")
      .option("stop-when-solved", "yes|no", "end a run after the epoch that reaches the threshold")
      .option("steps", "L", "sequence length of the chosen tasks")
      .option("sizes", "LIST", "train,validation,test sizes of the chosen tasks")
      .flag("smoke", "one seed, two epochs, small sets and net: checks that everything runs (not the protocol)")
      .flag("print-block", "print the protocol block of these parameters and its id, and run nothing")
      .section("output")
      .option("jobs", "J", "runs trained at once, each on --threads threads", "1")
      .option("threads", "T", "threads per run; 0 = all cores", "0")
      .option("out", "DIR", "a new folder for report.md and the CSV files", "out/claim");
  std::string command = "ddl-claim";
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  try {
    cli.parse(argc, argv);
    if (cli.has("help")) {
      std::cout << cli.help();
      return 0;
    }
    return run(cli, command);
  } catch (const std::exception& e) {
    std::cerr << "ddl-claim: " << e.what() << "\n";
    return 1;
  }
}
