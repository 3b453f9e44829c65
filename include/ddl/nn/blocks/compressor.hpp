#pragma once
// ddl/nn/blocks/compressor.hpp: CC, the compressor that reads the expanded state X (d x dv per token) into the
// branch input x_in (docs/spec.md §3): x_in[i] = sum_j W[i, j] X_j[i].
//   Free:       W: (d, dv) free weights, initialised to 1/dv (the mean over channels)      "weight"
//   Structured: the authors' code: a "same"-padded conv of kernel K along the dv axis, then a read
//               vector r of length dv: W[i, j] = w_eff[j] = sum_j' r[j'] a[j - j' + K/2], shared over i.
//               a: (K, 1) starts as the centred delta, r: (dv, 1) as 1/dv, so it also starts as the mean.
//               Params "conv.weight" [K] and "read.weight" [dv] (held as (K, 1), (dv, 1)).
// X: (d, dv*N), channel j = X.middleCols(j*N, N) -> Xin: (d, N).
#include <string>
#include <vector>

#include "ddl/core/alias.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/reduce.hpp"
#include "ddl/core/types.hpp"
#include "ddl/core/view.hpp"

namespace ddl {

enum class CompressorKind { Free, Structured };
inline const char* toString(CompressorKind k) { return k == CompressorKind::Free ? "free" : "structured"; }
inline CompressorKind parseCompressorKind(const std::string& s) {
  if (s == "free") return CompressorKind::Free;
  if (s == "structured") return CompressorKind::Structured;
  throw ValueError(message("ddl::parseCompressorKind", "unknown value '", s, "', expected one of free, structured"));
}

template <class S>
class Compressor {
 public:
  // d, dv >= 1; kernel >= 1 and odd (Structured only).
  Compressor(Index d, Index dv, CompressorKind kind = CompressorKind::Free, Index kernel = 3)
      : m_d(d), m_dv(dv), m_kind(kind), m_kernel(kernel) {
    const char* fn = "ddl::Compressor";
    require(d >= 1 && dv >= 1, fn, "d and dv must be >= 1, got d = ", d, ", dv = ", dv);
    require(kernel >= 1 && kernel % 2 == 1, fn, "kernel must be odd and >= 1, got ", kernel);
    if (kind == CompressorKind::Free) {
      m_W = Param<S>(d, dv);
      m_W.value.setConstant(S(1) / static_cast<S>(dv));
    } else {
      m_conv = Param<S>(std::vector<Index>{kernel});
      m_conv.value(kernel / 2, 0) = S(1);
      m_read = Param<S>(std::vector<Index>{dv});
      m_read.value.setConstant(S(1) / static_cast<S>(dv));
    }
  }

  // What backward needs of one application: a view of its input. docs/spec.md §3 shares one compressor between
  // a block's sublayers: each application passes its own Cache, and the backwards run in reverse order
  // of the forwards (docs/decisions.md, "Modules applied more than once per step").
  struct Cache {
    ConstView<S> X;  // (d, dv*N) input of the application, owned by the caller
    Index N = -1;
  };

  // X: (d, dv*N) -> Xin: (d, N). Keeps a view of X for backward: X must stay alive and unchanged
  // until then. Xin must not alias X.
  void forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Xin) { forward(X, Xin, m_cache); }

  // The same, recording this application in cache.
  void forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Xin, Cache& cache) {
    run("ddl::Compressor::forward", X, Xin, &cache);
  }

  // Same Xin as forward, bit for bit; caches nothing (backward still refers to the last forward) and
  // allocates nothing once Xin has its shape. Xin must not alias X.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Xin) {
    run("ddl::Compressor::forwardInference", X, Xin, nullptr);
  }

  // dXin: (d, N) -> dX: (d, dv*N) overwritten; parameter gradients accumulate.
  void backward(const Eigen::Ref<const MatX<S>>& dXin, MatX<S>& dX) { backward(dXin, dX, m_cache); }

  // The same for the application recorded in cache.
  void backward(const Eigen::Ref<const MatX<S>>& dXin, MatX<S>& dX, const Cache& cache);

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    if (m_kind == CompressorKind::Free) {
      f(joinName(prefix, "weight"), m_W);
    } else {
      f(joinName(prefix, "conv.weight"), m_conv);
      f(joinName(prefix, "read.weight"), m_read);
    }
  }

  CompressorKind kind() const { return m_kind; }

 private:
  Index checkedTokens(const char* fn, const Eigen::Ref<const MatX<S>>& X) const;

  // The forward of both modes: with a cache (training) it records the application there and computes
  // the effective weights into m_weff, which backward reads; without one into m_weffInference.
  void run(const char* fn, const Eigen::Ref<const MatX<S>>& X, MatX<S>& Xin, Cache* cache);

  // Xin = sum_j W_j ⊙ X_j (Free) or sum_j weff[j] X_j (Structured).
  void compress(const Eigen::Ref<const MatX<S>>& X, Index N, const VecX<S>& weff, MatX<S>& Xin) const;

  void effectiveWeights(VecX<S>& weff) const;

  Index m_d, m_dv;
  CompressorKind m_kind;
  Index m_kernel;
  Param<S> m_W, m_conv, m_read;
  Cache m_cache;  // the application of forward(X, Xin) without a Cache
  VecX<S> m_weff, m_dweff, m_weffInference;
  VecX<SumType<S>> m_rowAcc;  // (d) scratch of backward
};

