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
// Initialisation from one seed; draw order: stem, then per stage its transition and blocks, head, the
// structured readout's kernel (dv > 1).
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
#include "ddl/nn/layers/forward_mode.hpp"
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

  // Re-initialises every parameter as a new net of this configuration and seed has it and clears the
  // gradients (core/param.hpp).
  void init(std::uint64_t seed) { reinitialize(*this, seed); }

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
    if (m_cfg.dv > 1) m_readout.init(rng);
  }

 public:

  // X: (channels*height*width, B), one CHW image per column -> logits: (classes, B)
  void forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& logits) {
    run("ddl::ConvDeltaNet::forward", X, logits, m_acts, ForwardMode::Train);
  }

  // Same logits as forward, bit for bit; writes none of the caches backward reads and allocates nothing
  // once its buffers have the batch's shapes (two states per width, used in turn).
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& logits) {
    run("ddl::ConvDeltaNet::forwardInference", X, logits, m_inferActs, ForwardMode::Inference);
  }

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
  const MatX<S>& blockInput(std::size_t i) const {
    return m_acts.states.at(i + static_cast<std::size_t>(stageOfBlock(i)));
  }
  const MatX<S>& blockOutput(std::size_t i) const {
    return m_acts.states.at(i + static_cast<std::size_t>(stageOfBlock(i)) + 1);
  }

  // images (C*H*W, B) CHW per column -> pixels (C, B*H*W), column (b*H + y)*W + x.
  static void imagesToPixels(const Eigen::Ref<const MatX<S>>& X, Index C, Index HW, MatX<S>& P) {
    const Index B = X.cols();
    P.resize(C, B * HW);
    for (Index b = 0; b < B; ++b)
      for (Index c = 0; c < C; ++c) P.row(c).segment(b * HW, HW) = X.col(b).segment(c * HW, HW).transpose();
  }

 private:
  void imagesToPixels(const Eigen::Ref<const MatX<S>>& X, MatX<S>& P) const {
    imagesToPixels(X, m_cfg.channels, m_cfg.height * m_cfg.width, P);
  }

  // What one forward computes; the layers keep views of them for backward.
  struct Activations {
    MatX<S> pixels;  // (channels, B*H*W) the input images as pixels
    MatX<S> x;       // (widths[0], N0) the stem's output; dv > 1 only (for dv = 1 it is the first state)
    // (width, dv*pixels) the inputs and outputs of transitions and blocks in forward order (Train);
    // Inference uses two per stage, in turn: [2s] and [2s + 1] hold the states of stage s
    std::vector<MatX<S>> states;
    MatX<S> xin;     // (widths.back(), N) the readout CC(last state); dv > 1 only
    MatX<S> z;       // (widths.back(), N) RMSNorm per pixel
    MatX<S> pooled;  // (widths.back(), B) the global average pool, the head's input
  };

  // The forward of both modes; fn names the public caller in errors.
  void run(const char* fn, const Eigen::Ref<const MatX<S>>& X, MatX<S>& logits, Activations& a, ForwardMode mode);

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
  Activations m_acts;       // of the last forward, read by backward and the audit
  Activations m_inferActs;  // of the last forwardInference
  MatX<S> m_dPooled, m_dz, m_dx;
  std::vector<MatX<S>> m_dStage;  // two gradient buffers per stage (backward)
};

template <class S>
ConvDeltaNet<S>::ConvDeltaNet(const ConvDeltaNetConfig& config, std::uint64_t seed)
    : m_cfg(validated(config)),
      m_stem(config.channels, config.widths[0], config.stemKernel, config.stemStride, config.stemKernel / 2),
      m_expand(config.widths[0], config.dv, config.learnedExpansion),
      m_readout(config.widths.back(), config.dv, config.block.compressor, config.block.compressorKernel,
                config.block.compressorReadInit),
      m_norm(config.widths.back(), config.finalNormEps), m_head(config.widths.back(), config.classes) {
  const Index stages = config.stages();
  m_transitions.reserve(static_cast<std::size_t>(stages));
  m_blocks.reserve(static_cast<std::size_t>(config.totalBlocks()));
  for (Index s = 0; s < stages; ++s) {
    const Index w = config.widths[static_cast<std::size_t>(s)];
    if (s > 0)
      m_transitions.emplace_back(config.widths[static_cast<std::size_t>(s - 1)], w, config.dv, config.block.compressor,
                                 config.block.compressorKernel, config.block.compressorReadInit,
                                 config.learnedExpansion, config.block.normEps);
    DeltaBlockOptions opt = config.block;
    opt.hidden = config.branchRatio * w;
    for (Index i = 0; i < config.depths[static_cast<std::size_t>(s)]; ++i) {
      m_blocks.emplace_back(w, config.dv, opt);
      m_stageOfBlock.push_back(s);
    }
  }
  m_acts.states.resize(m_blocks.size() + m_transitions.size() + 1);
  m_inferActs.states.resize(2 * static_cast<std::size_t>(stages));
  m_dStage.resize(2 * static_cast<std::size_t>(stages));
  drawParams(seed);
}

template <class S>
void ConvDeltaNet<S>::run(const char* fn, const Eigen::Ref<const MatX<S>>& X, MatX<S>& logits, Activations& a,
                          ForwardMode mode) {
  checkShape(fn, "X", X, m_cfg.inputDim(), -1);
  const TokenLayout input = TokenLayout::image(X.cols(), m_cfg.height, m_cfg.width);
  imagesToPixels(X, a.pixels);
  TokenLayout layout = m_stem.outputLayout(input);
  // The buffer of state `node` (in forward order), the k-th state of stage s: one per node (Train), or
  // the two of stage s in turn (Inference: every buffer keeps one width).
  auto state = [&](std::size_t node, Index s, Index k) -> MatX<S>& {
    return mode == ForwardMode::Train ? a.states[node] : a.states[static_cast<std::size_t>(2 * s + k % 2)];
  };
  MatX<S>* cur = &state(0, 0, 0);
  forwardAs(mode, m_stem, a.pixels, input, m_cfg.dv == 1 ? *cur : a.x);
  if (m_cfg.dv > 1) forwardAs(mode, m_expand, a.x, *cur);
  std::size_t node = 0, b = 0;
  for (Index s = 0; s < m_cfg.stages(); ++s) {
    Index k = s == 0 ? 1 : 0;  // states of stage s so far (stage 0 starts with the stem's output)
    if (s > 0) {
      StageTransition<S>& t = m_transitions[static_cast<std::size_t>(s - 1)];
      MatX<S>& next = state(++node, s, k++);
      forwardAs(mode, t, *cur, layout, next);
      layout = t.outputLayout(layout);
      cur = &next;
    }
    for (Index i = 0; i < m_cfg.depths[static_cast<std::size_t>(s)]; ++i, ++b) {
      MatX<S>& next = state(++node, s, k++);
      forwardAs(mode, m_blocks[b], *cur, layout, next);
      cur = &next;
    }
  }
  if (m_cfg.dv > 1) forwardAs(mode, m_readout, *cur, a.xin);
  forwardAs(mode, m_norm, m_cfg.dv == 1 ? *cur : a.xin, a.z);
  forwardAs(mode, m_pool, a.z, layout, a.pooled);
  forwardAs(mode, m_head, a.pooled, logits);
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
