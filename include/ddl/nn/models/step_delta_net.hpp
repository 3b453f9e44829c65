#pragma once
// ddl/nn/models/step_delta_net.hpp: the depth-as-time net of the claim test (docs/claims.md, "Models"):
// an unrolled recurrence with one Delta block per step of a sequence, step t's input fed into block t,
//   x_0 = W_0 p + b_0   (p the prefix; b_0 alone when the task has none)
//   x_t = block_t(x_{t-1}, s_t)   t = 1..L   (StepDeltaBlock: c_t = RMSNorm(x_{t-1}) + P_t s_t)
//   out = head(RMSNorm(x_L))     (logits, or regression outputs)
// or, with StepReadout::EveryStep, the same head on every state: out_t = head(RMSNorm(x_t)), t = 1..L,
// returned as L blocks of N columns (step-major: column (t - 1) N + j is sample j after step t).
// With config.tied every block applies block 0's cell (its norm, branch and residual: one recurrent
// transition, the form of the linear-recurrence results) while each keeps its own step projection P_t:
// the net exposes block 0's cell and every P_t as parameters, copies the cell into the other blocks at
// each forward and sums their gradients into block 0's at backward.
// A sample is one column: the prefix, then the steps (StepLayout, data/sequence_sampling.hpp). The control
// form of the claim test, all inputs at the first layer, is DeltaNet with depth L on the same column.
// Parameter names: input.* (prefix) or start.bias (no prefix), blocks.<t>.* (step_delta_block.hpp, t from
// 0; tied: blocks.0.* and blocks.<t>.step.weight), norm.weight, head.*.
// Initialisation from one seed; draw order: the input (input: torch.nn.Linear's default; start.bias:
// U(-1, 1), a Linear of one constant input), each block's shared draws (step, branch), the head, then each
// block's residual (gate, value). The residual's draws come last, so nets of one seed that differ only in
// the residual kind start with equal input, step, branch and head parameters.
#include <cstdint>
#include <string>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/step_delta_block.hpp"
#include "ddl/nn/layers/forward_mode.hpp"
#include "ddl/nn/layers/init.hpp"
#include "ddl/nn/layers/linear.hpp"
#include "ddl/nn/layers/rms_norm.hpp"
#include "ddl/nn/models/step_delta_net_config.hpp"

namespace ddl {

template <class S>
class StepDeltaNet {
 public:
  explicit StepDeltaNet(const StepDeltaNetConfig& config, std::uint64_t seed = 0)
      : m_cfg(validated(config)), m_input(config.prefixDim > 0 ? config.prefixDim : 1, config.d),
        m_start(std::vector<Index>{config.d}, /*withDecay=*/false), m_norm(config.d, config.finalNormEps),
        m_head(config.d, config.outputs) {
    m_blocks.reserve(static_cast<std::size_t>(config.steps));
    for (Index t = 0; t < config.steps; ++t) m_blocks.emplace_back(config.d, config.stepWidth, config.block);
    m_acts.states.resize(static_cast<std::size_t>(config.steps) + 1);
    m_acts.steps.resize(static_cast<std::size_t>(config.steps));
    m_inferActs.states.resize(2);
    drawParams(seed);
  }

  // Re-initialises every parameter as a new net of this configuration and seed has it and clears the
  // gradients (core/param.hpp).
  void init(std::uint64_t seed) { reinitialize(*this, seed); }

  // X: (inputDim, N) one sample per column -> out: (outputs, readouts() N), step-major for EveryStep
  void forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& out) {
    run("ddl::StepDeltaNet::forward", X, out, m_acts, ForwardMode::Train);
  }

