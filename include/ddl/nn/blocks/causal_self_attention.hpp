#pragma once
// ddl/nn/blocks/causal_self_attention.hpp: multi-head causal self-attention with rotary positions (RoPE) and
// per-head RMSNorm on queries and keys, the token mixer of the causal language model.
//
//   c: (d, N), N = B*T, layout sequence(B, T): column b*T + t (core/token_layout.hpp)
//   H heads of d_h features (options.headDim, default d / H); head h owns rows h*d_h .. h*d_h + d_h - 1,
//   D = H*d_h rows in all
//   q = W_q c,  k = W_k c,  v = W_v c                                   (D, N), no biases
//   options (nn/blocks/attention_options.hpp, the authors' attention options), before RoPE:
//     kShift / vShift: k, v <- alpha k(t−1) + (1 − alpha) k(t) per head, alpha = σ(W_s c) (H, N)
//     q, k, v <- act(q), act(k), act(v) (qActivation, kActivation, vActivation)
//     (both in nn/blocks/attention_projection.hpp)
//   RoPE on q and k (ops/rotary.hpp) over the first r = ropeDim(d_h, ropeRatio) features of each head
//     (all of them by default): the pair (i, i + r/2) is rotated by
//     a = t * base^(-2i/r):  x1' = x1 cos a − x2 sin a,  x2' = x2 cos a + x1 sin a
//   qkNorm: q, k <- RMSNorm (eps options.qkNormEps) over the d_h features of each head, after RoPE; one
//     gain [d_h] for q (q_norm.weight) and one for k (k_norm.weight), shared by the heads
//   per (b, h):  P(s, t) = softmax_{s <= t} (k_s · q_t / sqrt(d_h)),  o_t = Σ_s P(s, t) v_s
//   groupNorm or outputGate: o <- RMSNorm (eps options.outputNormEps) over each head's d_h features,
//     one gain [d_h] (subln.weight with groupNorm, else o_norm.weight)
//   outputGate: o <- o ⊙ silu(W_g c), W_g [D, d] (g.weight)
//     (both in nn/blocks/attention_output.hpp)
//   out = W_o concat_h(o)                                                (d, N), W_o [d, D]
// Parameters (PyTorch names): q.weight, k.weight, v.weight [D, d], o.weight [d, D]; q_norm.weight,
// k_norm.weight [d_h] when qkNorm; then k_shift.weight, v_shift.weight [H, d], g.weight [D, d] and
// subln.weight or o_norm.weight [d_h] when their options are on.
//
// The attention core (the softmax over causal blocks, its backward by recomputation, the threads over
// (b, h) pairs) is CausalAttentionCore (nn/blocks/causal_attention_core.hpp); backward first runs the
// output gate's and norm's (options), then the core's, the norms', RoPE's (the transposed rotation) and
// the projections' backwards. The gains' gradients are
// RmsNorm's sums in double over tokens, in a fixed order. The caches are views as elsewhere
// (docs/decisions.md, "Activation caches are views"): c must stay alive and unchanged from forward
// until backward.
//
// Incremental decoding (generation, one sequence): startDecode sizes a DecodeCache, then forwardStep
// takes the normalised input of the next position(s) t = length, length + 1, ... and returns what
// forwardInference would return in those columns for the sequence 0 .. t, to rounding:
//   the cache holds, for every position s < length, k_s after RoPE and (qkNorm) the k norm, and v_s,
//   as columns of K, V (D, capacity); with kShift / vShift also the last position's W_k c, W_v c, which
//   the next position's shift reads. They are exactly the keys and values the full recomputation
//   would use for s (a key depends only on its own token and position), so a new query needs only
//     q_t = norm(RoPE_t(W_q c_t)),  P(s, t) = softmax_{s <= t} (k_s · q_t / sqrt(d_h)),  o_t = Σ_s P(s, t) v_s
//   per head, and a step costs O(t d) for attention plus 4 d² for the projections, not the O(t² d)
//   of recomputing the prefix. The cache also holds a RotaryTable for positions 0 .. capacity-1, made
//   as forward's, so position t turns by the same rounded angle (ops/rotary.hpp, applyRotaryFrom).
//   forwardStep over c (d, n) with n > 1 is a prefill of positions length .. length + n - 1 (each
//   query sees the keys up to its own position). startDecode allocates; a one-column step allocates
//   nothing (matrix-vector products, scratch in the cache); a block of n > 1 reserves the cache's
//   product workspace for its n. Restarting a cache with the same capacity allocates nothing.
//   forwardStep reads the weights and leaves what backward keeps untouched: a forward, decode steps,
//   then backward give the gradients of that forward. A cache belongs to the layer that started it.
#include <cmath>
#include <optional>
#include <string>
#include <tuple>

