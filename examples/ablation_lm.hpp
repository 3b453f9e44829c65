#pragma once
// examples/ablation_lm.hpp: the language model of ddl-ablation (--net lm): per residual kind and seed a
// DeltaLM of ddl-text's configuration on a byte corpus (examples/text_files.hpp), trained by the
// TrainingLoop with ddl-text's pieces: random windows (TextWindows), next-byte cross-entropy
// (NextTokenTask), AdamW with warmup min(200, steps / 10) and cosine decay. The metric is the
// validation loss in nats on the first --eval-bytes of the validation split (bits per byte = loss /
// ln 2; lower is better); the test split is evaluated once, after the last epoch. The split is by
// position, the same for every seed; a seed sets the initialisation and the training windows.
// dv 1 is the variant dv1, dv > 1 the variant cc with dv value channels (repeat expansion).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "ablation_report.hpp"
#include "text_files.hpp"
#include "ddl/nn/models/delta_lm.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/next_token_task.hpp"
#include "ddl/train/text_windows.hpp"
#include "ddl/train/training_loop.hpp"

namespace ddl::ablation {

struct TextData {
  TextCorpus corpus;
  std::vector<std::uint8_t> validation;  // the evaluated prefix of corpus.validation
};

// The model and the steps per epoch (the rest of the budget is in TrainerOptions).
struct LmShape {
  Index d = 128, depth = 4, heads = 4, context = 128, steps = 100;
  double betaMax = 2;  // the gate's cap of the delta and write_only kinds (capGate)
};

inline TextData readTextData(const std::string& path, Index evalBytes) {
  TextData t;
  t.corpus = example::readCorpus(path);
  t.validation = example::evaluatedPrefix(t.corpus.validation, evalBytes);
  return t;
}

// The gate's cap of a gated kind, its gate starting at the middle of its range (betaMax / 2: the authors'
// beta0 = 1 at the default 2); the additive kind has no gate.
inline void capGate(DeltaResidualOptions& r, double betaMax) {
  if (r.residual == ResidualKind::Additive) return;
  r.betaMax = betaMax;
  r.beta0 = betaMax / 2;
}

inline DeltaLMConfig lmConfig(const LmShape& shape, const std::string& kind, Index dv) {
  DeltaLMConfig cfg;
  cfg.block.residual.residual = parseResidualKind(kind);
  applyPreset(cfg, "code");
  capGate(cfg.block.residual, shape.betaMax);
  applyVariant(cfg, dv == 1 ? "dv1" : "cc");
  cfg.dv = dv;
  cfg.d = shape.d;
  cfg.depth = shape.depth;
  cfg.heads = shape.heads;
  cfg.context = shape.context;
  cfg.validate();
  return cfg;
}

inline std::string describeLm(const LmShape& s, Index dv) {
  return "DeltaLM " + std::string(dv == 1 ? "dv1" : "cc (dv " + std::to_string(dv) + ")") + ", preset code, d " +
         std::to_string(s.d) + ", depth " + std::to_string(s.depth) + ", heads " + std::to_string(s.heads) +
         ", context " + std::to_string(s.context) + " bytes";
}

// The report's budget and data sentences.
inline void describeLmSetup(Setup& su, const TextData& t, const LmShape& s) {
  const TrainerOptions& o = su.base;
  const std::int64_t steps = s.steps * o.epochs;
  su.budget = std::to_string(o.epochs) + " epochs of " + std::to_string(s.steps) + " steps (" + std::to_string(steps) +
              " steps), batch " + std::to_string(o.batchSize) + " random windows of " + std::to_string(s.context) +
              " bytes, AdamW lr " + fmt("%g", o.adam.lr) + " (cosine, warmup " +
              std::to_string(std::min<std::int64_t>(200, steps / 10)) + " steps), weight decay " +
              fmt("%g", o.adam.weightDecay) + ", gradient clipping at norm " + fmt("%g", o.clipNorm) +
              ", fixed before the runs (ddl-text's defaults, docs/text_defaults.md, unless the command sets them).";
  su.data = t.corpus.path + ", " + std::to_string(t.corpus.bytes()) + " bytes split by position: training " +
            std::to_string(t.corpus.train.size()) + ", validation " + std::to_string(t.corpus.validation.size()) +
            " (the first " + std::to_string(t.validation.size()) + " evaluated), test " +
            std::to_string(t.corpus.test.size()) + " bytes, the same for every seed; " + std::to_string(su.seeds) +
            " seeds from " + std::to_string(su.seed0) + " (all kinds of one seed share the initialisation seed and the "
            "training windows).";
  su.trainSize = static_cast<Index>(t.corpus.train.size());
  su.testSize = static_cast<Index>(t.corpus.test.size());
}

// Trains one DeltaLM from opt.seed and fills r: the curve (validation at step 0 and after every
// epoch, the loop's own evaluation), the final validation result, and the test result (once).
inline void trainLm(const TextData& data, const LmShape& shape, const std::string& kind, Index dv,
                    TrainerOptions opt, Run& r) {
  using Clock = std::chrono::steady_clock;
  const DeltaLMConfig cfg = lmConfig(shape, kind, dv);
  DeltaLM<float> lm(cfg, opt.seed);
  NextTokenTask<float> task;
  TextWindows<float> windows(data.corpus.train, opt.batchSize, cfg.context, shape.steps, opt.seed);
  opt.warmupSteps = std::min<std::int64_t>(200, shape.steps * opt.epochs / 10);
  opt.evalBatch = opt.batchSize;
  AdamW<float> adam(opt.adam);
  TrainingLoop<DeltaLM<float>, NextTokenTask<float>, TextWindows<float>, AdamW<float>> loop(lm, task, windows, adam,
                                                                                            opt, &data.validation);
  r.params = static_cast<std::int64_t>(numParams(lm));
  const EvalResult v0 = loop.evaluate(data.validation);
  r.curve.push_back(CurvePoint{0, 0, v0.loss, v0.accuracy});
  double trained = 0;  // training time only: the evaluations after each epoch are left out
  Clock::time_point mark = Clock::now();
  loop.onEpochStart = [&](int) { mark = Clock::now(); };
  loop.onBatch = [&](const BatchProgress&) {
    trained += std::chrono::duration<double>(Clock::now() - mark).count();
    mark = Clock::now();
  };
  loop.onEpoch = [&](const EpochMetrics& m) {
    r.curve.push_back(CurvePoint{m.step, trained, m.validation.loss, m.validation.accuracy});
  };
  const EpochMetrics last = loop.run();
  r.seconds = trained;
  r.valLoss = last.validation.loss;
  r.valAcc = last.validation.accuracy;
  r.trainLoss = last.trainLoss;
  const EvalResult t = loop.evaluate(data.corpus.test);
  r.testLoss = t.loss;
  r.testAcc = t.accuracy;
}

}  // namespace ddl::ablation
