#pragma once
// examples/final_report.hpp: the end of a finished training run of ddl-mnist and ddl-cifar: the test
// set, never seen in training, evaluated once with a gate audit per block; the paths of what the run
// wrote; the curves of metrics.csv.
#include <cstdio>
#include <iostream>
#include <string>

#include "curves.hpp"
#include "ddl/diag/net_gate_audit.hpp"
#include "ddl/train/stop_signal.hpp"
#include "ddl/train/trainer.hpp"

namespace ddl::report {

// An evaluation that Ctrl-C / SIGTERM ended early (EvalResult::stopped): says how far it got and what
// is safe, and returns the exit status 128 + signal. what: "the test set"; total: its samples;
// unit: "samples", "bytes"; state: what the user has (the checkpoint is complete, ...).
inline int evaluationStopped(const std::string& program, const std::string& what, const EvalResult& r, Index total,
                             const std::string& unit, const std::string& state) {
  const int sig = stopSignal() != 0 ? stopSignal() : SIGTERM;
  std::cout << program << ": stopped by " << signalName(sig) << " while evaluating " << what << ", after "
            << r.count << " of " << total << " " << unit << "; " << state << "\n";
  return 128 + sig;
}

// last: the metrics of the run's last epoch; validationSize: the held-out samples (0 = none);
// cfg: the net's config (preset and residual kind are printed). Returns the exit status: 0, or 128 +
// signal when a stop signal ended the test evaluation (the trained checkpoint is complete then).
template <class TrainerT, class Config>
int finalTest(const std::string& program, TrainerT& trainer, const EpochMetrics& last, const Dataset<float>& test,
              Index validationSize, const Config& cfg, int epochs, const std::string& outDir) {
  NetGateAccumulator gates;
  const EvalResult tested = trainer.evaluate(test, [&gates](const auto& net) { gates.add(net); });
  if (tested.stopped)
    return evaluationStopped(program, "the test set", tested, test.size(), "samples",
                             "the training is complete (checkpoint: " + trainer.checkpointPath() +
                                 "); --eval-only evaluates the test set");
  if (last.validation.count > 0)
    std::printf("final validation accuracy: %.2f%% (%lld held-out training samples)\n", 100.0 * last.validation.accuracy,
                static_cast<long long>(validationSize));
  std::printf("final test loss %.4f, final test accuracy: %.2f%% (%s, %s residual, %d epochs)\n", tested.loss,
              100.0 * tested.accuracy, toString(cfg.preset), toString(cfg.block.residual.residual), epochs);
  std::cout << formatGateSummary(gates.stats()) << "metrics: " << trainer.metricsPath()
            << "\ncheckpoint: " << trainer.checkpointPath() << "\n";
  // metrics.csv columns: 4 train_loss, 5 train_acc, 6 val_loss, 7 val_acc (the test set has no rows).
  plot::epochCurves(outDir, validationSize > 0 ? plot::EpochColumns{{"train_loss", "val_loss"}, {"train_acc", "val_acc"}}
                                                     : plot::EpochColumns{{"train_loss"}, {"train_acc"}});
  return 0;
}

}  // namespace ddl::report
