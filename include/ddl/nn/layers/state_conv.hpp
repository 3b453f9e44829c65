#pragma once
// ddl/nn/layers/state_conv.hpp: causal convolutions over the tokens of the expanded state of sequences
// (docs/spec.md §8, "Expanded state for sequences"; the language model's TC and EC).
//
// Layout: sequence(B, T), N = B*T tokens, column b*T + t (core/token_layout.hpp). The state X is
// (d, dv*N) with value channel j = X.middleCols(j*N, N); channel (i, j) of the state is feature i of
// value channel j, which PyTorch's twin flattens as channel o = i*dv + j (its X (B, T, dv, d) as
// X.permute(0, 3, 2, 1).reshape(B, d*dv, T)).
// Positions before the start of a sequence count as zero, so no token sees a later one or another
// sequence; w[o, K-1] multiplies the current token, w[o, s] the token K-1-s positions back.
//
//   StateConv      Y_j[i, t] = sum_{s<K} w[i*dv + j, s] X_j[i, t - K + 1 + s]
//                  torch Conv1d(d*dv, d*dv, K, groups=d*dv, padding=K-1, bias=False), outputs past T dropped
//     backward:    dX_j[i, t] = sum_{s<K, t+K-1-s < T} w[i*dv + j, s] dY_j[i, t + K - 1 - s]
//                  dw[i*dv + j, s] += sum_{b, t >= K-1-s} dY_j[i, t] X_j[i, t - K + 1 + s]
//   ConvExpansion  EC: X_j[i, t] = sum_{s<K} w[i*dv + j, s] x[i, t - K + 1 + s]
//                  torch Conv1d(d, d*dv, K, groups=d, padding=K-1, bias=False), outputs past T dropped
//     backward:    dx[i, t] = sum_j sum_{s<K, t+K-1-s < T} w[i*dv + j, s] dX_j[i, t + K - 1 - s]
//                  dw[i*dv + j, s] += sum_{b, t >= K-1-s} dX_j[i, t] x[i, t - K + 1 + s]
//
// Parameter "weight" [d*dv, 1, K] (held as (d*dv, K), row o = i*dv + j; decay on). Both modules start
// as the identity of their kind (initIdentity): StateConv copies X, ConvExpansion repeats x into every
// channel (X = x 1ᵀ, docs/spec.md §3's repetition); init() re-draws like torch.nn.Conv1d (fan_in = K).
// Both are built on StateKernel (nn/layers/state_kernel.hpp), which holds what they (and TokenCompressor,
// nn/blocks/token_compressor.hpp, through its StateConv) share: that weight and its inits, the decoding
// ring, the argument checks, the weights gathered by value channel and the weight-gradient sums.
// Weight gradients are sums over tokens in double (core/reduce.hpp); every loop gives the same bits on
// any thread count (output columns are independent; a value channel's weight gradient is one task's
// fixed-order sum). The loops are the shared kernels of nn/layers/token_conv.hpp, run per value channel on
// contiguous (d, N) blocks with that channel's weights gathered into a contiguous (d, K) block.
//
// Incremental decoding (one sequence, one new token per call): StepCache holds the last K inputs in
// the channel order o (a ring of K slots: the new one and the K-1 before it, zero before the sequence
// start); startStep allocates it, forwardStep allocates nothing and returns the column of
// forwardInference over the whole sequence that belongs to the new token (the same operations in the
// same order). A module applied to several states per token keeps one StepCache per application.
#include "ddl/core/alias.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/state_kernel.hpp"

namespace ddl {

// ------------------------------------------------------------------------------------------- StateConv

template <class S>
class StateConv : public StateKernel<S> {
  using Base = StateKernel<S>;

 public:
  using typename Base::Cache;
  using typename Base::StepCache;

  // d, dv, kernel >= 1. Starts as the identity (initIdentity).
  StateConv(Index d, Index dv, Index kernel = 4) : Base("ddl::StateConv", d, dv, kernel) {}

  // X: (d, dv*N) under layout sequence(B, T) -> Y: (d, dv*N). Keeps a view of X for backward: X must stay
  // alive and unchanged until then. Y must not alias X.
  void forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
    forward(X, layout, Y, this->m_cache);
  }

  // The same, recording this application in cache.
  void forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y, Cache& cache);

  // Same Y as forward, bit for bit; records nothing and allocates nothing once Y has its shape.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y);

  // dY: (d, dv*N) -> dX: (d, dv*N) overwritten; the weight gradient accumulates (sums over tokens in
  // double). dX must not alias dY.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) { backward(dY, dX, this->m_cache); }

  // The same for the application recorded in cache.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX, const Cache& cache);

  // Xt: (d, dv), the state of the next token -> Yt: (d, dv), the column of forwardInference over the whole
  // sequence for this token. Allocates nothing once Yt has its shape; Yt may be Xt.
  void forwardStep(const Eigen::Ref<const MatX<S>>& Xt, StepCache& cache, MatX<S>& Yt) const;
};

