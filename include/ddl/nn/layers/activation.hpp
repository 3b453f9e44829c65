#pragma once
// ddl/nn/layers/activation.hpp: element-wise activations, as free functions other layers call and as a
// layer with its own cache.
//
//   ReLU      y = max(x, 0)                                   y' = [x > 0]
//   GELU      y = x Φ(x) = x/2 (1 + erf(x/√2))                y' = Φ(x) + x φ(x)
//   GELUTanh  y = x/2 (1 + tanh(u)), u = √(2/π)(x + 0.044715 x³)
//                                                             y' = (1 + t)/2 + x/2 (1 − t²) √(2/π)(1 + 3·0.044715 x²)
//   SiLU      y = x σ(x)                                      y' = σ(x) (1 + x (1 − σ(x)))
//   Tanh      y = tanh(x)                                     y' = 1 − y²
//   Identity  y = x                                           y' = 1
// All are Eigen array expressions (erf, tanh, logistic and exp are vectorised for float).
#include <algorithm>
#include <cctype>
#include <string>

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "ddl/core/alias.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/types.hpp"
#include "ddl/core/view.hpp"

namespace ddl {

enum class Activation { ReLU, GELU, GELUTanh, SiLU, Tanh, Identity };

// "relu", "gelu", "gelu_tanh", "silu", "tanh", "identity".
inline std::string toString(Activation kind) {
  switch (kind) {
    case Activation::ReLU: return "relu";
    case Activation::GELU: return "gelu";
    case Activation::GELUTanh: return "gelu_tanh";
    case Activation::SiLU: return "silu";
    case Activation::Tanh: return "tanh";
    case Activation::Identity: return "identity";
  }
  throw ValueError(message("ddl::toString(Activation)", "invalid enum value ", static_cast<int>(kind)));
}

// Case-insensitive inverse of toString; throws ValueError naming the valid choices.
inline Activation parseActivation(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (Activation k : {Activation::ReLU, Activation::GELU, Activation::GELUTanh, Activation::SiLU,
                       Activation::Tanh, Activation::Identity})
    if (lower == toString(k)) return k;
  throw ValueError(message("ddl::parseActivation", "unknown activation '", name,
                           "', expected one of relu, gelu, gelu_tanh, silu, tanh, identity"));
}

// Whether activateBackward reads the output Y (true) or the input X (false) for this kind.
// A layer caches only the one it needs and may pass that cache for both arguments.
inline bool activationNeedsOutput(Activation kind) { return kind == Activation::Tanh; }

namespace detail {
// Calls f(col, firstRow, n, buf) over X in column segments of at most 256 rows, with buf a stack
// array of n coefficients (fixed capacity, so no heap allocation) for a value used more than once.
template <class D, class F>
void forEachChunk(const Eigen::MatrixBase<D>& X, F&& f) {
  using S = typename D::Scalar;
  constexpr Index kChunk = 256;
  Eigen::Array<S, Eigen::Dynamic, 1, 0, kChunk, 1> buf;
  for (Index j = 0; j < X.cols(); ++j) {
    for (Index i0 = 0; i0 < X.rows(); i0 += kChunk) {
      const Index n = std::min(kChunk, X.rows() - i0);
      buf.resize(n);
      f(j, i0, n, buf);
    }
  }
}

// Calls f(firstCol, n) on contiguous column ranges, one per OpenMP thread when the matrix is big
// enough to repay the fork (erf/tanh/exp cost ~0.5 ns per float: 64k coefficients ≈ 30 µs).
template <class F>
void forColumnRanges(Index rows, Index cols, F&& f) {
#if DDL_WITH_OPENMP
  constexpr Index kMinParallel = 1 << 16;
  if (rows * cols >= kMinParallel && cols > 1 && omp_get_max_threads() > 1 && !omp_in_parallel()) {
    ParallelErrors errors;  // a throwing range must not terminate the process
    DDL_OMP(parallel) {
      const Index t = omp_get_thread_num(), nt = omp_get_num_threads();
      const Index j0 = cols * t / nt, j1 = cols * (t + 1) / nt;
      if (j1 > j0) errors.guard([&] { f(j0, j1 - j0); });
    }
    errors.rethrow();
    return;
  }
#else
  (void)rows;
#endif
  f(Index(0), cols);
}

// Y = act(X) on one column range; X, Y are same-shape blocks (Y taken by value: a view).
template <class BX, class BY>
void activateRange(Activation kind, const BX& X, BY Y) {
  using S = typename BX::Scalar;
  const auto x = X.array();
  switch (kind) {
    case Activation::ReLU:
      Y.array() = x.max(S(0));
      return;
    case Activation::GELU:
      Y.array() = S(0.5) * x * (S(1) + (x * S(0.70710678118654752440)).erf());
      return;
    case Activation::GELUTanh:
      Y.array() = S(0.5) * x * (S(1) + (S(0.79788456080286535588) * (x + S(0.044715) * x.cube())).tanh());
      return;
    case Activation::SiLU:
      Y.array() = x * x.logistic();
      return;
    case Activation::Tanh:
      Y.array() = x.tanh();
      return;
    case Activation::Identity:
      Y = X;
      return;
  }
}

// dX = act'(X) ⊙ dY on one column range (see activateBackward for which of X, Y is read).
template <class BX, class BY, class BDY, class BDX>
void activateBackwardRange(Activation kind, const BX& X, const BY& Y, const BDY& dY, BDX dX) {
  using S = typename BX::Scalar;
  const auto x = X.array();
  const auto g = dY.array();
  switch (kind) {
    case Activation::ReLU:
      dX.array() = (x > S(0)).select(g, S(0));
      return;
    case Activation::GELU:
      // Φ(x) + x φ(x), φ(x) = exp(−x²/2)/√(2π)
      dX.array() = g * (S(0.5) * (S(1) + (x * S(0.70710678118654752440)).erf()) +
                        x * (S(-0.5) * x.square()).exp() * S(0.39894228040143267794));
      return;
    case Activation::GELUTanh: {
      const S c = S(0.79788456080286535588), a = S(0.044715);
      // t = tanh(u) is needed twice; a stack chunk evaluates it once per coefficient, without heap.
      forEachChunk(X, [&](Index j, Index i0, Index n, auto& t) {
        const auto xs = X.col(j).segment(i0, n).array();
        t = (c * (xs + a * xs.cube())).tanh();
        dX.col(j).segment(i0, n).array() =
            dY.col(j).segment(i0, n).array() *
            (S(0.5) * (S(1) + t) + S(0.5) * xs * (S(1) - t.square()) * c * (S(1) + S(3) * a * xs.square()));
      });
      return;
    }
    case Activation::SiLU:
      forEachChunk(X, [&](Index j, Index i0, Index n, auto& s) {
        const auto xs = X.col(j).segment(i0, n).array();
        s = xs.logistic();
        dX.col(j).segment(i0, n).array() = dY.col(j).segment(i0, n).array() * s * (S(1) + xs * (S(1) - s));
      });
      return;
    case Activation::Tanh:
      dX.array() = g * (S(1) - Y.array().square());
      return;
    case Activation::Identity:
      dX = dY;
      return;
  }
}
}  // namespace detail

// X: (r, c) -> Y: (r, c). Y is resized when it is a plain matrix; Y may alias X.
// Large inputs are split by columns over the OpenMP threads.
template <class DX, class DY>
void activate(Activation kind, const Eigen::MatrixBase<DX>& X, const Eigen::MatrixBase<DY>& Yout) {
  toString(kind);  // rejects an invalid enum value here, not inside a parallel region
  auto& Y = const_cast<Eigen::MatrixBase<DY>&>(Yout);
  Y.derived().resize(X.rows(), X.cols());
  detail::forColumnRanges(X.rows(), X.cols(), [&](Index j0, Index n) {
    detail::activateRange(kind, X.middleCols(j0, n), Y.middleCols(j0, n));
  });
}

// dX = y'(X) ⊙ dY, all (r, c). X is the forward input and Y its output; Tanh reads only Y, every
// other kind reads only X (activationNeedsOutput). dX is resized when plain; dX may alias dY.
template <class DX, class DY, class DDY, class DDX>
void activateBackward(Activation kind, const Eigen::MatrixBase<DX>& X, const Eigen::MatrixBase<DY>& Y,
                      const Eigen::MatrixBase<DDY>& dY, const Eigen::MatrixBase<DDX>& dXout) {
  toString(kind);
  checkShape("ddl::activateBackward", "X", X, dY.rows(), dY.cols());
  checkShape("ddl::activateBackward", "Y", Y, dY.rows(), dY.cols());
  auto& dX = const_cast<Eigen::MatrixBase<DDX>&>(dXout);
  dX.derived().resize(dY.rows(), dY.cols());
  detail::forColumnRanges(dY.rows(), dY.cols(), [&](Index j0, Index n) {
    detail::activateBackwardRange(kind, X.middleCols(j0, n), Y.middleCols(j0, n), dY.middleCols(j0, n),
                                  dX.middleCols(j0, n));
  });
}

// A parameter-free layer applying one activation. Keeps a view of the input (or, for Tanh, of the
// output), which must stay alive and unchanged until backward; only an in-place forward (Y is X) of a
// kind that reads the input makes a copy, since the output overwrites it.
template <class S>
class ActivationLayer {
 public:
  // Throws ValueError for an invalid enum value.
  explicit ActivationLayer(Activation kind = Activation::ReLU) : m_kind(kind) { toString(kind); }

