#pragma once
// ddl/diag/gated_sublayers.hpp: the gated sublayers of a net as the gate audit sees them. Sublayer i
// has a DeltaResidual (the caches of its last forward), an input state X and an output state Y of that
// forward, each (d, dv*N), a label for the printed table, and the block and stage of its audit row.
// Two kinds of net provide them:
//   one Delta sublayer per block (DeltaNet, ConvDeltaNet): blocks()[i].residual(), blockInput(i),
//     blockOutput(i); label "block <i>", block i, stage stageOfBlock(i) when the net has it, else 0;
//   several per block (DeltaLM: attention, then SwiGLU): sublayerCount(), sublayerResidual(i),
//     sublayerInput(i), sublayerOutput(i), sublayerLabel(i), sublayerBlock(i), sublayerStage(i).
// A net whose config().block.residual.residual is ResidualKind::Additive has none (no gate to audit).
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddl/core/detects.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/delta_residual.hpp"

namespace ddl {

namespace detail {
template <class Net>
using SublayersProbe = decltype(std::declval<const Net&>().sublayerResidual(std::size_t{}));
template <class Net>
using HasSublayers = Detects<SublayersProbe, Net>;
template <class Net>
using BlockStagesProbe = decltype(std::declval<const Net&>().stageOfBlock(std::size_t{}));
template <class Net>
using HasBlockStages = Detects<BlockStagesProbe, Net>;
}  // namespace detail

// Number of gated sublayers of net: 0 for the additive baseline.
template <class Net>
std::size_t gatedSublayerCount(const Net& net) {
  if (net.config().block.residual.residual == ResidualKind::Additive) return 0;
  if constexpr (detail::HasSublayers<Net>::value)
    return net.sublayerCount();
  else
    return net.blocks().size();
}

template <class Net>
decltype(auto) gatedResidual(const Net& net, std::size_t i) {
  if constexpr (detail::HasSublayers<Net>::value)
    return net.sublayerResidual(i);
  else
    return net.blocks()[i].residual();
}

// The input state of sublayer i in the last forward.
template <class Net>
decltype(auto) gatedInput(const Net& net, std::size_t i) {
  if constexpr (detail::HasSublayers<Net>::value)
    return net.sublayerInput(i);
  else
    return net.blockInput(i);
}

// The output state of sublayer i in the last forward.
template <class Net>
decltype(auto) gatedOutput(const Net& net, std::size_t i) {
  if constexpr (detail::HasSublayers<Net>::value)
    return net.sublayerOutput(i);
  else
    return net.blockOutput(i);
}

template <class Net>
std::string gatedLabel(const Net& net, std::size_t i) {
  if constexpr (detail::HasSublayers<Net>::value)
    return net.sublayerLabel(i);
  else
    return "block " + std::to_string(i);
}

// The block of the audit row of sublayer i (blocks.<block> in the parameter names).
template <class Net>
Index gatedBlock(const Net& net, std::size_t i) {
  if constexpr (detail::HasSublayers<Net>::value)
    return net.sublayerBlock(i);
  else
    return static_cast<Index>(i);
}

// The stage of the audit row of sublayer i: ConvDeltaNet's stage of the block, DeltaLM's sublayer
// within the block (0 attention, 1 SwiGLU), else 0.
template <class Net>
Index gatedStage(const Net& net, std::size_t i) {
  if constexpr (detail::HasSublayers<Net>::value)
    return net.sublayerStage(i);
  else if constexpr (detail::HasBlockStages<Net>::value)
    return net.stageOfBlock(i);
  else
    return 0;
}

// The labels of every gated sublayer of net, in order (empty for the additive baseline).
template <class Net>
std::vector<std::string> gatedLabels(const Net& net) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < gatedSublayerCount(net); ++i) out.push_back(gatedLabel(net, i));
  return out;
}

}  // namespace ddl