template <class S>
void Compressor<S>::run(const char* fn, const Eigen::Ref<const MatX<S>>& X, MatX<S>& Xin, Cache* cache) {
  const Index N = checkedTokens(fn, X);
  requireNoAlias(fn, "X", X, "Xin", Xin);
  if (cache) {
    cache->X.bind(X);
    cache->N = N;
  }
  VecX<S>& weff = cache ? m_weff : m_weffInference;
  if (m_kind == CompressorKind::Structured) effectiveWeights(weff);  // depends on the parameters only
  compress(X, N, weff, Xin);
}

template <class S>
void Compressor<S>::backward(const Eigen::Ref<const MatX<S>>& dXin, MatX<S>& dX, const Cache& cache) {
  const char* fn = "ddl::Compressor::backward";
  if (cache.N < 0) throw Error(message(fn, "called before forward"));
  const Index N = cache.N;
  checkShape(fn, "dXin", dXin, m_d, N);
  const auto X = cache.X.map();
  dX.resize(m_d, m_dv * N);
  if (m_kind == CompressorKind::Free) {
    for (Index j = 0; j < m_dv; ++j) {
      dX.middleCols(j * N, N) = dXin.array().colwise() * m_W.value.col(j).array();
      m_rowAcc.setZero(m_d);  // sums over tokens in double (core/reduce.hpp)
      addRowDots(dXin, X.middleCols(j * N, N), m_rowAcc);
      m_W.grad.col(j) += m_rowAcc.template cast<S>();
    }
  } else {
    m_dweff.resize(m_dv);
    for (Index j = 0; j < m_dv; ++j) {
      dX.middleCols(j * N, N) = m_weff(j) * dXin;
      m_rowAcc.setZero(m_d);
      addRowDots(dXin, X.middleCols(j * N, N), m_rowAcc);
      m_dweff(j) = static_cast<S>(sumWide(m_rowAcc));
    }
    // w_eff[j] = sum_j' r[j'] a[t] with t = j - j' + K/2 in [0, K)
    const Index half = m_kernel / 2;
    for (Index jp = 0; jp < m_dv; ++jp)
      for (Index t = 0; t < m_kernel; ++t) {
        const Index j = jp + t - half;
        if (j < 0 || j >= m_dv) continue;
        m_read.grad(jp, 0) += m_dweff(j) * m_conv.value(t, 0);
        m_conv.grad(t, 0) += m_dweff(j) * m_read.value(jp, 0);
      }
  }
}

template <class S>
Index Compressor<S>::checkedTokens(const char* fn, const Eigen::Ref<const MatX<S>>& X) const {
  if (X.rows() != m_d || X.cols() % m_dv != 0)
    throw ShapeError(message(fn, "X has shape ", shapeOf(X), ", expected (", m_d, ", ", m_dv, "*N)"));
  return X.cols() / m_dv;
}

template <class S>
void Compressor<S>::compress(const Eigen::Ref<const MatX<S>>& X, Index N, const VecX<S>& weff, MatX<S>& Xin) const {
  Xin.resize(m_d, N);
  for (Index j = 0; j < m_dv; ++j) {
    if (m_kind == CompressorKind::Free) {
      if (j == 0)
        Xin = X.middleCols(0, N).array().colwise() * m_W.value.col(0).array();
      else
        Xin.array() += X.middleCols(j * N, N).array().colwise() * m_W.value.col(j).array();
    } else {
      if (j == 0)
        Xin = weff(0) * X.middleCols(0, N);
      else
        Xin += weff(j) * X.middleCols(j * N, N);
    }
  }
}

template <class S>
void Compressor<S>::effectiveWeights(VecX<S>& weff) const {
  weff.setZero(m_dv);
  const Index half = m_kernel / 2;
  for (Index jp = 0; jp < m_dv; ++jp)
    for (Index t = 0; t < m_kernel; ++t) {
      const Index j = jp + t - half;
      if (j >= 0 && j < m_dv) weff(j) += m_read.value(jp, 0) * m_conv.value(t, 0);
    }
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class Compressor<float>;
extern template class Compressor<double>;
#endif

}  // namespace ddl
