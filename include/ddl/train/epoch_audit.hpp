#pragma once
// ddl/train/epoch_audit.hpp: the audit recorder on a Trainer's epochs (the examples' --audit).
//
//   ddl::AuditRecorder audit;
//   ddl::auditEveryEpoch(trainer, trainer.gates(), net, audit, outDir);  // after resume and setting onEpoch
//   trainer.run();
// After every epoch's evaluation the recorder adds one row per gated sublayer (diag/gated_sublayers.hpp:
// a block of DeltaNet, the attention or SwiGLU of a DeltaLM block): the statistics the gate columns
// gathered over the test set (else the validation set; train/gate_columns.hpp) and the spectrum of the
// net's last evaluation forward; then <outDir>/audit.csv and audit.json are rewritten (atomically), and
// the onEpoch set before is called. A resumed run keeps the rows of the epochs it does not repeat from
// an existing audit.json. Nothing touches the training steps: the recorder only reads caches.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "ddl/diag/audit_file.hpp"
#include "ddl/diag/recorder.hpp"
#include "ddl/train/gate_columns.hpp"
#include "ddl/train/training_loop.hpp"

namespace ddl {

// trainer: Trainer<S, Model> or TrainingLoop (ddl-text); gates: the GateColumns added to it; model: the
// net it trains. trainer, gates, model and recorder must outlive run().
template <class TrainerT, class Model>
void auditEveryEpoch(TrainerT& trainer, const GateColumns& gates, const Model& model, AuditRecorder& recorder,
                     const std::string& outDir) {
  const std::string json = outDir + "/audit.json";
  if (trainer.epoch() > 0 && std::filesystem::exists(json)) recorder.restore(readAuditJson(json), trainer.epoch());
  auto next = std::move(trainer.onEpoch);
  trainer.onEpoch = [&gates, &model, &recorder, outDir, next](const EpochMetrics& m) {
    recorder.endEpoch(m.epoch, gates.stats(), model);
    writeAuditFiles(outDir, recorder.rows(), recorder.options().bins);
    if (next) next(m);
  };
}

// The audit of one evaluation (the examples' --eval-only --audit): one row per gated block, labelled
// with epoch, from the statistics of that evaluation and the spectrum of its last forward (an
// evaluation with an observer runs the caching forward). Written to <outDir>/eval_audit.csv and
// eval_audit.json, so the training run's audit.csv and audit.json stay as they were.
template <class Model>
std::vector<AuditRow> writeEvaluationAudit(const Model& model, const std::vector<GateStats>& stats, int epoch,
                                           const std::string& outDir) {
  AuditRecorder recorder;
  recorder.endEpoch(epoch, stats, model);
  writeAuditCsv(outDir + "/eval_audit.csv", recorder.rows(), recorder.options().bins);
  writeAuditJson(outDir + "/eval_audit.json", recorder.rows());
  return recorder.rows();
}

}  // namespace ddl
