#pragma once
// ddl/nn/layers/state_kernel.hpp: StateKernel, the causal depthwise kernel over tokens on the d*dv
// channels of the expanded state of sequences, and the helpers it shares with the modules built on it:
// StateConv and ConvExpansion (nn/layers/state_conv.hpp, where the layout, the formulas and the
// decoding are described) and TokenCompressor (nn/blocks/token_compressor.hpp, through its StateConv).
// It holds their parameter "weight" [d*dv, 1, K] (held as (d*dv, K), row o = i*dv + j), its inits,
// the decoding ring, the argument checks, the weights gathered by value channel and the weight-gradient
// sums (in double, core/reduce.hpp, one task's fixed-order sum per value channel: the same bits on any
// thread count).
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
#include "ddl/nn/layers/token_conv.hpp"

namespace ddl {
namespace detail {

// A sequence layout (H = W = 1) whose N = layout.tokens() gives expectedCols(N) columns to a (rows, .)
// matrix; otherwise ShapeError naming fn, the matrix, its shape and the expected one.
inline void checkSequenceInput(const char* fn, const char* what, Index rows, Index cols, Index expectedRows,
                               Index expectedCols, const char* colsFormula, const TokenLayout& layout) {
  requireSequenceLayout(fn, layout);
  if (rows != expectedRows || cols != expectedCols)
    throw ShapeError(message(fn, what, " has shape ", shapeString(rows, cols), ", expected (", expectedRows, ", ",
                             colsFormula, ") = ", shapeString(expectedRows, expectedCols), " for the layout ",
                             toString(layout)));
}

// wj: (d, dv*K), column j*K + s = w[i*dv + j, s]: the weights of value channel j as a contiguous (d, K)
// block wj.middleCols(j*K, K), scaled by scale(j) when given (the TC's read vector).
template <class S>
void channelWeights(const MatX<S>& w, Index d, Index dv, MatX<S>& wj, const MatX<S>* scale = nullptr) {
  const Index K = w.cols();
  wj.resize(d, dv * K);
  for (Index j = 0; j < dv; ++j)
    for (Index s = 0; s < K; ++s)
      for (Index i = 0; i < d; ++i)
        wj(i, j * K + s) = scale ? (*scale)(j, 0) * w(i * dv + j, s) : w(i * dv + j, s);
}

// wide (d, dv*K) += per value channel j the weight-gradient correlation of dOut_j with x_j
// (addCausalConvWeightGrad), where a (d, dv*N) operand gives channel j = middleCols(j*N, N) and a (d, N)
// operand is shared by every channel (EC's input, TC's output gradient). One task per channel, over all
// rows (contiguous columns: faster than blocks of rows), split over threads above kParallelMinWork;
// every sum is one task's fixed-order loop, so the bits do not depend on the thread count.
template <class S>
void stateConvWeightGrad(const Eigen::Ref<const MatX<S>>& dOut, const Eigen::Ref<const MatX<S>>& x, Index dv,
                         Index N, Index T, MatX<SumType<S>>& wide) {
  const Index K = wide.cols() / dv;
  const bool dOutShared = dOut.cols() == N, xShared = x.cols() == N;
  DDL_OMP(parallel for schedule(static) if (dOut.rows() * dv * K * N >= kParallelMinWork))
  for (Index j = 0; j < dv; ++j)
    addCausalConvWeightGrad<S>(dOut.middleCols(dOutShared ? 0 : j * N, N), x.middleCols(xShared ? 0 : j * N, N), T,
                               wide.middleCols(j * K, K));
}

// grad[i*dv + j, s] += wide(i, j*K + s), rounded once to S.
template <class S>
void addChannelWeightGrad(const MatX<SumType<S>>& wide, Index d, Index dv, MatX<S>& grad) {
  const Index K = grad.cols();
  for (Index s = 0; s < K; ++s)
    for (Index i = 0; i < d; ++i)
      for (Index j = 0; j < dv; ++j) grad(i * dv + j, s) += static_cast<S>(wide(i, j * K + s));
}

// The ring of the last K inputs of one sequence (zero before the start), shared by the StepCaches of
// StateConv and ConvExpansion (slots in the channel order o = i*dv + j, for convolve) and
// TokenCompressor (slots as Xt's (d, dv) columns).
template <class S>
struct ConvStepRing {
  MatX<S> slots;  // (d*dv, K): slot (pos + K - lag) % K holds the input lag tokens back
  VecX<S> y;      // (d*dv) output in the channel order
  Index pos = 0;  // slot of the next input
  Index t = -1;   // tokens seen; -1 before startStep

