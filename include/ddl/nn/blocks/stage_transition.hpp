#pragma once
// ddl/nn/blocks/stage_transition.hpp: the step between two stages of an image net (docs/spec.md §4): it acts on the
// compressed state and re-expands.
//   X: (cin, dv*N) -> x_in = CC(X) (dv > 1; X itself for dv = 1) -> c = RMSNorm(x_in)
//   -> y = conv 3x3 stride 2, padding 1 (cin -> cout): (cout, N') with N' the tokens of
//   outputLayout(layout) (H' = ceil(H/2), W' = ceil(W/2)) -> Y = expand(y): (cout, dv*N').
// Parameter names: compress.* (dv > 1), norm.weight, conv.{weight,bias}, expand.weight (EC, dv > 1).
#include <optional>
#include <string>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/blocks/compressor.hpp"
#include "ddl/nn/layers/conv2d.hpp"
#include "ddl/nn/layers/forward_mode.hpp"
#include "ddl/nn/blocks/expansion.hpp"
#include "ddl/nn/layers/rms_norm.hpp"

namespace ddl {

template <class S>
class StageTransition {
 public:
  StageTransition(Index cin, Index cout, Index dv, CompressorKind compressor, Index compressorKernel,
                  std::optional<double> compressorReadInit, bool learnedExpansion, double normEps)
      : m_cin(cin), m_cout(cout), m_dv(dv), m_compress(cin, dv, compressor, compressorKernel, compressorReadInit),
        m_norm(cin, normEps),
        m_conv(cin, cout, 3, 2, 1), m_expand(cout, dv, learnedExpansion) {}

  // Draw order: the conv, then the structured compressor's kernel (dv > 1).
  void init(Rng& rng) {
    m_conv.init(rng);
    if (m_dv > 1) m_compress.init(rng);
  }

  TokenLayout outputLayout(const TokenLayout& in) const { return m_conv.outputLayout(in); }

  // X: (cin, dv*N), N = layout.tokens() -> Y: (cout, dv*N'), N' = outputLayout(layout).tokens().
  void forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
    run("ddl::StageTransition::forward", X, layout, Y, m_acts, ForwardMode::Train);
  }

  // Same Y as forward, bit for bit; keeps nothing backward reads (buffers of its own). Y must not alias X.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
    run("ddl::StageTransition::forwardInference", X, layout, Y, m_inferActs, ForwardMode::Inference);
  }

  // dY: (cout, dv*N') -> dX: (cin, dv*N) overwritten; parameter gradients accumulate.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX);

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    if (m_dv > 1) m_compress.visitParams(joinName(prefix, "compress"), f);
    m_norm.visitParams(joinName(prefix, "norm"), f);
    m_conv.visitParams(joinName(prefix, "conv"), f);
    if (m_dv > 1) m_expand.visitParams(joinName(prefix, "expand"), f);
  }

 private:
  // What one forward computes and backward reads (the layers keep views of them).
  struct Activations {
    MatX<S> xin;  // (cin, N) CC(X); dv > 1 only (for dv = 1 it is X itself)
    MatX<S> c;    // (cin, N) RMSNorm(x_in)
    MatX<S> y;    // (cout, N') the strided conv's output; dv > 1 only (for dv = 1 it is Y itself)
  };

  // The forward of both modes; fn names the public caller in errors.
  void run(const char* fn, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y,
           Activations& a, ForwardMode mode);

  Index m_cin, m_cout, m_dv;
  Compressor<S> m_compress;
  RmsNorm<S> m_norm;
  Conv2d<S> m_conv;
  Expansion<S> m_expand;
  Activations m_acts;       // of the last forward, read by backward
  Activations m_inferActs;  // of the last forwardInference
  MatX<S> m_dy, m_dC;
};

template <class S>
void StageTransition<S>::run(const char* fn, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout,
                             MatX<S>& Y, Activations& a, ForwardMode mode) {
  if (X.rows() != m_cin || X.cols() != m_dv * layout.tokens())
    throw ShapeError(message(fn, "X has shape ", shapeOf(X), ", expected (", m_cin, ", ", m_dv, "*", layout.tokens(),
                             ") for the layout ", toString(layout)));
  if (m_dv > 1) forwardAs(mode, m_compress, X, a.xin);
  forwardAs(mode, m_norm, m_dv == 1 ? X : Eigen::Ref<const MatX<S>>(a.xin), a.c);
  forwardAs(mode, m_conv, a.c, layout, m_dv == 1 ? Y : a.y);
  if (m_dv > 1) forwardAs(mode, m_expand, a.y, Y);
}

template <class S>
void StageTransition<S>::backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) {
  if (m_dv == 1) {
    m_conv.backward(dY, m_dC);
    m_norm.backward(m_dC, dX);
  } else {
    m_expand.backward(dY, m_dy);
    m_conv.backward(m_dy, m_dC);
    m_norm.backward(m_dC, m_dC);
    m_compress.backward(m_dC, dX);
  }
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class StageTransition<float>;
extern template class StageTransition<double>;
#endif

}  // namespace ddl