  // Same out as forward, bit for bit; writes none of the caches backward reads (two states, used in
  // turn). The blocks' residual diagnostics (beta) then describe this call.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& out) {
    run("ddl::StepDeltaNet::forwardInference", X, out, m_inferActs, ForwardMode::Inference);
  }

  // dOut: (outputs, readouts() N) of the last forward -> parameter gradients accumulate; dX: (inputDim, N)
  // when given.
  void backward(const Eigen::Ref<const MatX<S>>& dOut, MatX<S>* dX = nullptr);

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    if (hasPrefix())
      m_input.visitParams(joinName(prefix, "input"), f);
    else
      f(joinName(prefix, "start.bias"), m_start);
    for (std::size_t t = 0; t < m_blocks.size(); ++t) {
      const std::string name = joinName(prefix, "blocks." + std::to_string(t));
      if (m_cfg.tied && t > 0)
        m_blocks[t].visitStepParams(name, f);
      else
        m_blocks[t].visitParams(name, f);
    }
    m_norm.visitParams(joinName(prefix, "norm"), f);
    m_head.visitParams(joinName(prefix, "head"), f);
  }

  const StepDeltaNetConfig& config() const { return m_cfg; }
  Index inputDim() const { return m_cfg.inputDim(); }
  Index readouts() const { return m_cfg.readouts(); }
  const std::vector<StepDeltaBlock<S>>& blocks() const { return m_blocks; }
  // The evaluation clamp beta <- min(beta, c) in block t (0-based); +inf removes it. ValueError for a block
  // that does not exist or a residual without a gate.
  void setBetaClamp(std::size_t t, double c) {
    require(t < m_blocks.size(), "ddl::StepDeltaNet::setBetaClamp", "block ", t, " does not exist (the net has ",
            m_blocks.size(), ")");
    m_blocks[t].setBetaClamp(c);
  }

 private:
  bool hasPrefix() const { return m_cfg.prefixDim > 0; }

  // The seeded draws of a freshly constructed net (the order of the header comment).
  void drawParams(std::uint64_t seed) {
    Rng rng(seed);
    if (hasPrefix())
      m_input.init(rng);
    else
      fillUniform(m_start.value, rng, -1.0, 1.0);
    for (auto& b : m_blocks) b.initShared(rng);
    m_head.init(rng);
    for (auto& b : m_blocks) b.initResidual(rng);
  }

  struct Activations {
    MatX<S> prefix;               // (prefixDim, N) Train only
    std::vector<MatX<S>> steps;   // (stepWidth, N) step t's input, Train only (the blocks keep views)
    std::vector<MatX<S>> states;  // (d, N) states[t] = x_t (Train); Inference uses two in turn
    MatX<S> step;                 // (stepWidth, N) Inference's one step buffer
    MatX<S> read;                 // (d, L N) x_1 .. x_L side by side (EveryStep)
    MatX<S> z;                    // (d, readouts N) RMSNorm of the states read
  };

  void run(const char* fn, const Eigen::Ref<const MatX<S>>& X, MatX<S>& out, Activations& a, ForwardMode mode);

  // The cell parameters of block t, in visiting order (tied nets).
  std::vector<Param<S>*> cellParams(std::size_t t) {
    std::vector<Param<S>*> out;
    m_blocks[t].visitCellParams("", [&out](const std::string&, Param<S>& p) { out.push_back(&p); });
    return out;
  }
  // Tied: every block's cell takes block 0's values (before a forward).
  void shareCell() {
    const std::vector<Param<S>*> first = cellParams(0);
    for (std::size_t t = 1; t < m_blocks.size(); ++t) {
      const std::vector<Param<S>*> other = cellParams(t);
      for (std::size_t i = 0; i < first.size(); ++i) other[i]->value = first[i]->value;
    }
  }
  // Tied: the other blocks' cell gradients move into block 0's (after a backward).
  void gatherCellGrads() {
    const std::vector<Param<S>*> first = cellParams(0);
    for (std::size_t t = 1; t < m_blocks.size(); ++t) {
      const std::vector<Param<S>*> other = cellParams(t);
      for (std::size_t i = 0; i < first.size(); ++i) {
        first[i]->grad += other[i]->grad;
        other[i]->grad.setZero();
      }
    }
  }

  StepDeltaNetConfig m_cfg;
  Linear<S> m_input;  // W_0, b_0 (prefix)
  Param<S> m_start;   // b_0 (no prefix)
  std::vector<StepDeltaBlock<S>> m_blocks;
  RmsNorm<S> m_norm;
  Linear<S> m_head;
  Activations m_acts, m_inferActs;
  MatX<S> m_dz, m_dRead, m_dA, m_dB, m_dS;
};