  void start(Index channels, Index K) {
    slots.setZero(channels, K);
    y.setZero(channels);
    pos = 0;
    t = 0;
  }
  // y = sum_{lag < K, lag <= t} w.col(K-1-lag) ⊙ slot(lag) after the new input was stored at pos:
  // the per-entry operations of causalConvForward, in the same order.
  void convolve(const MatX<S>& w) {
    const Index K = w.cols();
    y = w.col(K - 1).cwiseProduct(slots.col(pos));
    for (Index lag = 1; lag < K && lag <= t; ++lag) y += w.col(K - 1 - lag).cwiseProduct(slots.col((pos + K - lag) % K));
  }
  void advance() {
    pos = (pos + 1) % slots.cols();
    ++t;
  }
};

}  // namespace detail

// ----------------------------------------------------------------------------------------- StateKernel

// The causal depthwise kernel over tokens on the d*dv channels of the state, channel o = i*dv + j: the
// parameter "weight" [d*dv, 1, K], its inits, the decoding state, the argument checks of the modules
// built on it (each naming the calling function, fn) and their shared workspaces. StateConv and
// ConvExpansion derive from it; TokenCompressor reaches it through its StateConv.
template <class S>
class StateKernel {
 public:
  // What backward needs of one application: a view of its input and its layout. A block applies one
  // compressor twice per step (attention and MLP sublayers) with shared weights; each application passes
  // its own Cache and the backwards run in reverse order (docs/decisions.md, "Modules applied more than
  // once per step").
  struct Cache {
    ConstView<S> X;  // input of the application, owned by the caller
    TokenLayout layout;
    Index N = -1;
  };

  // Decoding state of one sequence (see the header comment).
  struct StepCache {
    detail::ConvStepRing<S> ring;
  };

  // d, dv, kernel >= 1, else ValueError naming owner (the module, "ddl::StateConv"); returns d.
  static Index checkDims(const char* owner, Index d, Index dv, Index kernel);

  // Seeded initialisation by scheme (init.hpp) with fan_in = K, as torch.nn.Conv1d with groups = its
  // input channels (d*dv for StateConv, d for ConvExpansion); draws the (d*dv, K) weight column-major.
  void init(Rng& rng, const InitScheme& scheme = InitScheme::pytorchDefault()) {
    initLinearParams(m_w.value, static_cast<MatX<S>*>(nullptr), rng, scheme);
  }

  // w[:, K-1] = 1, everything else 0: every channel copies the current token (StateConv: Y = X exactly;
  // ConvExpansion: X_j = x exactly).
  void initIdentity();

  // Decoding: a fresh cache for a new sequence (allocates).
  void startStep(StepCache& cache) const { cache.ring.start(m_d * m_dv, m_K); }

  // "weight" [d*dv, 1, K].
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    f(joinName(prefix, "weight"), m_w);
  }

  Param<S>& weight() { return m_w; }
  const Param<S>& weight() const { return m_w; }
  Index dim() const { return m_d; }
  Index dv() const { return m_dv; }
  Index kernel() const { return m_K; }

