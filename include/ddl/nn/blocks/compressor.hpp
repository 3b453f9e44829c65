#pragma once
// ddl/nn/blocks/compressor.hpp: CC, the compressor that reads the expanded state X (d x dv per token) into the
// branch input x_in (docs/spec.md §3): x_in[i] = sum_j W[i, j] X_j[i].
//   Free:       W: (d, dv) free weights, initialised to 1/dv (the mean over channels)      "weight"
//   Structured: the authors' ResidualShortConvCompressor (docs/decisions.md, "Structured compressor"):
//               per feature i a kernel a[i, 0..K) slides along the dv axis of X[i, :] with "same" zero
//               padding, p = (K - 1) / 2 on the left, then a read vector r over dv:
//                 x_in[i] = sum_j' r[j'] sum_t a[i, t] X[i, j' + t - p],
//               so W[i, j] = sum_j' r[j'] a[i, j - j' + p] (terms with the index outside [0, K) dropped).
//               Params "conv.weight" [d, K] (the authors' "weight") and "read.weight" [dv] ("read").
//               The constructor starts every row as the identity tap a[i, p] = 1 and r at readInit (1/dv
//               unless set), so W starts as the mean; init(rng) gives a the authors' start N(0, (0.5/sqrt(d))²).
// X: (d, dv*N), channel j = X.middleCols(j*N, N) -> Xin: (d, N).
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "ddl/core/alias.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/enum_names.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/reduce.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/core/view.hpp"
#include "ddl/nn/layers/init.hpp"

namespace ddl {

enum class CompressorKind { Free, Structured };
inline constexpr EnumName<CompressorKind> kCompressorNames[] = {{CompressorKind::Free, "free"},
                                                                 {CompressorKind::Structured, "structured"}};
inline const char* toString(CompressorKind k) { return nameOf(kCompressorNames, k); }
inline CompressorKind parseCompressorKind(const std::string& s) {
  return parseEnumName(kCompressorNames, s, "ddl::parseCompressorKind", "value");
}

template <class S>
class Compressor {
 public:
  // d, dv >= 1; kernel >= 1, odd or even (Structured only; the authors' default 4). readInit: the read
  // vector's start (Structured only, finite), 1/dv when unset, as the authors' ddl_state_read_init.
  Compressor(Index d, Index dv, CompressorKind kind = CompressorKind::Free, Index kernel = 4,
             std::optional<double> readInit = std::nullopt);

  // The authors' start of the structured kernel: every a[i, t] ~ N(0, (0.5/sqrt(d))²), the rule their
  // init_gpt_weights applies to every parameter of two or more dimensions. r keeps its start; Free draws nothing.
  void init(Rng& rng) {
    if (m_kind == CompressorKind::Structured) fillNormal(m_conv.value, rng, 0.0, 0.5 / std::sqrt(static_cast<double>(m_d)));
  }

  // What backward needs of one application: a view of its input. docs/spec.md §3 shares one compressor between
  // a block's sublayers: each application passes its own Cache, and the backwards run in reverse order
  // of the forwards (docs/decisions.md, "Modules applied more than once per step").
  struct Cache {
    ConstView<S> X;  // (d, dv*N) input of the application, owned by the caller
    Index N = -1;
  };

  // Scratch of one inference caller: the structured effective weights W (d, dv), recomputed from the
  // parameters on every call (d*dv*K flops), so a const model serves callers that each own one.
  struct Workspace {
    MatX<S> W;
  };

  // X: (d, dv*N) -> Xin: (d, N). Keeps a view of X for backward: X must stay alive and unchanged
  // until then. Xin must not alias X.
  void forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Xin) { forward(X, Xin, m_cache); }

  // The same, recording this application in cache.
  void forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Xin, Cache& cache) {
    run("ddl::Compressor::forward", X, Xin, &cache, m_trainWs);
  }

  // Same Xin as forward, bit for bit; writes only Xin and ws, allocates nothing once they have their
  // shapes, and leaves backward's record alone. Xin must not alias X.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Xin, Workspace& ws) const {
    run("ddl::Compressor::forwardInference", X, Xin, nullptr, ws);
  }

  // The same with the compressor's own workspace.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Xin) { forwardInference(X, Xin, m_inferWs); }

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
  Index kernel() const { return m_kernel; }

 private:
  Index checkedTokens(const char* fn, const Eigen::Ref<const MatX<S>>& X) const;

  // The forward of both modes: with a cache (training) it records the application there. ws receives
  // the structured effective weights (backward reads those of m_trainWs).
  void run(const char* fn, const Eigen::Ref<const MatX<S>>& X, MatX<S>& Xin, Cache* cache, Workspace& ws) const;

  // W (d, dv) = sum_j' r[j'] a[:, j - j' + p], accumulated in (j', t) order.
  void effectiveWeights(MatX<S>& W) const;

  Index m_d, m_dv;
  CompressorKind m_kind;
  Index m_kernel;
  Param<S> m_W, m_conv, m_read;
  Cache m_cache;  // the application of forward(X, Xin) without a Cache
  Workspace m_trainWs, m_inferWs;
  MatX<SumType<S>> m_dW;      // (d, dv) backward's gradient of W, summed over tokens in wide precision
  VecX<SumType<S>> m_rowAcc;  // (d) scratch of backward
};

