#pragma once
// ddl/nn/blocks/causal_attention_core.hpp: the core of multi-head causal softmax attention, the part of
// CausalSelfAttention (nn/blocks/causal_self_attention.hpp) between the projections and W_o.
//
//   Q, K, V: (H*d_h, N), N = B*T, layout sequence(B, T): column b*T + t; head h owns rows h*d_h ..
//   per (b, h):  P(s, t) = softmax_{s <= t} (k_s · q_t / sqrt(d_h)),  o_t = Σ_s P(s, t) v_s
//   A: (H*d_h, N), the heads' o concatenated
//
// Backward, per (b, h), with dS the gradient of the scores before scaling:
//   dV = dO Pᵀ,  dP = Vᵀ dO,  dS(s,t) = P(s,t) (dP(s,t) − Σ_s' P(s',t) dP(s',t)),
//   dQ = K dS / sqrt(d_h),  dK = Q dSᵀ / sqrt(d_h)
//
// What backward keeps: per query its score maximum and 1/Σexp (2 B H T scalars); backward recomputes
// P from q and k with the same operations as forward instead of storing B H T² probabilities
// (docs/decisions.md, "Attention: what the backward keeps"). Scores of one (b, h) pair live in a
// T x T scratch per thread.
// Causal blocks: the products skip the masked half. Queries are cut into blocks of kCausalBlock
// columns [t0, t1); block i needs only keys s < t1, so its scores are the (t1, t1 - t0) product
// K[:, 0:t1]ᵀ Q[:, t0:t1], and o, dP and dQ are products over those t1 keys. dV and dK are cut by key
// blocks [s0, s1), which only queries t >= s0 see: dV[:, s0:s1] = dO[:, s0:T] P[s0:s1, s0:T]ᵀ and
// dK[:, s0:s1] = Q[:, s0:T] dS[s0:s1, s0:T]ᵀ / sqrt(d_h). The masked entries inside the diagonal
// blocks are zero in P and dS, so every product reads only exact values. At T = 256 the products
// compute 10 of the 16 64 x 64 tiles of a full T x T (a 1.6x smaller core); T <= 64 is one block.
// Each block shape has its own product workspace per thread (no allocation in steady state).
//
// Threads: the (b, h) pairs are independent and each runs on one thread with single-threaded
// products, so the core gives the same bits on any thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/gemm.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/linear.hpp"  // detail::kLinearParallelMin

namespace ddl {

template <class S>
class CausalAttentionCore {
 public:
  using TokenMap = Eigen::Map<const MatX<S>>;
  using TokenMapMut = Eigen::Map<MatX<S>>;

  // d_h >= 1 features per head.
  explicit CausalAttentionCore(Index headDim) : m_dh(headDim) {
    require(headDim >= 1, "ddl::CausalAttentionCore", "the head size must be >= 1, got ", headDim);
  }

  // Q, K, V -> A (see the header comment). When colMax and colInv are given, writes there per query
  // its score maximum and 1 / Σ exp, (T, B*H) with column b*H + h: what backward reads.
  void forward(const TokenLayout& layout, const TokenMap& Q, const TokenMap& K, const MatX<S>& V, MatX<S>& A,
               MatX<S>* colMax, MatX<S>* colInv);

  // dA: (H*d_h, N), the gradient of A, with forward's Q, K, V and statistics -> dQ, dK (maps of
  // (H*d_h, N) storage) and dV (H*d_h, N), all sized by the caller and overwritten.
  void backward(const TokenLayout& layout, const TokenMap& Q, const TokenMap& K, const MatX<S>& V, const MatX<S>& dA,
                const MatX<S>& colMax, const MatX<S>& colInv, TokenMapMut& dQ, TokenMapMut& dK, MatX<S>& dV);

  // Exchanges the per-thread scratch (its contents are dead between calls) with other's, a core of the
  // same head size (docs/decisions.md, "Scratch shared between blocks").
  void swapScratch(CausalAttentionCore& other) noexcept { m_scratch.swap(other.m_scratch); }

 private:
  // Query (and key) blocks of the causal products; see the header comment.
  static constexpr Index kCausalBlock = 64;
  static Index causalBlocks(Index T) { return (T + kCausalBlock - 1) / kCausalBlock; }
  static Index blockBegin(Index i) { return i * kCausalBlock; }
  static Index blockEnd(Index i, Index T) { return std::min(T, (i + 1) * kCausalBlock); }

  // Per-thread scratch: one (b, h) pair's T x T probabilities and their gradient, and one product
  // workspace per product shape and block i: scores (t1, t1 - t0, d_h) for S and dP, values
  // (d_h, t1 - t0, t1) for o and dQ, keys (d_h, s1 - s0, T - s0) for dV and dK.
  struct Scratch {
    MatX<S> P, dP;
    std::vector<GemmWorkspace<S>> scores, values, keys;
  };

