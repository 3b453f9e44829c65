#pragma once
// ddl/nn/layers/token_conv.hpp: a causal depthwise convolution over the tokens of each sequence, PyTorch's
// Conv1d(C, C, K, groups=C, padding=K-1) with the outputs past the sequence end dropped.
//
//   out[c, t] = sum_{s<K} w[c, s] x[c, t - K + 1 + s]  (+ b[c])
//
// Positions before the sequence start count as zero, so no token sees a later one or another
// sequence of the batch; w[:, K-1] multiplies the current token. Layout: sequence(B, T), column b*T + t
// (core/token_layout.hpp); x, out: (C, B*T).
//   backward:  dx[c, t] = sum_{s<K, t+K-1-s < T} w[c, s] dout[c, t + K - 1 - s]
//              dw[c, s] += sum_{b, t >= K-1-s} dout[c, t] x[c, t - K + 1 + s],  db[c] += sum_{b, t} dout[c, t]
// Parameters: "weight" [C, 1, K] (held as (C, K)), "bias" [C] when built with one (no decay).
// The three loops (forward, dx, dw) are free functions in ddl::detail, shared with the expanded-state
// convolutions of nn/layers/state_conv.hpp and nn/blocks/token_compressor.hpp.
#include <algorithm>
#include <string>
#include <vector>

#include "ddl/core/alias.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/reduce.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/core/view.hpp"
#include "ddl/nn/layers/init.hpp"
#include "ddl/nn/layers/weight_and_bias.hpp"

namespace ddl {
namespace detail {

// The kernels of a causal depthwise convolution over the columns of (C, M) matrices that hold M / T
// whole sequences of T tokens (column b*T + t); w: (C, K), w.col(K-1) multiplies the current token.
// out, dx and acc are sized by the caller; out, dx may be column blocks of a larger matrix.

// The taps of both directions: out.col(n) (+)= sum_{lag < K} w.col(K-1-lag) ⊙ x.col(n ∓ lag) over the lags
// that stay in n's sequence, t = n % T: n - lag, lag <= t (Past, the forward) or n + lag, t + lag < T (Future,
// the input gradient). Columns are independent: split over OpenMP threads above kParallelMinWork, the same
// bits on any thread count.
enum class CausalTaps { Past, Future };
template <CausalTaps Dir, class S>
void causalConvTaps(const Eigen::Ref<const MatX<S>>& w, const Eigen::Ref<const MatX<S>>& x, Index T,
                    Eigen::Ref<MatX<S>> out, bool accumulate) {
  const Index M = x.cols(), K = w.cols();
  DDL_OMP(parallel for schedule(static) if (x.rows() * K * M >= kParallelMinWork))
  for (Index n = 0; n < M; ++n) {
    const Index t = n % T;
    const Index lags = Dir == CausalTaps::Past ? std::min(K - 1, t) : std::min(K - 1, T - 1 - t);
    if (accumulate)
      out.col(n) += w.col(K - 1).cwiseProduct(x.col(n));
    else
      out.col(n) = w.col(K - 1).cwiseProduct(x.col(n));
    for (Index lag = 1; lag <= lags; ++lag)
      out.col(n) += w.col(K - 1 - lag).cwiseProduct(x.col(Dir == CausalTaps::Past ? n - lag : n + lag));
  }
}

// out.col(n) = sum_{lag < K, lag <= t} w.col(K-1-lag) ⊙ x.col(n - lag), t = n % T (added to out when
// accumulate).
template <class S>
void causalConvForward(const Eigen::Ref<const MatX<S>>& w, const Eigen::Ref<const MatX<S>>& x, Index T,
                       Eigen::Ref<MatX<S>> out, bool accumulate = false) {
  causalConvTaps<CausalTaps::Past, S>(w, x, T, out, accumulate);
}

// The input gradient of causalConvForward: dx.col(n) = sum_{lag < K, t + lag < T} w.col(K-1-lag) ⊙
// dOut.col(n + lag) (added to dx when accumulate). Each column reads its own sequence only.
template <class S>
void causalConvBackwardInput(const Eigen::Ref<const MatX<S>>& w, const Eigen::Ref<const MatX<S>>& dOut, Index T,
                             Eigen::Ref<MatX<S>> dx, bool accumulate = false) {
  causalConvTaps<CausalTaps::Future, S>(w, dOut, T, dx, accumulate);
}

// The weight gradient: acc(c, s) += sum_{b, t >= K-1-s} dOut(c, b*T + t) x(c, b*T + t - K + 1 + s),
// acc: (C, K) in the wide type (core/reduce.hpp). One thread; one pass over the columns (each dOut column
// meets the K x columns it pairs with while they are in cache), and every acc(c, s) is its own sum in
// the fixed order b, then t ascending (addRowDots' arithmetic), so callers may split the rows over threads.
template <class S>
void addCausalConvWeightGrad(const Eigen::Ref<const MatX<S>>& dOut, const Eigen::Ref<const MatX<S>>& x, Index T,
                             Eigen::Ref<MatX<SumType<S>>> acc) {
  using A = SumType<S>;
  const Index K = acc.cols(), B = dOut.cols() / T;
  for (Index b = 0; b < B; ++b)
    for (Index t = 0; t < T; ++t) {
      const Index n = b * T + t;
      for (Index lag = 0; lag < K && lag <= t; ++lag)
        acc.col(K - 1 - lag).array() +=
            dOut.col(n).template cast<A>().array() * x.col(n - lag).template cast<A>().array();
    }
}

}  // namespace detail

// Parameters (WeightAndBias): "weight" [C, 1, K], then "bias" [C] when present. init draws the
// weight column-major as a (C, K) matrix, fan_in = K as torch.nn.Conv1d(groups=C), then the bias.
template <class S>
class TokenConv : public WeightAndBias<S> {
  using Base = WeightAndBias<S>;
  using Base::m_hasBias;
  using Base::m_W;
  using Base::m_b;