#include "ddl/core/alias.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/gemm.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/swap_each.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/forward_mode.hpp"
#include "ddl/nn/blocks/attention_options.hpp"
#include "ddl/nn/blocks/attention_output.hpp"
#include "ddl/nn/blocks/attention_projection.hpp"
#include "ddl/nn/blocks/causal_attention_core.hpp"
#include "ddl/nn/layers/linear.hpp"
#include "ddl/nn/layers/rms_norm.hpp"
#include "ddl/ops/rotary.hpp"

namespace ddl {

struct CausalSelfAttentionConfig {
  Index d = 0;             // model width (d = heads * d_h unless options.headDim says otherwise)
  Index heads = 1;         // H
  double ropeBase = 10000;  // RoPE frequency base
  bool qkNorm = true;      // RMSNorm per head on q and k after RoPE (eps options.qkNormEps)
  AttentionOptions options;  // the authors' attention options (nn/blocks/attention_options.hpp)
};

template <class S>
class CausalSelfAttention {
 public:
  explicit CausalSelfAttention(const CausalSelfAttentionConfig& cfg)
      : m_cfg(checked(cfg)), m_dh(cfg.options.resolvedHeadDim(cfg.d, cfg.heads)), m_D(cfg.heads * m_dh),
        m_ropeDim(AttentionOptions::ropeDim(m_dh, cfg.options.ropeRatio)),
        m_q(cfg.d, cfg.heads, m_dh, false, cfg.options.qActivation),
        m_k(cfg.d, cfg.heads, m_dh, cfg.options.kShift, cfg.options.kActivation),
        m_v(cfg.d, cfg.heads, m_dh, cfg.options.vShift, cfg.options.vActivation), m_o(m_D, cfg.d, false),
        m_qNorm(m_dh, cfg.options.qkNormEps), m_kNorm(m_dh, cfg.options.qkNormEps),
        m_out(cfg.d, cfg.heads, m_dh, cfg.options), m_rope(m_ropeDim > 0 ? m_ropeDim : 2, cfg.ropeBase),
        m_core(m_dh) {
    m_o.weight().role = ParamRole::ResidualOutput;
  }

  // Draw order: q, k, v, o (torch.nn.Linear default), then k_shift, v_shift, g; the norm gains are reset to 1.
  void init(Rng& rng);

  // What backward reads of the last forward, N = B*T tokens.
  struct Activations {
    MatX<S> Q, K, V;          // (D, N) projections; Q, K after RoPE (the norms view them)
    MatX<S> Qn, Kn;           // (d_h, H*N) q, k after the per-head norms (qkNorm)
    MatX<S> A;                // (D, N) heads concatenated (W_o views it without output norm and gate)
    MatX<S> colMax, colInv;   // (T, B*H) per query: score maximum and 1 / Σ exp
  };

  // c: (d, B*T) -> out: (d, B*T), layout = sequence(B, T). Keeps views of c and its Activations for
  // backward. out must not alias c.
  void forward(const Eigen::Ref<const MatX<S>>& c, const TokenLayout& layout, MatX<S>& out);

  // Same out as forward, bit for bit; keeps nothing backward reads (Activations of its own).
  void forwardInference(const Eigen::Ref<const MatX<S>>& c, const TokenLayout& layout, MatX<S>& out);

  // The keys (after RoPE and the QK norm) and values of the positions decoded so far, one sequence.
  struct DecodeCache {
    MatX<S> K, V;        // (d, capacity): column s holds position s, for s < length
    Index length = 0;    // positions held
    Index capacity() const { return K.cols(); }
    // Owned by startDecode and forwardStep: RoPE's table for positions 0 .. capacity-1 with the
    // layer's base (the cache's own, so decoders share nothing they write) and one step's scratch.
    std::optional<RotaryTable<S>> rope;
    double ropeBase = 0;
    MatX<S> q, k, v, a;  // (D, n): projections (q, k after RoPE), heads concatenated
    MatX<S> qn, kn;      // (d_h, H*n): q, k after the norms (qkNorm)
    typename AttentionProjection<S>::Step qStep, kStep, vStep;  // shifts' last positions, scratch
    typename AttentionOutput<S>::Step outStep;                   // output norm and gate scratch
    VecX<S> p;           // (capacity): one query's probabilities
    GemmWorkspace<S> gemm;  // the projections of a block of n > 1 positions
  };