  // Threads for the pair loop; scratch sized (and product buffers made) before any parallel region.
  int prepareScratch(Index T, Index pairs, bool withGradient);

  static int threadIndex();

  // The probabilities of pair (b, h) into P (T, T): per query block [t0, t1) the scaled scores against
  // keys 0 .. t1-1, then per query column t the softmax over keys s <= t; entries s > t inside the
  // block are set to 0, entries s >= t1 are not written (no product reads them). Forward records the
  // column maximum and 1 / Σ exp (into recMax, recInv when given); backward passes them back as
  // keptMax, keptInv and so repeats forward's operations on the same values.
  void probabilities(Scratch& s, const TokenMap& Q, const TokenMap& K, Index b, Index h, Index T, S* recMax,
                     S* recInv, const S* keptMax, const S* keptInv);

  Index m_dh;
  std::vector<Scratch> m_scratch;  // per thread
};

template <class S>
int CausalAttentionCore<S>::prepareScratch(Index T, Index pairs, bool withGradient) {
  int threads = 1;
#if DDL_WITH_OPENMP
  if (pairs > 1 && pairs * T * T * m_dh >= detail::kLinearParallelMin && !omp_in_parallel())
    threads = omp_get_max_threads();
#else
  (void)pairs;
#endif
  if (static_cast<int>(m_scratch.size()) < threads) m_scratch.resize(static_cast<std::size_t>(threads));
  for (int i = 0; i < threads; ++i) {
    Scratch& s = m_scratch[static_cast<std::size_t>(i)];
    s.P.resize(T, T);
    if (withGradient) s.dP.resize(T, T);
    const Index nb = causalBlocks(T);
    s.scores.resize(static_cast<std::size_t>(nb));
    s.values.resize(static_cast<std::size_t>(nb));
    s.keys.resize(static_cast<std::size_t>(nb));
    for (Index i = 0; i < nb; ++i) {
      const auto u = static_cast<std::size_t>(i);
      const Index b0 = blockBegin(i), b1 = blockEnd(i, T);
      s.scores[u].reserve(b1, b1 - b0, m_dh);
      s.values[u].reserve(m_dh, b1 - b0, b1);
      if (withGradient) s.keys[u].reserve(m_dh, b1 - b0, T - b0);
    }
  }
  return threads;
}

template <class S>
int CausalAttentionCore<S>::threadIndex() {
#if DDL_WITH_OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

template <class S>
void CausalAttentionCore<S>::probabilities(Scratch& s, const TokenMap& Q, const TokenMap& K, Index b, Index h, Index T,
                                           S* recMax, S* recInv, const S* keptMax, const S* keptInv) {
  const auto Qb = Q.block(h * m_dh, b * T, m_dh, T);
  const auto Kb = K.block(h * m_dh, b * T, m_dh, T);
  const S scale = static_cast<S>(1.0 / std::sqrt(static_cast<double>(m_dh)));
  for (Index i = 0, nb = causalBlocks(T); i < nb; ++i) {
    const Index t0 = blockBegin(i), t1 = blockEnd(i, T);
    s.scores[static_cast<std::size_t>(i)].product(Kb.leftCols(t1), true, Qb.middleCols(t0, t1 - t0), false,
                                                  s.P.block(0, t0, t1, t1 - t0), scale, false);
    for (Index t = t0; t < t1; ++t) {
      auto p = s.P.col(t).head(t + 1).array();
      if (keptMax != nullptr) {
        p = (p - keptMax[t]).exp();
        p *= keptInv[t];
      } else {
        const S m = p.maxCoeff();
        p = (p - m).exp();
        const S inv = S(1) / p.sum();
        p *= inv;
        if (recMax != nullptr) {
          recMax[t] = m;
          recInv[t] = inv;
        }
      }
      s.P.col(t).segment(t + 1, t1 - t - 1).setZero();
    }
  }
}

template <class S>
void CausalAttentionCore<S>::forward(const TokenLayout& layout, const TokenMap& Q, const TokenMap& K, const MatX<S>& V,
                                     MatX<S>& A, MatX<S>* colMax, MatX<S>* colInv) {
  const Index B = layout.batch, T = layout.length, H = Q.rows() / m_dh, pairs = B * H;
  const bool record = colMax != nullptr && colInv != nullptr;
  A.resize(Q.rows(), B * T);
  if (record) {
    colMax->resize(T, pairs);
    colInv->resize(T, pairs);
  }
  [[maybe_unused]] const int threads = prepareScratch(T, pairs, false);  // read by the pragma
  ParallelErrors errors;  // nothing here should throw; an escaping exception would end the process
  DDL_OMP(parallel for schedule(static) num_threads(threads) if (threads > 1))
  for (Index pair = 0; pair < pairs; ++pair) {
    errors.guard([&] {
      const Index b = pair / H, h = pair % H;
      Scratch& s = m_scratch[static_cast<std::size_t>(threadIndex())];
      probabilities(s, Q, K, b, h, T, record ? colMax->col(pair).data() : nullptr,
                    record ? colInv->col(pair).data() : nullptr, nullptr, nullptr);
      for (Index i = 0, nb = causalBlocks(T); i < nb; ++i) {  // o[:, t0:t1] = V[:, 0:t1] P[0:t1, t0:t1]
        const Index t0 = blockBegin(i), t1 = blockEnd(i, T);
        s.values[static_cast<std::size_t>(i)].product(V.block(h * m_dh, b * T, m_dh, t1), false,
                                                      s.P.block(0, t0, t1, t1 - t0), false,
                                                      A.block(h * m_dh, b * T + t0, m_dh, t1 - t0), S(1), false);
      }
    });
  }
  errors.rethrow();
}

template <class S>
void CausalAttentionCore<S>::backward(const TokenLayout& layout, const TokenMap& Q, const TokenMap& K,
                                      const MatX<S>& V, const MatX<S>& dA, const MatX<S>& colMax,
                                      const MatX<S>& colInv, TokenMapMut& dQ, TokenMapMut& dK, MatX<S>& dV) {
  const Index B = layout.batch, T = layout.length, H = Q.rows() / m_dh, pairs = B * H;
  const S scale = static_cast<S>(1.0 / std::sqrt(static_cast<double>(m_dh)));
  [[maybe_unused]] const int threads = prepareScratch(T, pairs, true);
  ParallelErrors errors;
  DDL_OMP(parallel for schedule(static) num_threads(threads) if (threads > 1))
  for (Index pair = 0; pair < pairs; ++pair) {
    errors.guard([&] {
      const Index b = pair / H, h = pair % H, r = h * m_dh, c0 = b * T;
      Scratch& s = m_scratch[static_cast<std::size_t>(threadIndex())];
      probabilities(s, Q, K, b, h, T, nullptr, nullptr, colMax.col(pair).data(), colInv.col(pair).data());
      const auto dO = dA.block(r, c0, m_dh, T);
      const auto Vb = V.block(r, c0, m_dh, T);
      const auto Kb = K.block(r, c0, m_dh, T);
      const auto Qb = Q.block(r, c0, m_dh, T);
      const Index nb = causalBlocks(T);
      for (Index i = 0; i < nb; ++i) {  // per query block [t0, t1): dP, dS, dQ over keys 0 .. t1-1
        const auto u = static_cast<std::size_t>(i);
        const Index t0 = blockBegin(i), t1 = blockEnd(i, T), n = t1 - t0;
        s.scores[u].product(Vb.leftCols(t1), true, dO.middleCols(t0, n), false, s.dP.block(0, t0, t1, n), S(1),
                            false);  // dP = Vᵀ dO
        for (Index t = t0; t < t1; ++t) {
          const auto p = s.P.col(t).head(t + 1).array();
          auto g = s.dP.col(t).head(t + 1).array();
          const S D = (p * g).sum();
          g = p * (g - D);  // dS, the softmax's backward
          s.dP.col(t).segment(t + 1, t1 - t - 1).setZero();
        }
        s.values[u].product(Kb.leftCols(t1), false, s.dP.block(0, t0, t1, n), false, dQ.block(r, c0 + t0, m_dh, n),
                            scale, false);  // dQ = K dS
      }
      for (Index i = 0; i < nb; ++i) {  // per key block [s0, s1): the queries t >= s0
        const auto u = static_cast<std::size_t>(i);
        const Index s0 = blockBegin(i), s1 = blockEnd(i, T), n = s1 - s0, m = T - s0;
        s.keys[u].product(dO.middleCols(s0, m), false, s.P.block(s0, s0, n, m), true,
                          dV.block(r, c0 + s0, m_dh, n), S(1), false);  // dV = dO Pᵀ
        s.keys[u].product(Qb.middleCols(s0, m), false, s.dP.block(s0, s0, n, m), true, dK.block(r, c0 + s0, m_dh, n),
                          scale, false);  // dK = Q dSᵀ
      }
    });
  }
  errors.rethrow();
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class CausalAttentionCore<float>;
extern template class CausalAttentionCore<double>;
#endif

}  // namespace ddl