template <class S>
void StateConv<S>::forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y, Cache& cache) {
  this->beginForward("ddl::StateConv::forward", "X", X, layout, true, "Y", Y, &cache);
  this->forwardChannels(X, layout, true, Y);
}

template <class S>
void StateConv<S>::forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
  this->beginForward("ddl::StateConv::forwardInference", "X", X, layout, true, "Y", Y, nullptr);
  this->forwardChannels(X, layout, true, Y);
}

template <class S>
void StateConv<S>::backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX, const Cache& cache) {
  this->beginBackward("ddl::StateConv::backward", cache, "dY", dY, true, "dX", dX);
  this->backwardChannels(dY, cache, true, dX);
}

template <class S>
void StateConv<S>::forwardStep(const Eigen::Ref<const MatX<S>>& Xt, StepCache& cache, MatX<S>& Yt) const {
  this->beginStep("ddl::StateConv::forwardStep", cache.ring, "Xt", Xt, this->m_dv);
  this->stepChannels(Xt, cache.ring, Yt);
}

// --------------------------------------------------------------------------------------- ConvExpansion

template <class S>
class ConvExpansion : public StateKernel<S> {
  using Base = StateKernel<S>;

 public:
  // Decoding state of one sequence: the last K inputs, each repeated into the dv channels.
  using typename Base::StepCache;

  // d, dv, kernel >= 1. Starts as the repetition X = x 1ᵀ (initIdentity).
  ConvExpansion(Index d, Index dv, Index kernel = 4) : Base("ddl::ConvExpansion", d, dv, kernel) {
    this->m_w.role = ParamRole::KeepsStart;
  }

  // x: (d, N) under layout sequence(B, T) -> X: (d, dv*N). Keeps a view of x for backward: x must stay
  // alive and unchanged until then. X must not alias x.
  void forward(const Eigen::Ref<const MatX<S>>& x, const TokenLayout& layout, MatX<S>& X);

  // Same X as forward, bit for bit; records nothing and allocates nothing once X has its shape.
  void forwardInference(const Eigen::Ref<const MatX<S>>& x, const TokenLayout& layout, MatX<S>& X);

  // dX: (d, dv*N) of the last forward -> dx: (d, N) overwritten (the sum over the channels); the weight
  // gradient accumulates (sums over tokens in double). dx must not alias dX.
  void backward(const Eigen::Ref<const MatX<S>>& dX, MatX<S>& dx);

  // xt: (d, 1), the next token -> Xt: (d, dv), the column of forwardInference over the whole sequence
  // for this token. Allocates nothing once Xt has its shape.
  void forwardStep(const Eigen::Ref<const MatX<S>>& xt, StepCache& cache, MatX<S>& Xt) const;
};

template <class S>
void ConvExpansion<S>::forward(const Eigen::Ref<const MatX<S>>& x, const TokenLayout& layout, MatX<S>& X) {
  this->beginForward("ddl::ConvExpansion::forward", "x", x, layout, false, "X", X, &this->m_cache);
  this->forwardChannels(x, layout, false, X);
}

template <class S>
void ConvExpansion<S>::forwardInference(const Eigen::Ref<const MatX<S>>& x, const TokenLayout& layout, MatX<S>& X) {
  this->beginForward("ddl::ConvExpansion::forwardInference", "x", x, layout, false, "X", X, nullptr);
  this->forwardChannels(x, layout, false, X);
}

template <class S>
void ConvExpansion<S>::backward(const Eigen::Ref<const MatX<S>>& dX, MatX<S>& dx) {
  this->beginBackward("ddl::ConvExpansion::backward", this->m_cache, "dX", dX, true, "dx", dx);
  this->backwardChannels(dX, this->m_cache, false, dx);
}

template <class S>
void ConvExpansion<S>::forwardStep(const Eigen::Ref<const MatX<S>>& xt, StepCache& cache, MatX<S>& Xt) const {
  this->beginStep("ddl::ConvExpansion::forwardStep", cache.ring, "xt", xt, 1);
  this->stepChannels(xt.replicate(1, this->m_dv), cache.ring, Xt);  // x repeated into the dv channels
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class StateConv<float>;
extern template class StateConv<double>;
extern template class ConvExpansion<float>;
extern template class ConvExpansion<double>;
#endif

}  // namespace ddl
