#pragma once
// examples/claim_run.hpp: one training run of ddl-claim (docs/claims.md, "Training and selection"): a
// task's data as matrices, the kinds, the nets of both forms, and the loop that trains one net with AdamW
// under a warm-up + cosine schedule, evaluates the validation split after every epoch, the test split once
// at the end, and (delta kinds) audits the gates and clamps beta in solved delta_bmax2 runs.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "claim_protocol.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/data/householder_task.hpp"
#include "ddl/data/state_tracking.hpp"
#include "ddl/diag/r_squared.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/nn/models/delta_net.hpp"
#include "ddl/nn/models/step_delta_net.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/lr_schedule.hpp"

namespace ddl::claim {

// One split: samples as columns; labels (classification) or targets (regression), the final ones and
// those after every step (the depth-as-time net's every-step supervision).
struct Split {
  MatX<float> X;
  std::vector<int> labels;
  MatX<float> targets;
  StepLabels stepLabels;
  MatX<float> stepTargets;  // (L outputs, N)
};

struct TaskData {
  StepLayout layout;
  bool regression = false;
  Index outputs = 0;  // classes, or regression outputs
  Split train, validation, test;
};

// The task generated with `seed`; the generators refuse sizes their sequence space cannot hold.
inline TaskData makeTask(const TaskSpec& t, std::uint64_t seed) {
  TaskData out;
  auto fromSequences = [&out](SequenceTask<float>&& s) {
    out.layout = s.layout;
    out.outputs = s.train.numClasses;
    out.train = {std::move(s.train.images), std::move(s.train.labels), {}, std::move(s.trainSteps), {}};
    out.validation = {std::move(s.validation.images), std::move(s.validation.labels), {}, std::move(s.validationSteps), {}};
    out.test = {std::move(s.test.images), std::move(s.test.labels), {}, std::move(s.testSteps), {}};
  };
  if (t.name == "swap") {
    fromSequences(makeSwapTask<float>({static_cast<int>(t.size), t.steps}, t.split, seed));
  } else if (t.name == "parity") {
    fromSequences(makeParityTask<float>({t.steps}, t.split, seed));
  } else if (t.name == "permutation_s3" || t.name == "permutation_s5") {
    fromSequences(makePermutationTask<float>({static_cast<int>(t.size), t.steps}, t.split, seed));
  } else if (t.name == "householder") {
    RegressionTask<float> h = makeHouseholderTask<float>({t.size, t.steps}, t.split, seed);
    out.layout = h.layout;
    out.regression = true;
    out.outputs = t.size;
    out.train = {std::move(h.train.inputs), {}, std::move(h.train.targets), {}, std::move(h.train.stepTargets)};
    out.validation = {std::move(h.validation.inputs), {}, std::move(h.validation.targets), {},
                      std::move(h.validation.stepTargets)};
    out.test = {std::move(h.test.inputs), {}, std::move(h.test.targets), {}, std::move(h.test.stepTargets)};
  } else {
    throw ValueError("unknown task '" + t.name + "' (swap, parity, householder, permutation_s3, permutation_s5)");
  }
  return out;
}

enum class Form { DepthAsTime, Control };
inline const char* toString(Form f) { return f == Form::DepthAsTime ? "depth_as_time" : "control"; }

// A kind of the protocol's table (docs/claims.md, "Kinds").
struct Kind {
  std::string name;
  ResidualKind residual = ResidualKind::Delta;
  double betaMax = 2.0;
  bool wide = false;    // additive_wide: hidden widened to delta_bmax2's parameter count
  Index epochScale = 1;  // additive_3x: 3
};

inline const std::vector<Kind>& allKinds() {
  static const std::vector<Kind> kinds{{"delta_bmax2", ResidualKind::Delta, 2.0, false, 1},
                                       {"delta_bmax1", ResidualKind::Delta, 1.0, false, 1},
                                       {"write_only", ResidualKind::WriteOnly, 2.0, false, 1},
                                       {"additive", ResidualKind::Additive, 2.0, false, 1},
                                       {"additive_wide", ResidualKind::Additive, 2.0, true, 1},
                                       {"additive_3x", ResidualKind::Additive, 2.0, false, 3}};
  return kinds;
}

inline const Kind& kindNamed(const std::string& name) {
  for (const Kind& k : allKinds())
    if (k.name == name) return k;
  throw ValueError("unknown kind '" + name +
                   "' (delta_bmax2, delta_bmax1, write_only, additive, additive_wide, additive_3x)");
}

// The code preset's block (the library's defaults) with the kind's residual, the gate starting at the
// middle of its range (bias 0: beta0 = betaMax / 2).
inline DeltaBlockOptions blockOptions(const Kind& k, Index hidden) {
  DeltaBlockOptions o;
  o.hidden = hidden;
  o.activation = Activation::GELU;
  o.residual.residual = k.residual;
  o.residual.betaMax = k.betaMax;
  o.residual.beta0 = k.betaMax / 2;
  return o;
}

inline StepDeltaNetConfig stepConfig(const TaskData& data, const Kind& k, Index d, Index hidden, StepReadout readout,
                                     bool tied) {
  StepDeltaNetConfig c;
  c.readout = readout;
  c.tied = tied;
  c.prefixDim = data.layout.prefixWidth;
  c.stepWidth = data.layout.stepWidth;
  c.steps = data.layout.steps;
  c.outputs = data.outputs;
  c.d = d;
  c.block = blockOptions(k, hidden);
  return c;
}

// The control form: DeltaNet with depth L on the whole column (all inputs at the first layer).
inline DeltaNetConfig controlConfig(const TaskData& data, const Kind& k, Index d, Index hidden) {
  DeltaNetConfig c;
  c.inputDim = data.layout.features();
  c.classes = data.outputs;
  c.d = d;
  c.depth = data.layout.steps;
  c.dv = 1;
  c.block = blockOptions(k, hidden);
  return c;
}

// additive_wide's hidden: the smallest hidden >= base whose additive depth-as-time net has at least
// delta_bmax2's parameters.
inline Index wideHidden(const TaskData& data, Index d, Index base, bool tied) {
  StepDeltaNet<float> delta(stepConfig(data, kindNamed("delta_bmax2"), d, base, StepReadout::Final, tied));
  const Index target = numParams(delta);
  for (Index h = base;; ++h) {
    StepDeltaNet<float> additive(stepConfig(data, kindNamed("additive"), d, h, StepReadout::Final, tied));
    if (numParams(additive) >= target) return h;
  }
}

inline constexpr int kBetaBins = 20;  // beta histogram bins over [0, 2]

struct BlockGate {
  double mean = 0, min = 0, max = 0, shareAbove1 = 0;
  std::array<std::int64_t, kBetaBins> histogram{};
};

struct RunResult {
  std::string phase, task, kind;  // phase: selection or evaluation
  Form form = Form::DepthAsTime;
  std::uint64_t seed = 0;
  double lr = 0;
  Index hidden = 0, params = 0, budget = 0;
  std::vector<double> curve;  // validation score after each epoch
  bool solved = false, diverged = false;
  Index epochsTo = 0;  // censored at budget + 1
  double bestVal = 0, finalVal = 0, test = 0, seconds = 0;
  std::vector<BlockGate> gates;    // delta kinds: per block, on the validation split after training
  bool clamped = false;            // the clamp intervention ran (solved delta_bmax2, depth as time)
  double clampAll = 0;             // validation score with beta <- min(beta, 1) in every block
  std::vector<double> clampEach;   // ... in block t alone
};

// Accuracy (classification) or R² (regression) of out against the split.
inline double score(const TaskData& data, const MatX<float>& out, const Split& s) {
  if (data.regression) return rSquared(out, s.targets);
  Index correct = 0;
  for (Index j = 0; j < out.cols(); ++j) {
    Index arg = 0;
    out.col(j).maxCoeff(&arg);
    correct += arg == s.labels[static_cast<std::size_t>(j)];
  }
  return static_cast<double>(correct) / static_cast<double>(out.cols());
}

// Readouts per sample of a net's output: L for a depth-as-time net read at every step, else 1.
template <class Net>
Index readoutsOf(const Net& net) {
  if constexpr (std::is_same_v<Net, StepDeltaNet<float>>)
    return net.readouts();
  else
    return 1;
}

// The score of the final readout (the task's label): an every-step net's last block of columns.
template <class Net>
double evaluate(Net& net, const TaskData& data, const Split& s) {
  MatX<float> out;
  net.forwardInference(s.X, out);
  const Index N = s.X.cols();
  if (!out.rightCols(N).allFinite()) return data.regression ? -std::numeric_limits<double>::infinity() : 0.0;
  return score(data, out.rightCols(N), s);
}

// Salt of the batch-order stream: the order depends on the seed only, the same for every kind.
inline constexpr std::uint64_t kBatchOrderSalt = 0x6261746368ULL;

struct Budget {
  Index epochs = 40, batch = 128;
  double threshold = 0.95;
  bool stopWhenSolved = false;  // end the run after the first epoch that reaches the threshold
};

// Trains net (initialised from r.seed by the caller) on data; fills r's outcomes.
template <class Net>
void trainRun(Net& net, const TaskData& data, const Budget& b, RunResult& r) {
  const auto start = std::chrono::steady_clock::now();
  r.params = numParams(net);
  r.budget = b.epochs;
  const Index n = data.train.X.cols(), R = readoutsOf(net);
  const Index perEpoch = (n + b.batch - 1) / b.batch;
  const std::int64_t total = static_cast<std::int64_t>(perEpoch * b.epochs);
  const LrSchedule schedule = LrSchedule::cosine(r.lr, std::min<std::int64_t>(200, total / 10), total);
  AdamWOptions ao;
  ao.lr = r.lr;
  AdamW<float> opt(ao);
  Rng order(r.seed ^ kBatchOrderSalt);
  std::vector<Index> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), Index(0));
  SoftmaxCrossEntropy<float> xent;
  MatX<float> Xb, out, Tb;
  std::vector<int> yb;
  std::int64_t step = 0;
  r.epochsTo = b.epochs + 1;
  r.bestVal = -std::numeric_limits<double>::infinity();
  for (Index epoch = 0; epoch < b.epochs && !r.diverged; ++epoch) {
    for (Index i = n - 1; i > 0; --i)
      std::swap(perm[static_cast<std::size_t>(i)], perm[static_cast<std::size_t>(order.below(static_cast<std::uint64_t>(i + 1)))]);
    for (Index first = 0; first < n; first += b.batch, ++step) {
      const Index B = std::min(b.batch, n - first);
      Xb.resize(data.train.X.rows(), B);
      if (data.regression) Tb.resize(data.outputs, R * B);
      yb.resize(static_cast<std::size_t>(R * B));
      for (Index j = 0; j < B; ++j) {
        const Index src = perm[static_cast<std::size_t>(first + j)];
        Xb.col(j) = data.train.X.col(src);
        if (R == 1 && data.regression)
          Tb.col(j) = data.train.targets.col(src);
        else if (R == 1)
          yb[static_cast<std::size_t>(j)] = data.train.labels[static_cast<std::size_t>(src)];
        for (Index t = 0; R > 1 && t < R; ++t) {  // every step's target, step-major as the net reads them
          if (data.regression)
            Tb.col(t * B + j) = data.train.stepTargets.col(src).segment(t * data.outputs, data.outputs);
          else
            yb[static_cast<std::size_t>(t * B + j)] = data.train.stepLabels.at(src, t);
        }
      }
      net.forward(Xb, out);
      float loss = 0;
      if (data.regression) {
        out -= Tb;  // MSE over every entry: gradient 2 (y - t) / (m B)
        loss = out.squaredNorm() / static_cast<float>(out.size());
        out *= 2.0f / static_cast<float>(out.size());
      } else {
        loss = xent.forward(out, yb);
        xent.backward(out);
      }
      if (!std::isfinite(loss)) {
        r.diverged = true;
        break;
      }
      zeroGrad(net);
      net.backward(out);
      opt.setLr(schedule.lrAt(step));
      opt.step(net);
    }
    const double val = r.diverged ? (data.regression ? -std::numeric_limits<double>::infinity() : 0.0)
                                  : evaluate(net, data, data.validation);
    r.curve.push_back(val);
    r.bestVal = std::max(r.bestVal, val);
    if (val >= b.threshold && r.epochsTo > b.epochs) {
      r.epochsTo = epoch + 1;
      if (b.stopWhenSolved) break;
    }
  }
  r.solved = r.epochsTo <= b.epochs;
  r.finalVal = r.curve.empty() ? 0.0 : r.curve.back();
  r.test = evaluate(net, data, data.test);  // once, after the last epoch; only reported
  if (r.kind != "additive" && r.kind.rfind("additive_", 0) != 0) {  // the gate audit of the gated kinds
    MatX<float> o;
    net.forwardInference(data.validation.X, o);
    for (const auto& block : net.blocks()) {
      const RowX<float>& beta = block.residual().beta();
      BlockGate g;
      g.mean = beta.template cast<double>().mean();
      g.min = beta.minCoeff();
      g.max = beta.maxCoeff();
      g.shareAbove1 = static_cast<double>((beta.array() > 1.0f).count()) / static_cast<double>(beta.size());
      for (Index j = 0; j < beta.size(); ++j) {
        const int bin = std::clamp(static_cast<int>(beta(j) / 2.0f * kBetaBins), 0, kBetaBins - 1);
        ++g.histogram[static_cast<std::size_t>(bin)];
      }
      r.gates.push_back(g);
    }
  }
  if constexpr (std::is_same_v<Net, StepDeltaNet<float>>) {
    if (r.kind == "delta_bmax2" && r.solved) {  // the clamp intervention (docs/claims.md)
      const std::size_t L = net.blocks().size();
      const double off = std::numeric_limits<double>::infinity();
      for (std::size_t t = 0; t < L; ++t) net.setBetaClamp(t, 1.0);
      r.clampAll = evaluate(net, data, data.validation);
      for (std::size_t t = 0; t < L; ++t) net.setBetaClamp(t, off);
      for (std::size_t t = 0; t < L; ++t) {
        net.setBetaClamp(t, 1.0);
        r.clampEach.push_back(evaluate(net, data, data.validation));
        net.setBetaClamp(t, off);
      }
      r.clamped = true;
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// One run of a kind in a form at a rate and seed (the net initialised from the seed).
inline RunResult runOne(const std::string& phase, const TaskSpec& task, const TaskData& data, Form form, const Kind& k,
                        double lr, std::uint64_t seed, const Parameters& p, Index wide) {
  RunResult r;
  r.phase = phase;
  r.task = task.name;
  r.kind = k.name;
  r.form = form;
  r.seed = seed;
  r.lr = lr;
  r.hidden = k.wide ? wide : p.hidden;
  Budget b;
  b.epochs = k.epochScale == 1 ? p.epochs : p.epochs3x;
  b.batch = p.batch;
  b.threshold = p.threshold;
  b.stopWhenSolved = p.stopWhenSolved;
  if (form == Form::DepthAsTime) {
    StepDeltaNet<float> net(stepConfig(data, k, p.d, r.hidden, p.readout, p.tied), seed);
    trainRun(net, data, b, r);
  } else {
    DeltaNet<float> net(controlConfig(data, k, p.d, r.hidden), seed);
    trainRun(net, data, b, r);
  }
  return r;
}

// A seed's data and additive_wide's hidden for it, shared by the runs of that seed.
struct SeedData {
  std::uint64_t seed = 0;
  TaskData data;
  Index wide = 0;
};

inline SeedData seedData(const TaskSpec& t, std::uint64_t seed, const Parameters& p) {
  SeedData sd;
  sd.seed = seed;
  sd.data = makeTask(t, seed);
  sd.wide = wideHidden(sd.data, p.d, p.hidden, p.tied);
  return sd;
}

// One run to make: the views stay alive while the phase runs.
struct RunSpec {
  std::string phase;
  const TaskSpec* task = nullptr;
  const SeedData* seed = nullptr;
  Form form = Form::DepthAsTime;
  Kind kind;
  double lr = 0;
  const Parameters* params = nullptr;
};

// Runs specs on `jobs` worker threads (each run on `threads` threads of its own), calls done(result) as
// each finishes (one at a time), and returns the results in the order of specs. A run's result does not
// depend on the worker that made it: every run builds its own net, optimiser and batch order.
template <class Done>
std::vector<RunResult> runParallel(const std::vector<RunSpec>& specs, int jobs, int threads, Done&& done) {
  std::vector<RunResult> results(specs.size());
  std::atomic<std::size_t> next{0};
  std::mutex lock;
  std::exception_ptr failure;
  auto worker = [&] {
    setThreadsOfThisThread(threads);
    for (std::size_t i; (i = next++) < specs.size();) {
      try {
        const RunSpec& s = specs[i];
        results[i] = runOne(s.phase, *s.task, s.seed->data, s.form, s.kind, s.lr, s.seed->seed, *s.params, s.seed->wide);
        std::lock_guard<std::mutex> guard(lock);
        done(results[i]);
      } catch (...) {
        std::lock_guard<std::mutex> guard(lock);
        if (!failure) failure = std::current_exception();
        next = specs.size();  // the other workers finish their run and stop
      }
    }
  };
  std::vector<std::thread> pool;
  for (int j = 1; j < jobs; ++j) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
  return results;
}

}  // namespace ddl::claim