  // Sizes the cache for up to `capacity` positions and empties it (allocates; later steps do not).
  void startDecode(DecodeCache& cache, Index capacity) const;

  // One new position t = cache.length of one sequence: c (d, 1) the normalised input of that token
  // -> out (d, 1), equal (to rounding) to column t of forwardInference over positions 0..t.
  // Appends its key and value. Throws ddl::Error naming the capacity when the cache is full, and
  // ShapeError for a c of the wrong shape. c (d, n) with n > 1 takes positions length .. length+n-1
  // at once (a prompt's prefill): out (d, n). out must not alias c or the cache. Reads the layer only:
  // callers on several threads may share it, each with its own cache.
  void forwardStep(const Eigen::Ref<const MatX<S>>& c, DecodeCache& cache, MatX<S>& out) const;

  // dOut: (d, B*T) of the last forward -> dc: (d, B*T) overwritten; every parameter gradient
  // accumulates (+=). dc must not alias dOut.
  void backward(const Eigen::Ref<const MatX<S>>& dOut, MatX<S>& dc);

  // Exchanges the buffers whose contents are dead between calls (backward's scratch, the core's
  // per-thread scratch, the layers' product workspaces) with other's, an attention of the same
  // configuration: the blocks of a model then share one set (docs/decisions.md, "Scratch shared
  // between blocks"). Parameters and Activations stay.
  void swapScratch(CausalSelfAttention& other) noexcept {
    swapEach(scratch(), other.scratch());
  }

  // Parameters in a fixed order: q, k, v weights [D, d], o [d, D], then q_norm, k_norm gains [d_h]
  // (qkNorm only), then k_shift, v_shift [H, d], g [D, d], subln or o_norm [d_h] (their options only).
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    m_q.visitWeight(joinName(prefix, "q"), f);
    m_k.visitWeight(joinName(prefix, "k"), f);
    m_v.visitWeight(joinName(prefix, "v"), f);
    m_o.visitParams(joinName(prefix, "o"), f);
    if (m_cfg.qkNorm) {
      m_qNorm.visitParams(joinName(prefix, "q_norm"), f);
      m_kNorm.visitParams(joinName(prefix, "k_norm"), f);
    }
    m_k.visitShift(joinName(prefix, "k_shift"), f);
    m_v.visitShift(joinName(prefix, "v_shift"), f);
    m_out.visitParams(prefix, f);
  }

  const CausalSelfAttentionConfig& config() const { return m_cfg; }
  Index headDim() const { return m_dh; }
  // The features of a head RoPE turns (ropeDim(d_h, ropeRatio)).
  Index ropeDim() const { return m_ropeDim; }

 private:
  auto scratch() { return std::tie(m_dA, m_dV, m_dQ, m_dK, m_dY, m_q, m_k, m_v, m_o, m_qNorm, m_kNorm, m_out, m_core); }
  using TokenMap = Eigen::Map<const MatX<S>>;
  using TokenMapMut = Eigen::Map<MatX<S>>;

  // Train keeps what backward reads (the sub-layers' forward, the softmax statistics); Inference keeps nothing.
  using Mode = ForwardMode;  // nn/layers/forward_mode.hpp
  // The one forward of forward and forwardInference, into acts.
  void run(const char* fn, const Eigen::Ref<const MatX<S>>& c, const TokenLayout& layout, MatX<S>& out,
           Activations& acts, Mode mode);

  static CausalSelfAttentionConfig checked(const CausalSelfAttentionConfig& cfg);

  void checkInput(const char* fn, const Eigen::Ref<const MatX<S>>& c, const TokenLayout& layout) const;

  // A (d_h, H*N) per-head matrix read as (D, N) tokens, and back: the same memory.
  TokenMap tokens(const MatX<S>& M) const { return TokenMap(M.data(), m_D, M.size() / m_D); }
  TokenMapMut tokensMut(MatX<S>& M) const { return TokenMapMut(M.data(), m_D, M.size() / m_D); }
  TokenMap heads(const MatX<S>& M) const { return TokenMap(M.data(), m_dh, M.size() / m_dh); }

