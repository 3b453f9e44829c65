#pragma once
// ddl/nn/models/delta_net.hpp: the whole classifier,
//   input (inputDim, N) -> Linear -> x (d, N) -> expand to dv channels -> depth x DeltaBlock
//   -> readout CC (dv > 1) -> RMSNorm -> Linear head -> logits (classes, N).
// A plain residual network is the same class with block.residual.residual = Additive.
// Parameter names: input.*, expand.weight (EC), blocks.<i>.*, readout.* (dv > 1), norm.weight, head.*.
// Initialisation from one seed; draw order: input, blocks in order, head (torch.nn.Linear default).
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
#include "ddl/nn/layers/linear.hpp"
#include "ddl/nn/layers/rms_norm.hpp"

namespace ddl {

template <class S>
class DeltaNet {
 public:
  explicit DeltaNet(const DeltaNetConfig& config, std::uint64_t seed = 0);

  // Re-initialises every parameter exactly as a new net of this configuration and seed has it (RMSNorm
  // gains, compressor and expansion weights included, which are not drawn) and clears the gradients.
  void init(std::uint64_t seed);

 private:
  // The seeded draws of a freshly constructed net.
  void drawParams(std::uint64_t seed) {
    Rng rng(seed);
    m_input.init(rng);
    for (auto& b : m_blocks) b.init(rng);
    m_head.init(rng);
  }

 public:

  // X: (inputDim, N) one column per sample -> logits: (classes, N)
  void forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& logits);

  // Same logits as forward, bit for bit; writes none of the caches backward reads and allocates nothing
  // once its buffers have the batch's shape (two states, used in turn). states() still describes the
  // last forward; the blocks' residual diagnostics describe this call.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& logits);

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
  const std::vector<MatX<S>>& states() const { return m_states; }
  // Input and output (d, dv*N) of block i in the last forward (what the gate audit measures on).
  const MatX<S>& blockInput(std::size_t i) const { return m_states.at(i); }
  const MatX<S>& blockOutput(std::size_t i) const { return m_states.at(i + 1); }

 private:
  static const DeltaNetConfig& validated(const DeltaNetConfig& c) {
    c.validate();
    return c;
  }

  DeltaNetConfig m_cfg;
  Linear<S> m_input;
  Expansion<S> m_expand;
  std::vector<DeltaBlock<S>> m_blocks;
  Compressor<S> m_readout;
  RmsNorm<S> m_norm;
  Linear<S> m_head;
  std::vector<MatX<S>> m_states;  // m_states[i] is the input of block i; back() the last output
  MatX<S> m_inputCopy, m_x, m_xin, m_z;
  MatX<S> m_dz, m_dA, m_dB, m_dx;
  MatX<S> m_inferX, m_inferA, m_inferB, m_inferZ;  // forwardInference
};

template <class S>
DeltaNet<S>::DeltaNet(const DeltaNetConfig& config, std::uint64_t seed)
    : m_cfg(validated(config)), m_input(config.inputDim, config.d), m_expand(config.d, config.dv, config.learnedExpansion),
      m_readout(config.d, config.dv, config.block.compressor, config.block.compressorKernel),
      m_norm(config.d, config.finalNormEps), m_head(config.d, config.classes) {
  m_blocks.reserve(static_cast<std::size_t>(config.depth));
  for (Index i = 0; i < config.depth; ++i) m_blocks.emplace_back(config.d, config.dv, config.block);
  m_states.resize(static_cast<std::size_t>(config.depth) + 1);
  drawParams(seed);
}

template <class S>
void DeltaNet<S>::init(std::uint64_t seed) {
  DeltaNet fresh(m_cfg, seed);
  assignParams(*this, fresh);
}

template <class S>
void DeltaNet<S>::forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& logits) {
  checkShape("ddl::DeltaNet::forward", "X", X, m_cfg.inputDim, -1);
  // The layers keep views of their inputs (core/view.hpp); the net's own input is the one buffer it
  // does not own, so it keeps a copy: a caller's temporary X may die before backward.
  m_inputCopy = X;
  if (m_cfg.dv == 1) {
    m_input.forward(m_inputCopy, m_states[0]);
  } else {
    m_input.forward(m_inputCopy, m_x);
    m_expand.forward(m_x, m_states[0]);
  }
  for (std::size_t i = 0; i < m_blocks.size(); ++i) m_blocks[i].forward(m_states[i], m_states[i + 1]);
  const MatX<S>& last = m_states.back();
  if (m_cfg.dv == 1) {
    m_norm.forward(last, m_z);
  } else {
    m_readout.forward(last, m_xin);
    m_norm.forward(m_xin, m_z);
  }
  m_head.forward(m_z, logits);
}

template <class S>
void DeltaNet<S>::forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& logits) {
  checkShape("ddl::DeltaNet::forwardInference", "X", X, m_cfg.inputDim, -1);
  m_input.forwardInference(X, m_inferX);
  MatX<S>* cur = &m_inferA;
  MatX<S>* next = &m_inferB;
  if (m_cfg.dv == 1)
    cur = &m_inferX;
  else
    m_expand.forwardInference(m_inferX, m_inferA);
  for (auto& block : m_blocks) {
    block.forwardInference(*cur, *next);
    std::swap(cur, next);
    if (next == &m_inferX) next = &m_inferA;  // dv = 1: the input buffer was the first state
  }
  if (m_cfg.dv == 1) {
    m_norm.forwardInference(*cur, m_inferZ);
  } else {
    m_readout.forwardInference(*cur, m_inferZ);
    m_norm.forwardInference(m_inferZ, m_inferZ);
  }
  m_head.forwardInference(m_inferZ, logits);
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
