#pragma once
// ddl/nn/models/conv_delta_net.hpp: the image classifier of docs/spec.md §4 (configuration: conv_delta_net_config.hpp).
//   images (C*H*W, B), one CHW column per image -> pixels as columns (C, B*H*W)
//   -> stem conv k x k (C -> widths[0]) -> expand to dv -> per stage: [transition] + DeltaConvBlocks
//   -> readout CC (dv > 1) -> RMSNorm per pixel -> global average pool per image (widths.back(), B)
//   -> Linear head -> logits (classes, B).
// DeltaConvBlock = DeltaBlock<S, ConvBranch<S>>: per-pixel k, beta, v (the beta and v heads are 1x1
// convolutions, i.e. the per-token Linear of DeltaResidual), every residual option of the MLP net.
// With ResidualKind::Additive the same class is the plain pre-norm residual CNN.
// Parameter names: stem.*, expand.weight (EC), blocks.<i>.* (numbered over all stages),
// transitions.<s-1>.* (before stage s), readout.* (dv > 1), norm.weight, head.*.
// Initialisation from one seed; draw order: stem, then per stage its transition and blocks, head.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/compressor.hpp"
#include "ddl/nn/layers/conv2d.hpp"
#include "ddl/nn/blocks/conv_branch.hpp"
#include "ddl/nn/models/conv_delta_net_config.hpp"
#include "ddl/nn/blocks/delta_block.hpp"
#include "ddl/nn/blocks/expansion.hpp"
#include "ddl/nn/layers/global_avg_pool.hpp"
#include "ddl/nn/layers/linear.hpp"
#include "ddl/nn/layers/rms_norm.hpp"
#include "ddl/nn/blocks/stage_transition.hpp"

namespace ddl {

template <class S>
using DeltaConvBlock = DeltaBlock<S, ConvBranch<S>>;

template <class S>
class ConvDeltaNet {
 public:
  explicit ConvDeltaNet(const ConvDeltaNetConfig& config, std::uint64_t seed = 0);

  // Re-initialises every parameter exactly as a new net of this configuration and seed has it (RMSNorm
  // gains, compressor and expansion weights included, which are not drawn) and clears the gradients.
  void init(std::uint64_t seed);

 private:
  // The seeded draws of a freshly constructed net.
  void drawParams(std::uint64_t seed) {
    Rng rng(seed);
    m_stem.init(rng);
    std::size_t b = 0;
    for (Index s = 0; s < m_cfg.stages(); ++s) {
      if (s > 0) m_transitions[static_cast<std::size_t>(s - 1)].init(rng);
      for (Index i = 0; i < m_cfg.depths[static_cast<std::size_t>(s)]; ++i) m_blocks[b++].init(rng);
    }
    m_head.init(rng);
  }

 public:

  // X: (channels*height*width, B), one CHW image per column -> logits: (classes, B)
  void forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& logits);