template <class S>
void StepDeltaNet<S>::run(const char* fn, const Eigen::Ref<const MatX<S>>& X, MatX<S>& out, Activations& a,
                          ForwardMode mode) {
  checkShape(fn, "X", X, m_cfg.inputDim(), -1);
  if (m_cfg.tied) shareCell();
  const Index N = X.cols(), w = m_cfg.stepWidth, p = m_cfg.prefixDim;
  auto state = [&a](std::size_t i) -> MatX<S>& { return a.states[i % a.states.size()]; };
  if (hasPrefix()) {
    a.prefix = X.topRows(p);  // a copy: the layers keep views until backward, X may not live that long
    forwardAs(mode, m_input, a.prefix, state(0));
  } else {
    state(0) = m_start.value.col(0).replicate(1, N);
  }
  const bool every = m_cfg.readout == StepReadout::EveryStep;
  if (every) a.read.resize(m_cfg.d, m_cfg.steps * N);
  for (std::size_t t = 0; t < m_blocks.size(); ++t) {
    MatX<S>& s = mode == ForwardMode::Train ? a.steps[t] : a.step;
    s = X.middleRows(p + static_cast<Index>(t) * w, w);
    forwardAs(mode, m_blocks[t], state(t), s, state(t + 1));
    if (every) a.read.middleCols(static_cast<Index>(t) * N, N) = state(t + 1);
  }
  forwardAs(mode, m_norm, every ? a.read : state(m_blocks.size()), a.z);
  forwardAs(mode, m_head, a.z, out);
}

template <class S>
void StepDeltaNet<S>::backward(const Eigen::Ref<const MatX<S>>& dOut, MatX<S>* dX) {
  const char* fn = "ddl::StepDeltaNet::backward";
  const Index N = m_acts.states.back().cols();
  if (N == 0 || m_acts.z.cols() != readouts() * N) throw Error(message(fn, "called before forward"));
  checkShape(fn, "dOut", dOut, m_cfg.outputs, readouts() * N);
  const Index w = m_cfg.stepWidth, p = m_cfg.prefixDim;
  const bool every = m_cfg.readout == StepReadout::EveryStep;
  if (dX) dX->resize(m_cfg.inputDim(), N);
  m_head.backward(dOut, m_dz);
  m_norm.backward(m_dz, m_dRead);  // (d, N): dx_L; EveryStep: (d, L N), every state's readout gradient
  if (every)
    m_dA = m_dRead.rightCols(N);
  else
    m_dA.swap(m_dRead);
  for (std::size_t t = m_blocks.size(); t-- > 0;) {
    if (every && t + 1 < m_blocks.size()) m_dA += m_dRead.middleCols(static_cast<Index>(t) * N, N);
    m_blocks[t].backward(m_dA, m_dB, dX ? &m_dS : nullptr);
    if (dX) dX->middleRows(p + static_cast<Index>(t) * w, w) = m_dS;
    m_dA.swap(m_dB);
  }
  if (m_cfg.tied) gatherCellGrads();
  if (!hasPrefix()) {
    m_start.grad.col(0) += m_dA.rowwise().sum();
  } else if (dX) {
    m_input.backward(m_dA, m_dB);
    dX->topRows(p) = m_dB;
  } else {
    m_input.backwardParamsOnly(m_dA);
  }
}

}  // namespace ddl
