#pragma once
// ddl/nn/blocks/expansion.hpp: the input expansion of the state to dv value channels (docs/spec.md §3).
//   Repeat  (w/o EC): X_j = x for every channel j (no parameters)
//   Learned (EC):     X_j = e_j * x elementwise, e: (d, dv) "weight" initialised to ones, so it starts
//                     as repetition (the per-token form of EC for vectors; no decay on e).
// x: (d, N) -> X: (d, dv*N), channel j = X.middleCols(j*N, N).
#include <string>

#include "ddl/core/alias.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/reduce.hpp"
#include "ddl/core/types.hpp"
#include "ddl/core/view.hpp"

namespace ddl {

template <class S>
class Expansion {
 public:
  Expansion(Index d, Index dv, bool learned) : m_d(d), m_dv(dv), m_learned(learned) {
    require(d >= 1 && dv >= 1, "ddl::Expansion", "d and dv must be >= 1, got d = ", d, ", dv = ", dv);
    if (learned) {
      m_e = Param<S>(d, dv, /*withDecay=*/false);
      m_e.value.setOnes();
    }
  }

  // x: (d, N) -> X: (d, dv*N)
  void forward(const Eigen::Ref<const MatX<S>>& x, MatX<S>& X);

  // Same X as forward, bit for bit; caches nothing and allocates nothing once X has its shape.
  // X must not alias x.
  void forwardInference(const Eigen::Ref<const MatX<S>>& x, MatX<S>& X) const;

  // dX: (d, dv*N) -> dx: (d, N) overwritten; de accumulates.
  void backward(const Eigen::Ref<const MatX<S>>& dX, MatX<S>& dx);

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    if (m_learned) f(joinName(prefix, "weight"), m_e);
  }

  bool learned() const { return m_learned; }

 private:
  void expand(const Eigen::Ref<const MatX<S>>& x, MatX<S>& X) const;

  Index m_d, m_dv;
  bool m_learned;
  Index m_N = -1;
  Param<S> m_e;
  ConstView<S> m_x;  // (d, N) input of the last forward (learned only), owned by the caller
  VecX<SumType<S>> m_rowAcc;  // (d) scratch of backward
};

template <class S>
void Expansion<S>::forward(const Eigen::Ref<const MatX<S>>& x, MatX<S>& X) {
  checkShape("ddl::Expansion::forward", "x", x, m_d, -1);
  requireNoAlias("ddl::Expansion::forward", "x", x, "X", X);
  if (m_learned) m_x.bind(x);  // a view: x must stay alive and unchanged until backward
  m_N = x.cols();
  expand(x, X);
}

template <class S>
void Expansion<S>::forwardInference(const Eigen::Ref<const MatX<S>>& x, MatX<S>& X) const {
  checkShape("ddl::Expansion::forwardInference", "x", x, m_d, -1);
  requireNoAlias("ddl::Expansion::forwardInference", "x", x, "X", X);
  expand(x, X);
}

template <class S>
void Expansion<S>::backward(const Eigen::Ref<const MatX<S>>& dX, MatX<S>& dx) {
  const char* fn = "ddl::Expansion::backward";
  if (m_N < 0) throw Error(message(fn, "called before forward"));
  checkShape(fn, "dX", dX, m_d, m_dv * m_N);
  const Index N = m_N;
  const auto x = m_x.map();
  dx.resize(m_d, N);
  for (Index j = 0; j < m_dv; ++j) {
    const auto dXj = dX.middleCols(j * N, N);
    if (m_learned) {
      m_rowAcc.setZero(m_d);  // the sum over tokens in double (core/reduce.hpp)
      addRowDots(dXj, x, m_rowAcc);
      m_e.grad.col(j) += m_rowAcc.template cast<S>();
      if (j == 0)
        dx = dXj.array().colwise() * m_e.value.col(0).array();
      else
        dx.array() += dXj.array().colwise() * m_e.value.col(j).array();
    } else {
      if (j == 0)
        dx = dXj;
      else
        dx += dXj;
    }
  }
}

template <class S>
void Expansion<S>::expand(const Eigen::Ref<const MatX<S>>& x, MatX<S>& X) const {
  const Index N = x.cols();
  X.resize(m_d, m_dv * N);
  for (Index j = 0; j < m_dv; ++j) {
    if (m_learned)
      X.middleCols(j * N, N) = x.array().colwise() * m_e.value.col(j).array();
    else
      X.middleCols(j * N, N) = x;
  }
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class Expansion<float>;
extern template class Expansion<double>;
#endif

}  // namespace ddl
