#pragma once
// ddl/nn/models/delta_net.hpp: the whole classifier,
//   input (inputDim, N) -> Linear -> x (d, N) -> expand to dv channels -> depth x DeltaBlock
//   -> readout CC (dv > 1) -> RMSNorm -> Linear head -> logits (classes, N).
// A plain residual network is the same class with block.residual.residual = Additive.
// Parameter names: input.*, expand.weight (EC), blocks.<i>.*, readout.* (dv > 1), norm.weight, head.*.
// Initialisation from one seed; draw order: input, blocks in order, head (torch.nn.Linear default), the
// structured readout's kernel (dv > 1).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/compressor.hpp"
#include "ddl/nn/blocks/delta_block.hpp"
#include "ddl/nn/models/delta_net_config.hpp"
#include "ddl/nn/blocks/expansion.hpp"
#include "ddl/nn/layers/forward_mode.hpp"
#include "ddl/nn/layers/linear.hpp"
#include "ddl/nn/layers/rms_norm.hpp"

namespace ddl {

template <class S>
class DeltaNet {
 public:
  explicit DeltaNet(const DeltaNetConfig& config, std::uint64_t seed = 0);

  // Re-initialises every parameter as a new net of this configuration and seed has it and clears the
  // gradients (core/param.hpp).
  void init(std::uint64_t seed) { reinitialize(*this, seed); }

 private:
  // The seeded draws of a freshly constructed net.
  void drawParams(std::uint64_t seed) {
    Rng rng(seed);
    m_input.init(rng);
    for (auto& b : m_blocks) b.init(rng);
    m_head.init(rng);
    if (m_cfg.dv > 1) m_readout.init(rng);
  }

 public:

  // X: (inputDim, N) one column per sample -> logits: (classes, N)
  void forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& logits) {
    run("ddl::DeltaNet::forward", X, logits, m_acts, ForwardMode::Train);
  }

  // Same logits as forward, bit for bit; writes none of the caches backward reads and allocates nothing
  // once its buffers have the batch's shape (two states, used in turn). states() still describes the
  // last forward; the blocks' residual diagnostics describe this call.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& logits) {
    run("ddl::DeltaNet::forwardInference", X, logits, m_inferActs, ForwardMode::Inference);
  }

  // dLogits: (classes, N) -> parameter gradients accumulate; dX: (inputDim, N) when requested.
  void backward(const Eigen::Ref<const MatX<S>>& dLogits, MatX<S>* dX = nullptr);

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    m_input.visitParams(joinName(prefix, "input"), f);
    if (m_cfg.dv > 1) m_expand.visitParams(joinName(prefix, "expand"), f);
    for (std::size_t i = 0; i < m_blocks.size(); ++i)
      m_blocks[i].visitParams(joinName(prefix, "blocks." + std::to_string(i)), f);
    if (m_cfg.dv > 1) m_readout.visitParams(joinName(prefix, "readout"), f);
    m_norm.visitParams(joinName(prefix, "norm"), f);
    m_head.visitParams(joinName(prefix, "head"), f);
  }

  const DeltaNetConfig& config() const { return m_cfg; }
  Index inputDim() const { return m_cfg.inputDim; }  // features per sample
  Index classes() const { return m_cfg.classes; }
  const std::vector<DeltaBlock<S>>& blocks() const { return m_blocks; }
  // States of the last forward: states()[i] is the input of block i, back() the last block's output.
  const std::vector<MatX<S>>& states() const { return m_acts.states; }
  // Input and output (d, dv*N) of block i in the last forward (what the gate audit measures on).
  const MatX<S>& blockInput(std::size_t i) const { return m_acts.states.at(i); }
  const MatX<S>& blockOutput(std::size_t i) const { return m_acts.states.at(i + 1); }

 private:
  // What one forward computes; the layers keep views of them for backward.
  struct Activations {
    MatX<S> input;  // (inputDim, N) a copy of the net's input (Train only: the caller owns X)
    MatX<S> x;      // (d, N) the input layer's output; dv > 1 only (for dv = 1 it is states[0])
    // (d, dv*N) states[i] the input of block i, states[depth] the last output (Train); Inference
    // uses two, in turn: block i reads states[i % 2]
    std::vector<MatX<S>> states;
    MatX<S> xin;  // (d, N) the readout CC(last state); dv > 1 only
    MatX<S> z;    // (d, N) RMSNorm of the readout, the head's input
  };

  // The forward of both modes; fn names the public caller in errors.
  void run(const char* fn, const Eigen::Ref<const MatX<S>>& X, MatX<S>& logits, Activations& a, ForwardMode mode);

  DeltaNetConfig m_cfg;
  Linear<S> m_input;
  Expansion<S> m_expand;
  std::vector<DeltaBlock<S>> m_blocks;
  Compressor<S> m_readout;
  RmsNorm<S> m_norm;
  Linear<S> m_head;
  Activations m_acts;       // of the last forward, read by backward and the audit
  Activations m_inferActs;  // of the last forwardInference
  MatX<S> m_dz, m_dA, m_dB, m_dx;
};

