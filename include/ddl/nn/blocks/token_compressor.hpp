#pragma once
// ddl/nn/blocks/token_compressor.hpp: TC, the compressor over tokens that reads the expanded state of
// sequences into the sublayers' input (docs/spec.md §8; the language model's tc variants).
//
//   Y    = StateConv(X):  Y_j[i, t] = sum_{s<K} w[i*dv + j, s] X_j[i, t - K + 1 + s]   (nn/layers/state_conv.hpp)
//   x_in[i, t] = sum_j r[j] Y_j[i, t]
//
// computed in one pass with the effective weights we_j[i, s] = r[j] w[i*dv + j, s] (Y is never stored):
//   x_in[:, n] = sum_j sum_{lag < K, lag <= t} we_j[:, K-1-lag] ⊙ X_j[:, n - lag]          (j, then lag)
// Backward, with G_j[i, s] = sum_{b, t >= K-1-s} dx_in[i, t] X_j[i, t - K + 1 + s] (in double):
//   dX_j[i, t] = sum_{s<K, t+K-1-s < T} we_j[i, s] dx_in[i, t + K - 1 - s]
//   dw[i*dv + j, s] += r[j] G_j[i, s],   dr[j] += sum_{i, s} w[i*dv + j, s] G_j[i, s]
//
// Layout: sequence(B, T), N = B*T, column b*T + t; X: (d, dv*N), channel j = X.middleCols(j*N, N);
// channel (i, j) is PyTorch's channel o = i*dv + j. Parameters "conv.weight" [d*dv, 1, K] (held as
// (d*dv, K), row o) and "read.weight" [dv] (held as (dv, 1)), both with decay as compressor.hpp's. The
// conv starts as the identity and r as 1/dv (or readInit, the authors' ddl_state_read_init, which their
// TC reads as their CC does), so TC starts as the mean over channels at the current token, exactly like
// CC (nn/blocks/compressor.hpp); conv().init(rng) re-draws the conv.
// Decoding (one sequence, one token per call): StepCache keeps the last K states of the sequence; a
// block whose two sublayers share one TC keeps one StepCache per sublayer (they read different states).
// The conv's weight, the argument checks, the decoding ring, the effective weights' gather and the sums
// G_j are its StateConv's (StateKernel, nn/layers/state_kernel.hpp).
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/reduce.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/state_conv.hpp"
#include "ddl/nn/layers/token_conv.hpp"

namespace ddl {

template <class S>
class TokenCompressor {
 public:
  // What backward needs of one application: a view of its input X and its layout. One compressor
  // serves a block's two sublayers: each application passes its own Cache and the backwards run in
  // reverse order (docs/decisions.md, "Modules applied more than once per step").
  using Cache = typename StateKernel<S>::Cache;

  // Decoding state of one sequence: the last K states, each as Xt's (d, dv) columns, and the effective
  // weights of the current step.
  struct StepCache {
    detail::ConvStepRing<S> ring;
    MatX<S> weff;  // (d, dv*K), as forward's
  };

  // d, dv, kernel >= 1. readInit: the read vector's start (finite), 1/dv when unset.
  TokenCompressor(Index d, Index dv, Index kernel = 4, std::optional<double> readInit = std::nullopt)
      : m_d(StateKernel<S>::checkDims("ddl::TokenCompressor", d, dv, kernel)), m_dv(dv), m_K(kernel),
        m_conv(d, dv, kernel) {
    require(!readInit || std::isfinite(*readInit), "ddl::TokenCompressor", "readInit must be finite, got ",
            readInit.value_or(0.0), " (d = ", d, ", dv = ", dv, ")");
    m_read = Param<S>(std::vector<Index>{dv});
    m_read.value.setConstant(readInit ? static_cast<S>(*readInit) : S(1) / static_cast<S>(dv));
  }

  // X: (d, dv*N) under layout sequence(B, T) -> Xin: (d, N). Keeps a view of X for backward: X must stay
  // alive and unchanged until then. Xin must not alias X.
  void forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Xin) {
    forward(X, layout, Xin, m_cache);
  }

  // The same, recording this application in cache.
  void forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Xin, Cache& cache);

  // Same Xin as forward, bit for bit; records nothing and allocates nothing once Xin has its shape.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Xin);

  // dXin: (d, N) -> dX: (d, dv*N) overwritten; parameter gradients accumulate (sums over tokens in
  // double). dX must not alias dXin.
  void backward(const Eigen::Ref<const MatX<S>>& dXin, MatX<S>& dX) { backward(dXin, dX, m_cache); }

  // The same for the application recorded in cache.
  void backward(const Eigen::Ref<const MatX<S>>& dXin, MatX<S>& dX, const Cache& cache);

  // Decoding: a fresh cache for a new sequence (allocates).
  void startStep(StepCache& cache) const;

  // Xt: (d, dv), the state of the next token -> xint: (d, 1), the column of forwardInference over the
  // whole sequence for this token (the same vector operations in the same order: the same bits in
  // the tests, also with g++ -march=native).
  // Allocates nothing once xint has its shape.
  void forwardStep(const Eigen::Ref<const MatX<S>>& Xt, StepCache& cache, MatX<S>& xint) const;

  // "conv.weight" [d*dv, 1, K], then "read.weight" [dv].
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    m_conv.visitParams(joinName(prefix, "conv"), f);
    f(joinName(prefix, "read.weight"), m_read);
  }

  StateConv<S>& conv() { return m_conv; }
  const StateConv<S>& conv() const { return m_conv; }
  Param<S>& read() { return m_read; }
  const Param<S>& read() const { return m_read; }
  Index dim() const { return m_d; }
  Index dv() const { return m_dv; }
  Index kernel() const { return m_K; }

 private:
  // One output column at a time: channels j, then taps from the current token backwards, into one
  // accumulator (forwardStep repeats this order). Columns are independent.
  void compress(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Xin);

  Index m_d, m_dv, m_K;
  StateConv<S> m_conv;  // owns "conv.weight"; its workspaces hold, per call, the effective weights
                        // r[j] w[i*dv + j, s] by value channel and the sums G_j
  Param<S> m_read;      // (dv, 1)
  Cache m_cache;        // the application of forward(X, layout, Xin) without a Cache
};