  // Same logits as forward, bit for bit; writes none of the caches backward reads and allocates nothing
  // once its buffers have the batch's shapes (two states per width, used in turn).
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& logits);

  // dLogits: (classes, B) -> parameter gradients accumulate (the input needs no gradient).
  void backward(const Eigen::Ref<const MatX<S>>& dLogits);

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    m_stem.visitParams(joinName(prefix, "stem"), f);
    if (m_cfg.dv > 1) m_expand.visitParams(joinName(prefix, "expand"), f);
    for (std::size_t i = 0; i < m_transitions.size(); ++i)
      m_transitions[i].visitParams(joinName(prefix, "transitions." + std::to_string(i)), f);
    for (std::size_t i = 0; i < m_blocks.size(); ++i)
      m_blocks[i].visitParams(joinName(prefix, "blocks." + std::to_string(i)), f);
    if (m_cfg.dv > 1) m_readout.visitParams(joinName(prefix, "readout"), f);
    m_norm.visitParams(joinName(prefix, "norm"), f);
    m_head.visitParams(joinName(prefix, "head"), f);
  }

  const ConvDeltaNetConfig& config() const { return m_cfg; }
  Index inputDim() const { return m_cfg.inputDim(); }
  Index classes() const { return m_cfg.classes; }
  // All blocks of all stages in order (the gate audit walks them like a DeltaNet's).
  const std::vector<DeltaConvBlock<S>>& blocks() const { return m_blocks; }
  Index stageOfBlock(std::size_t i) const { return m_stageOfBlock.at(i); }
  // Input and output (width, dv*pixels) of block i in the last forward (what the gate audit measures
  // on); the s transitions before stage s sit between the blocks in the state list.
  const MatX<S>& blockInput(std::size_t i) const { return m_states.at(i + static_cast<std::size_t>(stageOfBlock(i))); }
  const MatX<S>& blockOutput(std::size_t i) const {
    return m_states.at(i + static_cast<std::size_t>(stageOfBlock(i)) + 1);
  }

  // images (C*H*W, B) CHW per column -> pixels (C, B*H*W), column (b*H + y)*W + x.
  static void imagesToPixels(const Eigen::Ref<const MatX<S>>& X, Index C, Index HW, MatX<S>& P) {
    const Index B = X.cols();
    P.resize(C, B * HW);
    for (Index b = 0; b < B; ++b)
      for (Index c = 0; c < C; ++c) P.row(c).segment(b * HW, HW) = X.col(b).segment(c * HW, HW).transpose();
  }

 private:
  static const ConvDeltaNetConfig& validated(const ConvDeltaNetConfig& c) {
    c.validate();
    return c;
  }
  void imagesToPixels(const Eigen::Ref<const MatX<S>>& X, MatX<S>& P) const {
    imagesToPixels(X, m_cfg.channels, m_cfg.height * m_cfg.width, P);
  }
  ConvDeltaNetConfig m_cfg;
  Conv2d<S> m_stem;
  Expansion<S> m_expand;
  std::vector<StageTransition<S>> m_transitions;
  std::vector<DeltaConvBlock<S>> m_blocks;
  std::vector<Index> m_stageOfBlock;
  Compressor<S> m_readout;
  RmsNorm<S> m_norm;
  GlobalAvgPool<S> m_pool;
  Linear<S> m_head;
  std::vector<MatX<S>> m_states;  // inputs and outputs of transitions and blocks in forward order
  MatX<S> m_pixels, m_x, m_xin, m_z, m_pooled;
  MatX<S> m_dPooled, m_dz, m_dx;
  std::vector<MatX<S>> m_dStage;  // two gradient buffers per stage (backward)
  std::vector<MatX<S>> m_inferStates;  // forwardInference: two per stage
  MatX<S> m_inferPixels, m_inferX, m_inferZ, m_inferPooled;
};

template <class S>
ConvDeltaNet<S>::ConvDeltaNet(const ConvDeltaNetConfig& config, std::uint64_t seed)
    : m_cfg(validated(config)),
      m_stem(config.channels, config.widths[0], config.stemKernel, config.stemStride, config.stemKernel / 2),
      m_expand(config.widths[0], config.dv, config.learnedExpansion),
      m_readout(config.widths.back(), config.dv, config.block.compressor, config.block.compressorKernel),
      m_norm(config.widths.back(), config.finalNormEps), m_head(config.widths.back(), config.classes) {
  const Index stages = config.stages();
  m_transitions.reserve(static_cast<std::size_t>(stages));
  m_blocks.reserve(static_cast<std::size_t>(config.totalBlocks()));
  for (Index s = 0; s < stages; ++s) {
    const Index w = config.widths[static_cast<std::size_t>(s)];
    if (s > 0)
      m_transitions.emplace_back(config.widths[static_cast<std::size_t>(s - 1)], w, config.dv, config.block.compressor,
                                 config.block.compressorKernel, config.learnedExpansion, config.block.normEps);
    DeltaBlockOptions opt = config.block;
    opt.hidden = config.branchRatio * w;
    for (Index i = 0; i < config.depths[static_cast<std::size_t>(s)]; ++i) {
      m_blocks.emplace_back(w, config.dv, opt);
      m_stageOfBlock.push_back(s);
    }
  }
  m_states.resize(m_blocks.size() + m_transitions.size() + 1);
  m_dStage.resize(2 * static_cast<std::size_t>(stages));
  drawParams(seed);
}

template <class S>
void ConvDeltaNet<S>::init(std::uint64_t seed) {
  ConvDeltaNet fresh(m_cfg, seed);
  assignParams(*this, fresh);
}

template <class S>
void ConvDeltaNet<S>::forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& logits) {
  checkShape("ddl::ConvDeltaNet::forward", "X", X, m_cfg.inputDim(), -1);
  const Index B = X.cols();
  TokenLayout layout = TokenLayout::image(B, m_cfg.height, m_cfg.width);
  imagesToPixels(X, m_pixels);
  const TokenLayout input = layout;
  layout = m_stem.outputLayout(input);
  if (m_cfg.dv == 1) {
    m_stem.forward(m_pixels, input, m_states[0]);
  } else {
    m_stem.forward(m_pixels, input, m_x);
    m_expand.forward(m_x, m_states[0]);
  }
  std::size_t node = 0, b = 0;
  for (Index s = 0; s < m_cfg.stages(); ++s) {
    if (s > 0) {
      StageTransition<S>& t = m_transitions[static_cast<std::size_t>(s - 1)];
      t.forward(m_states[node], layout, m_states[node + 1]);
      layout = t.outputLayout(layout);
      ++node;
    }
    for (Index i = 0; i < m_cfg.depths[static_cast<std::size_t>(s)]; ++i, ++b, ++node) {
      m_blocks[b].forward(m_states[node], layout, m_states[node + 1]);
    }
  }
  const MatX<S>& last = m_states.back();
  if (m_cfg.dv == 1) {
    m_norm.forward(last, m_z);
  } else {
    m_readout.forward(last, m_xin);
    m_norm.forward(m_xin, m_z);
  }
  m_pool.forward(m_z, layout, m_pooled);
  m_head.forward(m_pooled, logits);
}