  // Y (rows, n) = W X for the decode step: one column is a matrix-vector product (no workspace, no
  // allocation); a block goes through the cache's product workspace (forward's stay as they are).
  static void stepProduct(const MatX<S>& W, const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y, GemmWorkspace<S>& gemm) {
    AttentionProjection<S>::stepProduct(W, X, Y, gemm);
  }

  // RoPE in place on a.Q and a.K, then (qkNorm) the per-head norms into a.Qn, a.Kn.
  void project(const TokenLayout& layout, Activations& a, Mode mode);

  CausalSelfAttentionConfig m_cfg;
  Index m_dh, m_D, m_ropeDim;    // head size, H*d_h, the features RoPE turns per head
  AttentionProjection<S> m_q, m_k, m_v;
  Linear<S> m_o;
  RmsNorm<S> m_qNorm, m_kNorm;
  AttentionOutput<S> m_out;      // the output norm and gate (options)
  RotaryTable<S> m_rope;         // (r/2, T) cos and sin, r = m_ropeDim (unused when r = 0)
  TokenLayout m_layout;
  bool m_hasForward = false;
  Activations m_acts;            // of the last forward
  Activations m_infer;           // of forwardInference
  MatX<S> m_dA, m_dV;            // (D, N) backward scratch
  MatX<S> m_dQ, m_dK;            // (d_h, H*N) backward scratch
  MatX<S> m_dY;                  // (D, N) the output stage's gradient (options)
  CausalAttentionCore<S> m_core;
};

template <class S>
void CausalSelfAttention<S>::init(Rng& rng) {
  m_q.initWeight(rng);
  m_k.initWeight(rng);
  m_v.initWeight(rng);
  m_o.init(rng);
  m_k.initShift(rng);
  m_v.initShift(rng);
  m_out.init(rng);
  m_qNorm.weight().value.setOnes();
  m_kNorm.weight().value.setOnes();
}

template <class S>
void CausalSelfAttention<S>::forward(const Eigen::Ref<const MatX<S>>& c, const TokenLayout& layout, MatX<S>& out) {
  run("ddl::CausalSelfAttention::forward", c, layout, out, m_acts, Mode::Train);
  m_layout = layout;
  m_hasForward = true;
}

template <class S>
void CausalSelfAttention<S>::forwardInference(const Eigen::Ref<const MatX<S>>& c, const TokenLayout& layout,
                                              MatX<S>& out) {
  run("ddl::CausalSelfAttention::forwardInference", c, layout, out, m_infer, Mode::Inference);
}

template <class S>
void CausalSelfAttention<S>::run(const char* fn, const Eigen::Ref<const MatX<S>>& c, const TokenLayout& layout,
                                 MatX<S>& out, Activations& a, Mode mode) {
  checkInput(fn, c, layout);
  requireNoAlias(fn, "c", c, "out", out);
  m_q.forward(c, layout.length, a.Q, mode);
  m_k.forward(c, layout.length, a.K, mode);
  m_v.forward(c, layout.length, a.V, mode);
  project(layout, a, mode);
  const bool norm = m_cfg.qkNorm;
  const bool record = mode == Mode::Train;  // the softmax statistics backward reads
  m_core.forward(layout, tokens(norm ? a.Qn : a.Q), tokens(norm ? a.Kn : a.K), a.V, a.A, record ? &a.colMax : nullptr,
                 record ? &a.colInv : nullptr);
  const TokenMap in = m_out.active() ? m_out.forward(a.A, c, mode) : TokenMap(a.A.data(), a.A.rows(), a.A.cols());
  if (mode == Mode::Train)
    m_o.forward(in, out);
  else
    m_o.forwardInference(in, out);
}