  // ---- for the modules built on the kernel
  // A forward's checks: in (d, dv*N) when inState, else (d, N), under a sequence layout; out must not
  // alias in. Records the application in cache when given.
  template <class Out>
  void beginForward(const char* fn, const char* inName, const Eigen::Ref<const MatX<S>>& in, const TokenLayout& layout,
                    bool inState, const char* outName, const Out& out, Cache* cache) const {
    detail::checkSequenceInput(fn, inName, in.rows(), in.cols(), m_d, (inState ? m_dv : 1) * layout.tokens(),
                               inState ? "dv*N" : "N", layout);
    requireNoAlias(fn, inName, in, outName, out);
    if (!cache) return;
    cache->X.bind(in);
    cache->layout = layout;
    cache->N = layout.tokens();
  }

  // A backward's checks for the application in cache: it was recorded; dOut is (d, dv*N) when
  // outState, else (d, N); dIn must not alias dOut.
  template <class In>
  void beginBackward(const char* fn, const Cache& cache, const char* dOutName, const Eigen::Ref<const MatX<S>>& dOut,
                     bool outState, const char* dInName, const In& dIn) const {
    if (cache.N < 0) throw Error(message(fn, "called before forward"));
    checkShape(fn, dOutName, dOut, m_d, (outState ? m_dv : 1) * cache.N);
    requireNoAlias(fn, dOutName, dOut, dInName, dIn);
  }

  // A decoding step's checks: ring started by a kernel of this shape; in is (d, cols).
  void beginStep(const char* fn, const detail::ConvStepRing<S>& ring, const char* inName,
                 const Eigen::Ref<const MatX<S>>& in, Index cols) const;

  // The weights by value channel, (d, dv*K) (detail::channelWeights), each channel j scaled by
  // (*scale)(j, 0) when given; kept in a workspace until the next call.
  const MatX<S>& channelWeights(const MatX<S>* scale = nullptr);

  // G (d, dv*K): per value channel j the weight-gradient sums over tokens, in double, of dOut_j with
  // x_j (detail::stateConvWeightGrad; a (d, N) operand serves every channel); kept until the next call.
  const MatX<SumType<S>>& channelWeightGrad(const Eigen::Ref<const MatX<S>>& dOut, const Eigen::Ref<const MatX<S>>& x,
                                            Index N, Index T);

  // out: (d, dv*N), out_j = the causal conv of in_j with channel j's (d, K) weights, where in_j =
  // in.middleCols(j*N, N) when inState (in: (d, dv*N)), else in itself (d, N) for every j.
  void forwardChannels(const Eigen::Ref<const MatX<S>>& in, const TokenLayout& layout, bool inState, MatX<S>& out);

  // The backward of forwardChannels for the application in cache, dOut: (d, dv*N) -> dIn overwritten:
  // (d, dv*N) with block j channel j's input gradient when inState, else (d, N) their sum over j (added
  // in the order j = 0, 1, ...); weight.grad accumulates (addWeightGrad).
  void backwardChannels(const Eigen::Ref<const MatX<S>>& dOut, const Cache& cache, bool inState, MatX<S>& dIn);

  // weight.grad[i*dv + j, s] += G(i, j*K + s), rounded once to S.
  void addWeightGrad(const Eigen::Ref<const MatX<S>>& dOut, const Eigen::Ref<const MatX<S>>& x, Index N, Index T) {
    detail::addChannelWeightGrad<S>(channelWeightGrad(dOut, x, N, T), m_d, m_dv, m_w.grad);
  }

  // One decoding step: in (d, dv), channel (i, j), goes into the ring as o = i*dv + j; out (d, dv) is
  // the convolution's output (ConvStepRing::convolve). Allocates nothing once out has its shape; out may
  // be in.
  template <class In>
  void stepChannels(const In& in, detail::ConvStepRing<S>& ring, MatX<S>& out) const {
    Eigen::Map<MatX<S>>(ring.slots.col(ring.pos).data(), m_dv, m_d) = in.transpose();
    ring.convolve(m_w.value);
    out = Eigen::Map<const MatX<S>>(ring.y.data(), m_dv, m_d).transpose();
    ring.advance();
  }