 public:
  // channels, kernel >= 1. Parameters start at zero until init() or initIdentity().
  explicit TokenConv(Index channels, Index kernel = 4, bool bias = false)
      : Base("ddl::TokenConv", bias), m_C(channels), m_K(kernel) {
    require(channels >= 1 && kernel >= 1, "ddl::TokenConv", "channels and kernel must be >= 1, got channels = ",
            channels, ", kernel = ", kernel);
    m_W = Param<S>(std::vector<Index>{channels, 1, kernel}, /*withDecay=*/true);
    if (bias) m_b = Param<S>(std::vector<Index>{channels}, /*withDecay=*/false);
  }

  // w[:, K-1] = 1, everything else 0: out = x exactly (each token copies itself).
  void initIdentity();

  // x: (C, B*T) under layout sequence(B, T) -> out: (C, B*T). Keeps a view of x for backward: x must
  // stay alive and unchanged until then. out must not alias x.
  void forward(const Eigen::Ref<const MatX<S>>& x, const TokenLayout& layout, MatX<S>& out);

  // Same out as forward, bit for bit; caches nothing (backward still refers to the last forward).
  void forwardInference(const Eigen::Ref<const MatX<S>>& x, const TokenLayout& layout, MatX<S>& out) const {
    convolve("ddl::TokenConv::forwardInference", x, layout, out);
  }

  // dOut: (C, B*T) of the last forward -> dx: (C, B*T) overwritten; weight (and bias) gradients
  // accumulate, summed over tokens in double (core/reduce.hpp). dx must not alias dOut.
  void backward(const Eigen::Ref<const MatX<S>>& dOut, MatX<S>& dx);

  Index channels() const { return m_C; }
  Index kernel() const { return m_K; }

 private:
  // One output column at a time, taps from the current token backwards; columns are independent.
  // Checks x against the layout first (fn names the caller); a vectors(B) layout is sequence(B, 1)
  // (one token per sample) and is accepted as such.
  void convolve(const char* fn, const Eigen::Ref<const MatX<S>>& x, const TokenLayout& layout, MatX<S>& out) const;

  Index m_C, m_K;
  ConstView<S> m_x;  // (C, B*T) input of the last forward, owned by the caller
  TokenLayout m_layout;
  bool m_hasForward = false;
  MatX<SumType<S>> m_wide;      // (C, K) weight-gradient sums over tokens, in double
  VecX<SumType<S>> m_wideBias;  // (C) bias-gradient sums over tokens, in double
};

template <class S>
void TokenConv<S>::initIdentity() {
  m_W.value.setZero();
  m_W.value.col(m_K - 1).setOnes();
  if (m_hasBias) m_b.value.setZero();
}

template <class S>
void TokenConv<S>::forward(const Eigen::Ref<const MatX<S>>& x, const TokenLayout& layout, MatX<S>& out) {
  convolve("ddl::TokenConv::forward", x, layout, out);
  m_x.bind(x);  // a view: x must stay alive and unchanged until backward
  m_layout = layout;
  m_hasForward = true;
}

template <class S>
void TokenConv<S>::backward(const Eigen::Ref<const MatX<S>>& dOut, MatX<S>& dx) {
  const char* fn = "ddl::TokenConv::backward";
  if (!m_hasForward) throw Error(message(fn, "called before forward"));
  checkShape(fn, "dOut", dOut, m_C, m_layout.tokens());
  requireNoAlias(fn, "dOut", dOut, "dx", dx);
  const Index T = m_layout.length;
  dx.resize(m_C, m_layout.tokens());
  detail::causalConvBackwardInput<S>(m_W.value, dOut, T, dx);
  m_wide.setZero(m_C, m_K);
  detail::addCausalConvWeightGrad<S>(dOut, m_x.map(), T, m_wide);
  m_W.grad += m_wide.template cast<S>();
  if (m_hasBias) {
    m_wideBias.setZero(m_C);
    addRowSums(dOut, m_wideBias);
    m_b.grad.col(0) += m_wideBias.template cast<S>();
  }
}

template <class S>
void TokenConv<S>::convolve(const char* fn, const Eigen::Ref<const MatX<S>>& x, const TokenLayout& layout,
                            MatX<S>& out) const {
  requireSequenceLayout(fn, layout);
  if (x.rows() != m_C || x.cols() != layout.tokens())
    throw ShapeError(message(fn, "x has shape ", shapeOf(x), ", expected (", m_C, ", ", layout.tokens(),
                             ") for the layout ", toString(layout)));
  requireNoAlias(fn, "x", x, "out", out);
  out.resize(m_C, layout.tokens());
  detail::causalConvForward<S>(m_W.value, x, layout.length, out);
  if (m_hasBias) out.colwise() += m_b.value.col(0);
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class TokenConv<float>;
extern template class TokenConv<double>;
#endif

}  // namespace ddl