template <class S>
void CausalSelfAttention<S>::startDecode(DecodeCache& cache, Index capacity) const {
  require(capacity >= 1, "ddl::CausalSelfAttention::startDecode", "capacity must be >= 1, got ", capacity);
  const Index D = m_D;
  cache.K.resize(D, capacity);
  cache.V.resize(D, capacity);
  const Index table = m_ropeDim > 0 ? m_ropeDim : 2;
  if (!cache.rope || cache.rope->headDim() != table || cache.ropeBase != m_cfg.ropeBase) {
    cache.rope.emplace(table, m_cfg.ropeBase);  // forward's angles, rounded the same way
    cache.ropeBase = m_cfg.ropeBase;
  }
  cache.rope->reserve(capacity);
  for (MatX<S>* M : {&cache.q, &cache.k, &cache.v, &cache.a}) M->resize(D, 1);
  if (m_cfg.qkNorm) {
    cache.qn.resize(m_dh, m_cfg.heads);
    cache.kn.resize(m_dh, m_cfg.heads);
  }
  if (m_out.active()) m_out.startStep(cache.outStep);
  m_q.startStep(cache.qStep);
  m_k.startStep(cache.kStep);
  m_v.startStep(cache.vStep);
  cache.p.resize(capacity);
  cache.length = 0;
}

template <class S>
void CausalSelfAttention<S>::forwardStep(const Eigen::Ref<const MatX<S>>& c, DecodeCache& cache,
                                         MatX<S>& out) const {
  const char* fn = "ddl::CausalSelfAttention::forwardStep";
  const Index d = m_cfg.d, D = m_D, H = m_cfg.heads;
  checkShape(fn, "c", c, d, -1);
  const Index n = c.cols();
  if (n < 1) throw ShapeError(message(fn, "c has shape ", shapeOf(c), ", expected (", d, ", n) with n >= 1"));
  const Index cap = cache.K.cols(), L = cache.length;
  const Index table = m_ropeDim > 0 ? m_ropeDim : 2;
  if (cache.K.rows() != D || cache.V.rows() != D || cache.V.cols() != cap || !cache.rope ||
      cache.rope->headDim() != table || cache.rope->positions() < cap || cache.p.size() != cap || L < 0 || L > cap)
    throw Error(message(fn, "the cache was not started for this layer (K has shape ", shapeOf(cache.K),
                        ", expected (", D, ", capacity)); call startDecode first"));
  if (n > cap - L)
    throw Error(message(fn, "the cache holds ", L, " of its capacity of ", cap, " positions; c brings ", n,
                        " more, which do not fit (startDecode with a larger capacity)"));
  requireNoAlias(fn, "c", c, "out", out);
  requireNoAlias(fn, "cache.K", cache.K, "out", out);
  requireNoAlias(fn, "cache.V", cache.V, "out", out);

  m_q.step(c, L, cache.qStep, cache.q, cache.gemm);
  m_k.step(c, L, cache.kStep, cache.k, cache.gemm);
  m_v.step(c, L, cache.vStep, cache.v, cache.gemm);
  if (m_ropeDim > 0) {
    applyRotaryFrom(cache.q, L, *cache.rope, m_dh);  // positions L .. L+n-1
    applyRotaryFrom(cache.k, L, *cache.rope, m_dh);
  }
  const bool norm = m_cfg.qkNorm;
  if (norm) {
    m_qNorm.forwardInference(heads(cache.q), cache.qn);
    m_kNorm.forwardInference(heads(cache.k), cache.kn);
  }
  const TokenMap Q = tokens(norm ? cache.qn : cache.q);
  cache.K.middleCols(L, n) = tokens(norm ? cache.kn : cache.k);
  cache.V.middleCols(L, n) = cache.v;

  // Per new query and head: the scores against keys 0 .. t, their softmax as forward takes it
  // (maximum subtracted, 1 / Σ exp multiplied), and the weighted sum of the values.
  const S scale = static_cast<S>(1.0 / std::sqrt(static_cast<double>(m_dh)));
  cache.a.resize(D, n);
  for (Index j = 0; j < n; ++j) {
    const Index t = L + j;
    auto p = cache.p.head(t + 1);
    for (Index h = 0; h < H; ++h) {
      const Index r = h * m_dh;
      p.noalias() = scale * (cache.K.block(r, 0, m_dh, t + 1).transpose() * Q.col(j).segment(r, m_dh));
      const S m = p.maxCoeff();
      p = (p.array() - m).exp().matrix();
      const S inv = S(1) / p.sum();
      p *= inv;
      cache.a.col(j).segment(r, m_dh).noalias() = cache.V.block(r, 0, m_dh, t + 1) * p;
    }
  }
  if (m_out.active())
    stepProduct(m_o.weight().value, m_out.step(cache.a, c, cache.outStep, cache.gemm), out, cache.gemm);
  else
    stepProduct(m_o.weight().value, cache.a, out, cache.gemm);
  cache.length = L + n;
}

