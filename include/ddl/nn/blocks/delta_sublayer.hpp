#pragma once
// ddl/nn/blocks/delta_sublayer.hpp: one Delta sublayer (docs/spec.md §1-§3), its norm, branch and rewrite,
// with the one forward skeleton of training, inference and decoding and the one backward:
//   x_in = X (dv = 1) | compress(X) (dv > 1);  c = RMSNorm(x_in);  h = F(c);  Y = rewrite(X, x_in, c, h)
// The compressor is the owner's (DeltaBlock has one per block, DeltaTransformerBlock one for two
// sublayers, CC or TC): the owner passes its forward and backward in.
#include <tuple>
#include <utility>

#include "ddl/core/swap_each.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/delta_residual.hpp"
#include "ddl/nn/layers/forward_mode.hpp"
#include "ddl/nn/layers/rms_norm.hpp"

namespace ddl {

// Backward's scratch of a sublayer: (d, N) gradients of x_in, c and h, a term, and (dv > 1) the
// compressor's (d, dv*N) gradient of the state. Dead between calls: sublayers run one after another
// share one (docs/decisions.md, "Scratch shared between blocks").
template <class S>
struct SublayerScratch {
  MatX<S> dXin, dC, dH, dTmp, dXc;
  void swap(SublayerScratch& o) noexcept {
    swapEach(std::tie(dXin, dC, dH, dTmp, dXc), std::tie(o.dXin, o.dC, o.dH, o.dTmp, o.dXc));
  }
};

// The four steps of the header comment, every path's: compress(X, xin) (dv > 1 only), norm(x_in, c),
// branch(c, h), rewrite(X, x_in, c, h, Y); for dv = 1 x_in is X itself (not a copy: views bind to it).
template <class S, class Compress, class Norm, class BranchF, class Rewrite>
void sublayerSteps(Index dv, const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y, MatX<S>& xin, MatX<S>& c,
                   MatX<S>& h, Compress&& compress, Norm&& norm, BranchF&& branch, Rewrite&& rewrite) {
  const auto rest = [&](const auto& in) {
    norm(in, c);
    branch(c, h);
    rewrite(X, in, c, h, Y);
  };
  if (dv == 1) {
    rest(X);
  } else {
    compress(X, xin);
    rest(xin);
  }
}

template <class S, class Branch>
struct DeltaSublayer {
  DeltaSublayer(Index d, Index dv, double normEps, const DeltaResidualOptions& opt, Branch&& b)
      : norm(d, normEps), branch(std::move(b)), delta(d, dv, opt), m_dv(dv) {}

  // X: (d, dv*N), layout of N tokens -> Y: (d, dv*N), with xin, c, h the activations (see sublayerSteps);
  // compress(X, xin) is the owner's compressor in this mode. Train runs the modules' forward, Inference
  // their forwardInference (nn/layers/forward_mode.hpp).
  template <class Compress>
  void forward(ForwardMode mode, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y,
               MatX<S>& xin, MatX<S>& c, MatX<S>& h, Compress&& compress) {
    sublayerSteps<S>(
        m_dv, X, Y, xin, c, h, compress, [&](const auto& in, MatX<S>& cc) { forwardAs(mode, norm, in, cc); },
        [&](const MatX<S>& cc, MatX<S>& hh) { forwardAs(mode, branch, cc, layout, hh); },
        [&](const auto& x, const auto& in, const MatX<S>& cc, const MatX<S>& hh, MatX<S>& y) {
          forwardAs(mode, delta, x, in, cc, hh, y);
        });
  }

  // dY: (d, dv*N) of the last forward -> dX: (d, dv*N) overwritten; parameter gradients accumulate.
  // compressBackward(dXin, dXc) is the owner's compressor backward (dv > 1).
  template <class CompressBackward>
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX, SublayerScratch<S>& s,
                CompressBackward&& compressBackward) {
    delta.backward(dY, dX, s.dXin, s.dC, s.dH);
    branch.backward(s.dH, s.dTmp);
    s.dC += s.dTmp;
    norm.backward(s.dC, s.dTmp);
    s.dXin += s.dTmp;
    if (m_dv == 1) {
      dX += s.dXin;
    } else {
      compressBackward(s.dXin, s.dXc);  // its own buffer: (d, dv*N), not (d, N) like dTmp
      dX += s.dXc;
    }
  }

  // Exchanges the modules' dead buffers with other's, a sublayer of the same shape and options.
  void swapScratch(DeltaSublayer& other) noexcept {
    swapEach(std::tie(norm, branch, delta), std::tie(other.norm, other.branch, other.delta));
  }

  RmsNorm<S> norm;
  Branch branch;
  DeltaResidual<S> delta;

 private:
  Index m_dv;
};

}  // namespace ddl