template <class S>
void TokenCompressor<S>::forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Xin,
                                 Cache& cache) {
  m_conv.beginForward("ddl::TokenCompressor::forward", "X", X, layout, true, "Xin", Xin, &cache);
  compress(X, layout, Xin);
}

template <class S>
void TokenCompressor<S>::forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Xin) {
  m_conv.beginForward("ddl::TokenCompressor::forwardInference", "X", X, layout, true, "Xin", Xin, nullptr);
  compress(X, layout, Xin);
}

template <class S>
void TokenCompressor<S>::backward(const Eigen::Ref<const MatX<S>>& dXin, MatX<S>& dX, const Cache& cache) {
  m_conv.beginBackward("ddl::TokenCompressor::backward", cache, "dXin", dXin, false, "dX", dX);
  const Index N = cache.N, T = cache.layout.length, K = m_K;
  const MatX<S>& w = m_conv.weight().value;
  const MatX<S>& weff = m_conv.channelWeights(&m_read.value);
  dX.resize(m_d, m_dv * N);
  for (Index j = 0; j < m_dv; ++j)
    detail::causalConvBackwardInput<S>(weff.middleCols(j * K, K), dXin, T, dX.middleCols(j * N, N));
  const auto& G = m_conv.channelWeightGrad(dXin, cache.X.map(), N, T);  // G_j in columns j*K .. j*K + K - 1
  using A = SumType<S>;
  MatX<S>& dw = m_conv.weight().grad;
  for (Index j = 0; j < m_dv; ++j) {
    const A r = static_cast<A>(m_read.value(j, 0));
    A dr = 0;
    for (Index s = 0; s < K; ++s)
      for (Index i = 0; i < m_d; ++i) {
        const A g = G(i, j * K + s);
        dw(i * m_dv + j, s) += static_cast<S>(r * g);
        dr += static_cast<A>(w(i * m_dv + j, s)) * g;
      }
    m_read.grad(j, 0) += static_cast<S>(dr);
  }
}

template <class S>
void TokenCompressor<S>::startStep(StepCache& cache) const {
  cache.ring.start(m_d * m_dv, m_K);
  cache.weff.setZero(m_d, m_dv * m_K);
}

template <class S>
void TokenCompressor<S>::forwardStep(const Eigen::Ref<const MatX<S>>& Xt, StepCache& cache, MatX<S>& xint) const {
  auto& ring = cache.ring;
  m_conv.beginStep("ddl::TokenCompressor::forwardStep", ring, "Xt", Xt, m_dv);
  const Index K = m_K, d = m_d, pos = ring.pos;
  Eigen::Map<MatX<S>>(ring.slots.col(pos).data(), d, m_dv) = Xt;  // channel j at rows j*d .. j*d + d - 1
  detail::channelWeights(m_conv.weight().value, d, m_dv, cache.weff, &m_read.value);
  const MatX<S>& we = cache.weff;
  xint.resize(d, 1);
  auto out = xint.col(0);
  for (Index j = 0; j < m_dv; ++j)
    for (Index lag = 0; lag < K && lag <= ring.t; ++lag) {
      const auto in = ring.slots.col((pos + K - lag) % K).segment(j * d, d);
      if (j == 0 && lag == 0)
        out = we.col(K - 1).cwiseProduct(in);
      else
        out += we.col(j * K + K - 1 - lag).cwiseProduct(in);
    }
  ring.advance();
}

template <class S>
void TokenCompressor<S>::compress(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Xin) {
  const Index N = layout.tokens(), T = layout.length, K = m_K, dv = m_dv;
  const MatX<S>& we = m_conv.channelWeights(&m_read.value);
  Xin.resize(m_d, N);
  DDL_OMP(parallel for schedule(static) if (m_d * dv * K * N >= detail::kParallelMinWork))
  for (Index n = 0; n < N; ++n) {
    const Index t = n % T;
    Xin.col(n) = we.col(K - 1).cwiseProduct(X.col(n));
    for (Index lag = 1; lag < K && lag <= t; ++lag) Xin.col(n) += we.col(K - 1 - lag).cwiseProduct(X.col(n - lag));
    for (Index j = 1; j < dv; ++j) {
      const Index c = j * N + n, base = j * K;
      for (Index lag = 0; lag < K && lag <= t; ++lag)
        Xin.col(n) += we.col(base + K - 1 - lag).cwiseProduct(X.col(c - lag));
    }
  }
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class TokenCompressor<float>;
extern template class TokenCompressor<double>;
#endif

}  // namespace ddl