template <class S>
Compressor<S>::Compressor(Index d, Index dv, CompressorKind kind, Index kernel, std::optional<double> readInit)
    : m_d(d), m_dv(dv), m_kind(kind), m_kernel(kernel) {
  const char* fn = "ddl::Compressor";
  require(d >= 1 && dv >= 1, fn, "d and dv must be >= 1, got d = ", d, ", dv = ", dv);
  require(kernel >= 1, fn, "kernel must be >= 1, got ", kernel, " (d = ", d, ", dv = ", dv, ")");
  require(!readInit || std::isfinite(*readInit), fn, "readInit must be finite, got ", readInit.value_or(0.0));
  if (kind == CompressorKind::Free) {
    m_W = Param<S>(d, dv);
    m_W.value.setConstant(S(1) / static_cast<S>(dv));
  } else {
    m_conv = Param<S>(std::vector<Index>{d, kernel});
    m_conv.value.col((kernel - 1) / 2).setOnes();  // the identity tap: W starts as r in every row
    m_read = Param<S>(std::vector<Index>{dv});
    m_read.value.setConstant(readInit ? static_cast<S>(*readInit) : S(1) / static_cast<S>(dv));
  }
}

template <class S>
void Compressor<S>::run(const char* fn, const Eigen::Ref<const MatX<S>>& X, MatX<S>& Xin, Cache* cache,
                        Workspace& ws) const {
  const Index N = checkedTokens(fn, X);
  requireNoAlias(fn, "X", X, "Xin", Xin);
  if (cache) {
    cache->X.bind(X);
    cache->N = N;
  }
  if (m_kind == CompressorKind::Structured) effectiveWeights(ws.W);  // depends on the parameters only
  const MatX<S>& W = m_kind == CompressorKind::Free ? m_W.value : ws.W;
  Xin.resize(m_d, N);
  Xin = X.middleCols(0, N).array().colwise() * W.col(0).array();
  for (Index j = 1; j < m_dv; ++j) Xin.array() += X.middleCols(j * N, N).array().colwise() * W.col(j).array();
}

template <class S>
void Compressor<S>::backward(const Eigen::Ref<const MatX<S>>& dXin, MatX<S>& dX, const Cache& cache) {
  const char* fn = "ddl::Compressor::backward";
  if (cache.N < 0) throw Error(message(fn, "called before forward"));
  const Index N = cache.N;
  checkShape(fn, "dXin", dXin, m_d, N);
  const auto X = cache.X.map();
  const bool structured = m_kind == CompressorKind::Structured;
  const MatX<S>& W = structured ? m_trainWs.W : m_W.value;
  dX.resize(m_d, m_dv * N);
  if (structured) m_dW.resize(m_d, m_dv);
  for (Index j = 0; j < m_dv; ++j) {
    dX.middleCols(j * N, N) = dXin.array().colwise() * W.col(j).array();
    m_rowAcc.setZero(m_d);  // sums over tokens in double (core/reduce.hpp)
    addRowDots(dXin, X.middleCols(j * N, N), m_rowAcc);
    if (structured) m_dW.col(j) = m_rowAcc;
    else m_W.grad.col(j) += m_rowAcc.template cast<S>();
  }
  if (!structured) return;
  // W[:, j] = sum_j' r[j'] a[:, t] with j = j' + t - p: dr[j'] = sum_t <dW[:, j], a[:, t]>, da[:, t] = sum_j' r[j'] dW[:, j]
  using A = SumType<S>;
  const Index p = (m_kernel - 1) / 2;
  for (Index jp = 0; jp < m_dv; ++jp) {
    A dr = 0;
    for (Index t = 0; t < m_kernel; ++t) {
      const Index j = jp + t - p;
      if (j < 0 || j >= m_dv) continue;
      dr += m_dW.col(j).dot(m_conv.value.col(t).template cast<A>());
      m_conv.grad.col(t) += (static_cast<A>(m_read.value(jp, 0)) * m_dW.col(j)).template cast<S>();
    }
    m_read.grad(jp, 0) += static_cast<S>(dr);
  }
}

template <class S>
Index Compressor<S>::checkedTokens(const char* fn, const Eigen::Ref<const MatX<S>>& X) const {
  if (X.rows() != m_d || X.cols() % m_dv != 0)
    throw ShapeError(message(fn, "X has shape ", shapeOf(X), ", expected (", m_d, ", ", m_dv, "*N)"));
  return X.cols() / m_dv;
}

template <class S>
void Compressor<S>::effectiveWeights(MatX<S>& W) const {
  W.setZero(m_d, m_dv);
  const Index p = (m_kernel - 1) / 2;
  for (Index jp = 0; jp < m_dv; ++jp)
    for (Index t = 0; t < m_kernel; ++t) {
      const Index j = jp + t - p;
      if (j >= 0 && j < m_dv) W.col(j) += m_read.value(jp, 0) * m_conv.value.col(t);
    }
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class Compressor<float>;
extern template class Compressor<double>;
#endif

}  // namespace ddl