  // X: (d, B) -> Y: (d, B). Y may alias X.
  void forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y);

  // Same Y as forward, bit for bit; caches nothing (backward still refers to the last forward) and
  // allocates nothing once Y has its shape. Y may alias X.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y) const { activate(m_kind, X, Y); }

  // dY: (d, B) of the last forward -> dX: (d, B) overwritten. dX may alias dY.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX);

  // No parameters.
  template <class F>
  void visitParams(const std::string&, F&&) {}

  Activation kind() const { return m_kind; }

 private:
  Activation m_kind;
  bool m_hasForward = false;
  ConstView<S> m_cache;  // (d, B): the input X, or the output Y for Tanh
  MatX<S> m_copy;        // the input of an in-place forward
};

template <class S>
void ActivationLayer<S>::forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y) {
  if (!activationNeedsOutput(m_kind)) {
    if (detail::sharesStorage(X, Y)) {
      m_copy = X;  // Y overwrites the input the derivative reads
      m_cache.bind(m_copy);
    } else {
      m_cache.bind(X);
    }
  }
  forwardInference(X, Y);
  if (activationNeedsOutput(m_kind)) m_cache.bind(Y);
  m_hasForward = true;
}

template <class S>
void ActivationLayer<S>::backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) {
  const char* fn = "ddl::ActivationLayer::backward";
  if (!m_hasForward) throw Error(message(fn, "called before forward"));
  checkShape(fn, "dY", dY, m_cache.rows(), m_cache.cols());
  const auto cache = m_cache.map();
  activateBackward(m_kind, cache, cache, dY, dX);
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class ActivationLayer<float>;
extern template class ActivationLayer<double>;
#endif

}  // namespace ddl
