#pragma once
// ddl/diag/beta_clamp.hpp: the evaluation intervention beta <- min(beta, c) (docs/claims.md, "The clamp
// intervention") on whole blocks of a net: every gated sublayer of block b (one in DeltaNet and
// ConvDeltaNet, the attention and SwiGLU sublayers in DeltaLM) through DeltaResidual::setBetaClamp.
//   ddl::setBlockBetaClamp(net, 2, 1.0);   // block 2: no reflection
//   ... evaluate ...
//   ddl::clearBetaClamps(net);             // every block back to its own gate
// The clamp is evaluation state, not a parameter: it is neither saved nor trained (its slope is 0 where it binds).
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/diag/gated_sublayers.hpp"

namespace ddl {

// Blocks of net (DeltaNet depth, ConvDeltaNet all stages' blocks, DeltaLM depth).
template <class Net>
Index blockCount(const Net& net) {
  return static_cast<Index>(net.blocks().size());
}

// Clamps every gated sublayer of block `block` at c > 0 (+inf removes the clamp). Throws ValueError for
// an additive net (no gate), a block outside [0, blockCount), or c <= 0 / NaN.
template <class Net>
void setBlockBetaClamp(Net& net, Index block, double c) {
  const char* fn = "ddl::setBlockBetaClamp";
  require(gatedSublayerCount(net) > 0, fn, "the net's residual is additive: it has no gate to clamp");
  require(block >= 0 && block < blockCount(net), fn, "block ", block, " does not exist (the net has ",
          blockCount(net), " blocks, 0 to ", blockCount(net) - 1, ")");
  require(c > 0, fn, "the clamp must be > 0, got ", c);
  for (std::size_t i = 0; i < gatedSublayerCount(net); ++i)
    if (gatedBlock(net, i) == block)
      // The models hand out their residuals read-only; net itself is not const here, so writing this
      // evaluation setting through the reference is well defined and leaves every parameter as it was.
      const_cast<std::remove_const_t<std::remove_reference_t<decltype(gatedResidual(net, i))>>&>(gatedResidual(net, i))
          .setBetaClamp(c);
}

// Removes every clamp of net (nothing for an additive net).
template <class Net>
void clearBetaClamps(Net& net) {
  for (Index b = 0; b < blockCount(net) && gatedSublayerCount(net) > 0; ++b)
    setBlockBetaClamp(net, b, std::numeric_limits<double>::infinity());
}

}  // namespace ddl
