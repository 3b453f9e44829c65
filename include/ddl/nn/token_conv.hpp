#pragma once
// ddl/nn/token_conv.hpp: a causal depthwise convolution over the tokens of each sequence, PyTorch's
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
#include "ddl/nn/init.hpp"

namespace ddl {

template <class S>
class TokenConv {
 public:
  // channels, kernel >= 1. Parameters start at zero until init() or initIdentity().
  explicit TokenConv(Index channels, Index kernel = 4, bool bias = false)
      : m_C(channels), m_K(kernel), m_hasBias(bias) {
    require(channels >= 1 && kernel >= 1, "ddl::TokenConv", "channels and kernel must be >= 1, got channels = ",
            channels, ", kernel = ", kernel);
    m_w = Param<S>(std::vector<Index>{channels, 1, kernel}, /*withDecay=*/true);
    if (bias) m_b = Param<S>(std::vector<Index>{channels}, /*withDecay=*/false);
  }

  // Seeded initialisation by scheme (init.hpp) with fan_in = K, as torch.nn.Conv1d(groups=C).
  // Draw order: weight (column-major (C, K)), then bias.
  void init(Rng& rng, const InitScheme& scheme = InitScheme::pytorchDefault()) {
    initLinearParams(m_w.value, m_hasBias ? &m_b.value : nullptr, rng, scheme);
  }

  // w[:, K-1] = 1, everything else 0: out = x exactly (each token copies itself).
  void initIdentity() {
    m_w.value.setZero();
    m_w.value.col(m_K - 1).setOnes();
    if (m_hasBias) m_b.value.setZero();
  }

  // x: (C, B*T) under layout sequence(B, T) -> out: (C, B*T). Keeps a view of x for backward: x must
  // stay alive and unchanged until then. out must not alias x.
  void forward(const Eigen::Ref<const MatX<S>>& x, const TokenLayout& layout, MatX<S>& out) {
    const char* fn = "ddl::TokenConv::forward";
    checkInput(fn, x, layout);
    requireNoAlias(fn, "x", x, "out", out);
    m_x.bind(x);
    m_layout = layout;
    m_hasForward = true;
    convolve(x, layout, out);
  }

  // Same out as forward, bit for bit; caches nothing (backward still refers to the last forward).
  void forwardInference(const Eigen::Ref<const MatX<S>>& x, const TokenLayout& layout, MatX<S>& out) const {
    const char* fn = "ddl::TokenConv::forwardInference";
    checkInput(fn, x, layout);
    requireNoAlias(fn, "x", x, "out", out);
    convolve(x, layout, out);
  }

  // dOut: (C, B*T) of the last forward -> dx: (C, B*T) overwritten; weight (and bias) gradients
  // accumulate, summed over tokens in double (core/reduce.hpp). dx must not alias dOut.
  void backward(const Eigen::Ref<const MatX<S>>& dOut, MatX<S>& dx) {
    const char* fn = "ddl::TokenConv::backward";
    if (!m_hasForward) throw Error(message(fn, "called before forward"));
    checkShape(fn, "dOut", dOut, m_C, m_layout.tokens());
    requireNoAlias(fn, "dOut", dOut, "dx", dx);
    const Index T = m_layout.length, N = m_layout.tokens();
    const Index K = m_K;
    const auto& w = m_w.value;
    dx.resize(m_C, N);
    // Each dx column reads its own sequence only; columns are independent (same bits on any split).
    DDL_OMP(parallel for schedule(static) if (m_C * K * N >= detail::kParallelMinWork))
    for (Index n = 0; n < N; ++n) {
      const Index t = n % T;
      dx.col(n) = w.col(K - 1).cwiseProduct(dOut.col(n));
      for (Index lag = 1; lag < K && t + lag < T; ++lag) dx.col(n) += w.col(K - 1 - lag).cwiseProduct(dOut.col(n + lag));
    }

    // One thread, fixed order: per tap, per sequence, the overlapping column ranges.
    const auto x = m_x.map();
    const Index B = m_layout.batch;
    m_wide.setZero(m_C, K);
    for (Index s = 0; s < K; ++s) {
      const Index lag = K - 1 - s;
      if (lag >= T) continue;  // this tap only ever sees padding
      auto acc = m_wide.col(s);
      for (Index b = 0; b < B; ++b)
        addRowDots(dOut.middleCols(b * T + lag, T - lag), x.middleCols(b * T, T - lag), acc);
    }
    m_w.grad += m_wide.template cast<S>();
    if (m_hasBias) {
      m_wideBias.setZero(m_C);
      addRowSums(dOut, m_wideBias);
      m_b.grad.col(0) += m_wideBias.template cast<S>();
    }
  }

  // "weight" [C, 1, K], then "bias" [C] when present.
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    f(joinName(prefix, "weight"), m_w);
    if (m_hasBias) f(joinName(prefix, "bias"), m_b);
  }

  Param<S>& weight() { return m_w; }
  const Param<S>& weight() const { return m_w; }
  Param<S>& bias() {
    if (!m_hasBias) throw Error("ddl::TokenConv::bias: this layer was built without a bias");
    return m_b;
  }
  const Param<S>& bias() const { return const_cast<TokenConv*>(this)->bias(); }
  bool hasBias() const { return m_hasBias; }
  Index channels() const { return m_C; }
  Index kernel() const { return m_K; }

 private:
  // A vectors(B) layout is sequence(B, 1) (one token per sample) and is accepted as such.
  void checkInput(const char* fn, const Eigen::Ref<const MatX<S>>& x, const TokenLayout& layout) const {
    if (layout.height != 1 || layout.width != 1)
      throw ShapeError(message(fn, "needs a sequence layout (H = W = 1), got ", toString(layout)));
    if (x.rows() != m_C || x.cols() != layout.tokens())
      throw ShapeError(message(fn, "x has shape ", shapeOf(x), ", expected (", m_C, ", ", layout.tokens(),
                               ") for the layout ", toString(layout)));
  }

  // One output column at a time, taps from the current token backwards; columns are independent.
  void convolve(const Eigen::Ref<const MatX<S>>& x, const TokenLayout& layout, MatX<S>& out) const {
    const Index T = layout.length, N = layout.tokens(), K = m_K;
    const auto& w = m_w.value;
    out.resize(m_C, N);
    DDL_OMP(parallel for schedule(static) if (m_C * K * N >= detail::kParallelMinWork))
    for (Index n = 0; n < N; ++n) {
      const Index t = n % T;
      out.col(n) = w.col(K - 1).cwiseProduct(x.col(n));
      for (Index lag = 1; lag < K && lag <= t; ++lag) out.col(n) += w.col(K - 1 - lag).cwiseProduct(x.col(n - lag));
      if (m_hasBias) out.col(n) += m_b.value.col(0);
    }
  }

  Index m_C, m_K;
  bool m_hasBias;
  Param<S> m_w, m_b;
  ConstView<S> m_x;  // (C, B*T) input of the last forward, owned by the caller
  TokenLayout m_layout;
  bool m_hasForward = false;
  MatX<SumType<S>> m_wide;      // (C, K) weight-gradient sums over tokens, in double
  VecX<SumType<S>> m_wideBias;  // (C) bias-gradient sums over tokens, in double
};

}  // namespace ddl
