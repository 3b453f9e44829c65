#pragma once
// examples/curves.hpp: PNG plots of the example programs through gnuplot (ddl-mnist, ddl-cifar,
// ddl-ablation), when gnuplot is installed.
//
//   ddl::plot::epochCurves(out, {{4, 6}, {5, 7}});        // out/metrics.csv -> out/curves.png
//   ddl::plot::gnuplot(script, {data, png}, png, "beta");  // any script, arguments as ARG1, ARG2, ...
//
// gnuplot is started with posix_spawnp, never through a shell; file paths reach it as arguments
// (ARG1, ARG2, ...), never inside gnuplot's own quoting, so any path is safe. A missing or failing
// gnuplot is reported on stdout and is not an error: the plots are an extra.
#include <cerrno>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <spawn.h>
#include <sys/wait.h>

#include "ddl/io/atomic_file.hpp"

extern char** environ;

namespace ddl::plot {

// The last component of a path, for short messages.
inline std::string fileName(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Runs args (args[0] looked up in PATH) without a shell and waits. -1 when it cannot be started
// or did not exit normally, else its exit status.
inline int runProgram(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// gnuplot -c script args...; says on stdout whether png was written ("<what>: <png>" when it was).
// True when gnuplot succeeded.
inline bool gnuplot(const std::string& script, const std::vector<std::string>& args, const std::string& png,
                    const std::string& what = "plot") {
  std::vector<std::string> cmd{"gnuplot", "-c", script};
  cmd.insert(cmd.end(), args.begin(), args.end());
  const int rc = runProgram(cmd);
  if (rc == 0)
    std::cout << what << ": " << png << "\n";
  else if (rc < 0)
    std::cout << "gnuplot not found: no " << fileName(png) << " (apt-get install gnuplot-nox)\n";
  else
    std::cout << "gnuplot failed (exit " << rc << "): no " << fileName(png) << "\n";
  return rc == 0;
}

// Which columns of metrics.csv to draw in the loss panel and in the accuracy panel, by their header
// names (train_loss, val_loss, ...); each column's name labels its line.
struct EpochColumns {
  std::vector<std::string> loss, accuracy;
};

// out/curves.png from out/metrics.csv (the training loop's columns): loss and accuracy against the
// epoch. Writes the script as out/curves.gp so the plot can be redrawn by hand. Throws ValueError
// when a named column is not in the file's header.
inline bool epochCurves(const std::string& out, const EpochColumns& columns) {
  const std::string script = out + "/curves.gp", png = out + "/curves.png";
  std::ifstream csv(out + "/metrics.csv");
  std::string line, header, firstEpoch;
  std::getline(csv, header);
  auto plotLine = [&header, &out](const std::vector<std::string>& names) {
    std::string line = "plot ";
    for (std::size_t i = 0; i < names.size(); ++i) {
      std::istringstream cells(header);
      std::string cell;
      int column = 0, found = 0;  // 1-based, as gnuplot counts
      while (found == 0 && std::getline(cells, cell, ',')) {
        ++column;
        if (cell == names[i]) found = column;
      }
      if (found == 0)
        throw ValueError(message("ddl::plot::epochCurves", out, "/metrics.csv has no column ", names[i]));
      line += (i ? ", '' using 1:" : "ARG1 using 1:") + std::to_string(found) + " with linespoints";
    }
    return line + "\n";
  };
  int rows = 0;  // after the header
  while (std::getline(csv, line))
    if (++rows == 1) firstEpoch = line.substr(0, line.find(','));
  const bool single = rows == 1 && !firstEpoch.empty() && firstEpoch.find_first_not_of("0123456789") == std::string::npos;
  writeFileAtomically(script, [&](std::ostream& gp) {
    gp << "# gnuplot -c curves.gp metrics.csv curves.png\n"
       << "set datafile separator ','\nset terminal png size 1100,420 noenhanced\nset output ARG2\n"
       << (single ? "set xrange [" + firstEpoch + " - 1:" + firstEpoch + " + 1]\n" : std::string())
       << "set multiplot layout 1,2\nset xlabel 'epoch'\nset grid\nset key autotitle columnhead\n"
       << "set title 'loss'\n" << plotLine(columns.loss) << "set title 'accuracy'\n" << plotLine(columns.accuracy)
       << "unset multiplot\n";
  });
  return gnuplot(script, {out + "/metrics.csv", png}, png, "curves");
}

}  // namespace ddl::plot