template <class S>
DeltaNet<S>::DeltaNet(const DeltaNetConfig& config, std::uint64_t seed)
    : m_cfg(validated(config)), m_input(config.inputDim, config.d), m_expand(config.d, config.dv, config.learnedExpansion),
      m_readout(config.d, config.dv, config.block.compressor, config.block.compressorKernel,
                config.block.compressorReadInit),
      m_norm(config.d, config.finalNormEps), m_head(config.d, config.classes) {
  m_blocks.reserve(static_cast<std::size_t>(config.depth));
  for (Index i = 0; i < config.depth; ++i) m_blocks.emplace_back(config.d, config.dv, config.block);
  m_acts.states.resize(static_cast<std::size_t>(config.depth) + 1);
  m_inferActs.states.resize(2);
  drawParams(seed);
}

template <class S>
void DeltaNet<S>::run(const char* fn, const Eigen::Ref<const MatX<S>>& X, MatX<S>& logits, Activations& a,
                      ForwardMode mode) {
  checkShape(fn, "X", X, m_cfg.inputDim, -1);
  // The layers keep views of their inputs (core/view.hpp); the net's own input is the one buffer it
  // does not own, so training keeps a copy: a caller's temporary X may die before backward.
  if (mode == ForwardMode::Train) a.input = X;
  const Eigen::Ref<const MatX<S>> in = mode == ForwardMode::Train ? Eigen::Ref<const MatX<S>>(a.input) : X;
  auto state = [&a](std::size_t i) -> MatX<S>& { return a.states[i % a.states.size()]; };
  forwardAs(mode, m_input, in, m_cfg.dv == 1 ? state(0) : a.x);
  if (m_cfg.dv > 1) forwardAs(mode, m_expand, a.x, state(0));
  for (std::size_t i = 0; i < m_blocks.size(); ++i) forwardAs(mode, m_blocks[i], state(i), state(i + 1));
  const MatX<S>& last = state(m_blocks.size());
  if (m_cfg.dv > 1) forwardAs(mode, m_readout, last, a.xin);
  forwardAs(mode, m_norm, m_cfg.dv == 1 ? last : a.xin, a.z);
  forwardAs(mode, m_head, a.z, logits);
}

template <class S>
void DeltaNet<S>::backward(const Eigen::Ref<const MatX<S>>& dLogits, MatX<S>* dX) {
  m_head.backward(dLogits, m_dz);
  if (m_cfg.dv == 1) {
    m_norm.backward(m_dz, m_dA);
  } else {
    m_norm.backward(m_dz, m_dz);
    m_readout.backward(m_dz, m_dA);
  }
  for (std::size_t i = m_blocks.size(); i-- > 0;) {
    m_blocks[i].backward(m_dA, m_dB);
    m_dA.swap(m_dB);
  }
  if (m_cfg.dv > 1) m_expand.backward(m_dA, m_dx);
  const MatX<S>& dx = m_cfg.dv == 1 ? m_dA : m_dx;  // no swap: every buffer keeps its shape
  if (dX)
    m_input.backward(dx, *dX);
  else
    m_input.backwardParamsOnly(dx);
}

#if DDL_EXTERN_TEMPLATES  // compiled once in the library ddl::compiled (docs/building.md)
extern template class DeltaNet<float>;
extern template class DeltaNet<double>;
#endif

}  // namespace ddl