 protected:
  // owner names the module in the errors of the constructor. Starts as the identity (initIdentity).
  StateKernel(const char* owner, Index d, Index dv, Index kernel)
      : m_d(checkDims(owner, d, dv, kernel)), m_dv(dv), m_K(kernel),
        m_w(std::vector<Index>{d * dv, 1, kernel}, /*withDecay=*/true) {
    initIdentity();
  }

  Index m_d, m_dv, m_K;
  Param<S> m_w;
  Cache m_cache;            // the application of the forward without a Cache

 private:
  MatX<S> m_wj;             // (d, dv*K) weights by value channel (channelWeights)
  MatX<SumType<S>> m_wide;  // (d, dv*K) weight-gradient sums over tokens, in double
};

template <class S>
Index StateKernel<S>::checkDims(const char* owner, Index d, Index dv, Index kernel) {
  require(d >= 1 && dv >= 1 && kernel >= 1, owner, "d, dv and kernel must be >= 1, got d = ", d, ", dv = ", dv,
          ", kernel = ", kernel);
  return d;
}

template <class S>
void StateKernel<S>::initIdentity() {
  m_w.value.setZero();
  m_w.value.col(m_K - 1).setOnes();
}

template <class S>
void StateKernel<S>::beginStep(const char* fn, const detail::ConvStepRing<S>& ring, const char* inName,
                               const Eigen::Ref<const MatX<S>>& in, Index cols) const {
  if (ring.t < 0 || ring.slots.rows() != m_d * m_dv || ring.slots.cols() != m_K)
    throw Error(message(fn, "called before startStep (or with the cache of another module)"));
  checkShape(fn, inName, in, m_d, cols);
}

template <class S>
const MatX<S>& StateKernel<S>::channelWeights(const MatX<S>* scale) {
  detail::channelWeights(m_w.value, m_d, m_dv, m_wj, scale);
  return m_wj;
}

template <class S>
const MatX<SumType<S>>& StateKernel<S>::channelWeightGrad(const Eigen::Ref<const MatX<S>>& dOut,
                                                          const Eigen::Ref<const MatX<S>>& x, Index N, Index T) {
  m_wide.setZero(m_d, m_dv * m_K);
  detail::stateConvWeightGrad<S>(dOut, x, m_dv, N, T, m_wide);
  return m_wide;
}

template <class S>
void StateKernel<S>::forwardChannels(const Eigen::Ref<const MatX<S>>& in, const TokenLayout& layout, bool inState,
                                     MatX<S>& out) {
  const Index N = layout.tokens();
  const MatX<S>& wj = channelWeights();
  out.resize(m_d, m_dv * N);
  for (Index j = 0; j < m_dv; ++j)
    detail::causalConvForward<S>(wj.middleCols(j * m_K, m_K), in.middleCols(inState ? j * N : 0, N), layout.length,
                                 out.middleCols(j * N, N));
}

template <class S>
void StateKernel<S>::backwardChannels(const Eigen::Ref<const MatX<S>>& dOut, const Cache& cache, bool inState,
                                      MatX<S>& dIn) {
  const Index N = cache.N, T = cache.layout.length;
  const MatX<S>& wj = channelWeights();
  dIn.resize(m_d, (inState ? m_dv : 1) * N);
  for (Index j = 0; j < m_dv; ++j)
    detail::causalConvBackwardInput<S>(wj.middleCols(j * m_K, m_K), dOut.middleCols(j * N, N), T,
                                       dIn.middleCols(inState ? j * N : 0, N), /*accumulate=*/!inState && j > 0);
  addWeightGrad(dOut, cache.X.map(), N, T);
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class StateKernel<float>;
extern template class StateKernel<double>;
#endif

}  // namespace ddl