template <class S>
void CausalSelfAttention<S>::backward(const Eigen::Ref<const MatX<S>>& dOut, MatX<S>& dc) {
  const char* fn = "ddl::CausalSelfAttention::backward";
  if (!m_hasForward) throw Error(message(fn, "called before forward"));
  checkShape(fn, "dOut", dOut, m_cfg.d, m_layout.tokens());
  requireNoAlias(fn, "dOut", dOut, "dc", dc);
  const Index N = m_layout.tokens();
  if (m_out.active()) {
    m_o.backward(dOut, m_dY);
    m_out.backward(m_dY, m_dA);
  } else {
    m_o.backward(dOut, m_dA);
  }
  const bool norm = m_cfg.qkNorm;
  // dQ, dK are held as (d_h, H*N), one column per (token, head), the shape the norms work on.
  m_dQ.resize(m_dh, m_cfg.heads * N);
  m_dK.resize(m_dh, m_cfg.heads * N);
  m_dV.resize(m_D, N);
  auto dQ = tokensMut(m_dQ), dK = tokensMut(m_dK);
  m_core.backward(m_layout, tokens(norm ? m_acts.Qn : m_acts.Q), tokens(norm ? m_acts.Kn : m_acts.K), m_acts.V, m_dA,
                  m_acts.colMax, m_acts.colInv, dQ, dK, m_dV);
  if (norm) {
    m_qNorm.backward(m_dQ, m_dQ);
    m_kNorm.backward(m_dK, m_dK);
  }
  if (m_ropeDim > 0) {
    applyRotary(dQ, m_layout.length, m_rope, true, m_dh);  // the transposed rotation
    applyRotary(dK, m_layout.length, m_rope, true, m_dh);
  }
  m_q.backward(dQ, dc, false);
  m_k.backward(dK, dc, true);
  m_v.backward(m_dV, dc, true);
  m_out.addInputGradient(dc);  // the gate's W_g c (nothing without it)
}

template <class S>
CausalSelfAttentionConfig CausalSelfAttention<S>::checked(const CausalSelfAttentionConfig& cfg) {
  const char* fn = "ddl::CausalSelfAttention";
  require(cfg.d >= 1 && cfg.heads >= 1, fn, "d and heads must be >= 1, got d = ", cfg.d, ", heads = ", cfg.heads);
  if (cfg.options.headDim == 0)
    require(cfg.d % cfg.heads == 0, fn, "d = ", cfg.d, " is not divisible by heads = ", cfg.heads);
  require(std::isfinite(cfg.ropeBase) && cfg.ropeBase > 0, fn, "ropeBase must be finite and > 0, got ",
          cfg.ropeBase);
  cfg.options.validate(fn, cfg.d, cfg.heads);
  return cfg;
}

template <class S>
void CausalSelfAttention<S>::checkInput(const char* fn, const Eigen::Ref<const MatX<S>>& c,
                                        const TokenLayout& layout) const {
  requireSequenceLayout(fn, layout);
  checkShape(fn, "c", c, m_cfg.d, -1);
  if (c.cols() != layout.tokens())
    throw ShapeError(message(fn, "c has ", c.cols(), " columns but the layout ", toString(layout), " has ",
                             layout.tokens(), " tokens"));
}

template <class S>
void CausalSelfAttention<S>::project(const TokenLayout& layout, Activations& a, Mode mode) {
  if (m_ropeDim > 0) {
    m_rope.reserve(layout.length);
    auto q = tokensMut(a.Q), k = tokensMut(a.K);
    applyRotary(q, layout.length, m_rope, false, m_dh);
    applyRotary(k, layout.length, m_rope, false, m_dh);
  }
  if (!m_cfg.qkNorm) return;
  if (mode == Mode::Train) {
    m_qNorm.forward(heads(a.Q), a.Qn);
    m_kNorm.forward(heads(a.K), a.Kn);
  } else {
    m_qNorm.forwardInference(heads(a.Q), a.Qn);
    m_kNorm.forwardInference(heads(a.K), a.Kn);
  }
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class CausalSelfAttention<float>;
extern template class CausalSelfAttention<double>;
#endif

}  // namespace ddl