template <class S>
void ConvDeltaNet<S>::forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& logits) {
  checkShape("ddl::ConvDeltaNet::forwardInference", "X", X, m_cfg.inputDim(), -1);
  const Index B = X.cols();
  const TokenLayout input = TokenLayout::image(B, m_cfg.height, m_cfg.width);
  imagesToPixels(X, m_inferPixels);
  TokenLayout layout = m_stem.outputLayout(input);
  const Index stages = m_cfg.stages();
  m_inferStates.resize(static_cast<std::size_t>(2 * stages));  // [2s], [2s+1]: the states of stage s
  MatX<S>* cur = &m_inferStates[0];
  if (m_cfg.dv == 1) {
    m_stem.forwardInference(m_inferPixels, input, *cur);
  } else {
    m_stem.forwardInference(m_inferPixels, input, m_inferX);
    m_expand.forwardInference(m_inferX, *cur);
  }
  std::size_t b = 0;
  for (Index s = 0; s < stages; ++s) {
    MatX<S>* a = &m_inferStates[static_cast<std::size_t>(2 * s)];
    MatX<S>* other = &m_inferStates[static_cast<std::size_t>(2 * s + 1)];
    if (s > 0) {
      StageTransition<S>& t = m_transitions[static_cast<std::size_t>(s - 1)];
      t.forwardInference(*cur, layout, *a);
      layout = t.outputLayout(layout);
      cur = a;
    }
    for (Index i = 0; i < m_cfg.depths[static_cast<std::size_t>(s)]; ++i, ++b) {
      MatX<S>* next = cur == a ? other : a;
      m_blocks[b].forwardInference(*cur, layout, *next);
      cur = next;
    }
  }
  if (m_cfg.dv == 1) {
    m_norm.forwardInference(*cur, m_inferZ);
  } else {
    m_readout.forwardInference(*cur, m_inferZ);
    m_norm.forwardInference(m_inferZ, m_inferZ);
  }
  m_pool.forwardInference(m_inferZ, layout, m_inferPooled);
  m_head.forwardInference(m_inferPooled, logits);
}

template <class S>
void ConvDeltaNet<S>::backward(const Eigen::Ref<const MatX<S>>& dLogits) {
  m_head.backward(dLogits, m_dPooled);
  m_pool.backward(m_dPooled, m_dz);
  // Stage s ping-pongs between its own two gradient buffers, m_dStage[2s] and m_dStage[2s+1], and
  // its transition writes into stage s-1's first one: every buffer keeps one shape from step to
  // step (one shared pair would be resized between stage widths on every backward).
  const std::size_t last = static_cast<std::size_t>(m_cfg.stages() - 1);
  MatX<S>* cur = &m_dStage[2 * last];
  if (m_cfg.dv == 1) {
    m_norm.backward(m_dz, *cur);
  } else {
    m_norm.backward(m_dz, m_dz);
    m_readout.backward(m_dz, *cur);
  }
  std::size_t b = m_blocks.size();
  for (Index s = m_cfg.stages(); s-- > 0;) {
    const std::size_t su = static_cast<std::size_t>(s);
    MatX<S>* other = cur == &m_dStage[2 * su] ? &m_dStage[2 * su + 1] : &m_dStage[2 * su];
    for (Index i = 0; i < m_cfg.depths[su]; ++i) {
      m_blocks[--b].backward(*cur, *other);
      std::swap(cur, other);
    }
    if (s > 0) {
      m_transitions[su - 1].backward(*cur, m_dStage[2 * (su - 1)]);
      cur = &m_dStage[2 * (su - 1)];
    }
  }
  if (m_cfg.dv > 1) {
    m_expand.backward(*cur, m_dx);
    m_stem.backwardParamsOnly(m_dx);
  } else {
    m_stem.backwardParamsOnly(*cur);
  }
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class DeltaBlock<float, ConvBranch<float>>;
extern template class DeltaBlock<double, ConvBranch<double>>;
#endif
#if DDL_EXTERN_TEMPLATES
extern template class ConvDeltaNet<float>;
extern template class ConvDeltaNet<double>;
#endif

}  // namespace ddl
