#pragma once
// ddl/ops/delta_write.hpp: the batched Delta kernels and their vector-Jacobian products (docs/spec.md §1, §5).
//
// Layout (docs/architecture.md principle 1, tokens are columns). For N tokens and value width dv:
//   K     : (d, N)       one unit-ish direction per token
//   beta  : (1, N)       one gate per token
//   V     : (dv, N)      one value per token
//   X, Y  : (d, dv*N)    value channel j of every token is X.middleCols(j*N, N)
//   Delta : (dv, N)      discrepancy v - X^T k, cached by the write for its backward
//
// Every kernel is one pass over the columns: for each token the dot products k.x_j are taken and
// the axpy follows while the column is still in L1, which keeps the kernels at the memory-bandwidth
// limit (docs/architecture.md, the machine). No kernel allocates for direct-access operands (matrices, maps,
// blocks); an expression operand is evaluated once, before the loop (detail::Operand). Y may be the
// same object as X (in place), and dX may be the same object as G. Columns are split over OpenMP
// threads when the work is large; nothing inside a parallel loop can throw or allocate.
#include <type_traits>

#include <Eigen/Core>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

namespace detail {

// Checks the shared operand shapes and returns dv.
template <class DK, class DB, class DX>
Index checkDeltaOperands(const char* fn, const Eigen::MatrixBase<DK>& K, const Eigen::MatrixBase<DB>& beta,
                         const Eigen::MatrixBase<DX>& X) {
  const Index d = K.rows(), N = K.cols();
  checkShape(fn, "beta", beta, 1, N);
  if (X.rows() != d || (N == 0 ? X.cols() != 0 : X.cols() % N != 0))
    throw ShapeError(message(fn, "X has shape ", shapeOf(X), ", expected (", d, ", dv*", N, ") for K of shape ",
                             shapeOf(K)));
  return N == 0 ? 1 : X.cols() / N;
}

template <class Dst>
void resizeIfNeeded(Dst& M, Index rows, Index cols) {
  if (M.rows() != rows || M.cols() != cols) M.resize(rows, cols);
}

// An operand the token loop can index without evaluating anything: a reference when it has direct
// access (a matrix, Map, Ref, block), else its evaluation into a plain matrix, made here, before the
// parallel loop. Indexing a product's columns inside the loop would evaluate (and allocate) the whole
// product on every access, inside an OpenMP region where an exception (bad_alloc) ends the process.
template <class D>
using Operand = std::conditional_t<(D::Flags & Eigen::DirectAccessBit) != 0, const D&, const typename D::PlainObject>;

// Runs token(n) for every token n in [0, N), split over OpenMP threads when the work (d*dv*N
// multiply-adds) is large. token must neither throw nor allocate: it may run inside a parallel region.
template <class Token>
void forEachToken(Index N, Index work, const Token& token) {
  const bool par = work >= kParallelMinWork;
  (void)par;
  DDL_OMP(parallel for schedule(static) if (par))
  for (Index n = 0; n < N; ++n) token(n);
}

// The forward kernels' loop: channel(n, j, c, k, b) for every token n, with k = K.col(n) and
// b = beta(0, n), and every value channel j, whose column of X and Y is c = j*N + n.
template <class KM, class BM, class Channel>
void forEachChannel(const KM& K, const BM& beta, Index dv, const Channel& channel) {
  const Index N = K.cols();
  forEachToken(N, K.rows() * N * dv, [&](Index n) {
    const auto k = K.col(n);
    const typename KM::Scalar b = beta(0, n);
    for (Index j = 0; j < dv; ++j) channel(n, j, j * N + n, k, b);
  });
}

// The backward kernels' loop: channel(n, j, c, k, b, g, db) as in forEachChannel, with g = k . G.col(c);
// it adds the channel's terms to db and to dK.col(n), which start at zero for each token, and the token's
// db becomes dBeta(0, n). Resizes dK to (d, N) and dBeta to (1, N).
template <class KM, class BM, class GM, class S, class Channel>
void forEachChannelBackward(const KM& K, const BM& beta, const GM& G, Index dv, MatX<S>& dK, RowX<S>& dBeta,
                            const Channel& channel) {
  const Index d = K.rows(), N = K.cols();
  resizeIfNeeded(dK, d, N);
  resizeIfNeeded(dBeta, 1, N);
  forEachToken(N, d * N * dv, [&](Index n) {
    const auto k = K.col(n);
    const S b = beta(0, n);
    S db = 0;
    dK.col(n).setZero();
    for (Index j = 0; j < dv; ++j) {
      const Index c = j * N + n;
      channel(n, j, c, k, b, S(k.dot(G.col(c))), db);
    }
    dBeta(0, n) = db;
  });
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Delta Operator, Y = A X with A = I - beta k k^T per token, applied to every value channel.
// K: (d, N), beta: (1, N), X: (d, dv*N) -> Y: (d, dv*N)
template <class DK, class DB, class DX>
void deltaApply(const Eigen::MatrixBase<DK>& KIn, const Eigen::MatrixBase<DB>& betaIn, const Eigen::MatrixBase<DX>& XIn,
                MatX<typename DK::Scalar>& Y) {
  const detail::Operand<DK> K = KIn.derived();
  const detail::Operand<DB> beta = betaIn.derived();
  const detail::Operand<DX> X = XIn.derived();
  using S = typename DK::Scalar;
  const Index dv = detail::checkDeltaOperands("ddl::deltaApply", K, beta, X);
  const Index d = K.rows(), N = K.cols();
  detail::resizeIfNeeded(Y, d, dv * N);
  detail::forEachChannel(K, beta, dv, [&](Index, Index, Index c, const auto& k, S b) {
    const S p = k.dot(X.col(c));
    Y.col(c) = X.col(c) - (b * p) * k;
  });
}

// Backward of deltaApply. G = dL/dY. With p = X_j^T k and g = G_j^T k per channel (docs/spec.md §5):
//   dX = A G,  dbeta = -sum_j g_j p_j,  dk = -beta sum_j (G_j p_j + X_j g_j)
// K: (d, N), beta: (1, N), X, G: (d, dv*N) -> dX: (d, dv*N), dK: (d, N), dBeta: (1, N); all overwritten.
template <class DK, class DB, class DX, class DG>
void deltaApplyBackward(const Eigen::MatrixBase<DK>& KIn, const Eigen::MatrixBase<DB>& betaIn,
                        const Eigen::MatrixBase<DX>& XIn, const Eigen::MatrixBase<DG>& GIn,
                        MatX<typename DK::Scalar>& dX, MatX<typename DK::Scalar>& dK,
                        RowX<typename DK::Scalar>& dBeta) {
  const detail::Operand<DK> K = KIn.derived();
  const detail::Operand<DB> beta = betaIn.derived();
  const detail::Operand<DX> X = XIn.derived();
  const detail::Operand<DG> G = GIn.derived();
  using S = typename DK::Scalar;
  const char* fn = "ddl::deltaApplyBackward";
  const Index dv = detail::checkDeltaOperands(fn, K, beta, X);
  const Index d = K.rows(), N = K.cols();
  checkShape(fn, "G", G, d, dv * N);
  detail::resizeIfNeeded(dX, d, dv * N);
  detail::forEachChannelBackward(K, beta, G, dv, dK, dBeta,
                                 [&](Index n, Index, Index c, const auto& k, S b, S g, S& db) {
                                   const S p = k.dot(X.col(c));
                                   db -= g * p;
                                   dK.col(n) -= b * (p * G.col(c) + g * X.col(c));
                                   dX.col(c) = G.col(c) - (b * g) * k;
                                 });
}

// ---------------------------------------------------------------------------------------------
// Synchronous rank-1 write, Y = A X + beta k v^T = X + beta k (v^T - k^T X) per token.
// K: (d, N), beta: (1, N), V: (dv, N), X: (d, dv*N) -> Y: (d, dv*N), Delta = V - X^T K: (dv, N)
template <class DK, class DB, class DV, class DX>
void deltaWrite(const Eigen::MatrixBase<DK>& KIn, const Eigen::MatrixBase<DB>& betaIn, const Eigen::MatrixBase<DV>& VIn,
                const Eigen::MatrixBase<DX>& XIn, MatX<typename DK::Scalar>& Y, MatX<typename DK::Scalar>& Delta) {
  const detail::Operand<DK> K = KIn.derived();
  const detail::Operand<DB> beta = betaIn.derived();
  const detail::Operand<DV> V = VIn.derived();
  const detail::Operand<DX> X = XIn.derived();
  using S = typename DK::Scalar;
  const char* fn = "ddl::deltaWrite";
  const Index dv = detail::checkDeltaOperands(fn, K, beta, X);
  const Index d = K.rows(), N = K.cols();
  checkShape(fn, "V", V, dv, N);
  detail::resizeIfNeeded(Y, d, dv * N);
  detail::resizeIfNeeded(Delta, dv, N);
  detail::forEachChannel(K, beta, dv, [&](Index n, Index j, Index c, const auto& k, S b) {
    const S delta = V(j, n) - k.dot(X.col(c));
    Delta(j, n) = delta;
    Y.col(c) = X.col(c) + (b * delta) * k;
  });
}

// Backward of deltaWrite. With g = G_j^T k and the cached delta (docs/spec.md §5):
//   dX = A G,  dv = beta g,  dbeta = sum_j g_j delta_j,  dk = beta sum_j (G_j delta_j - X_j g_j)
// K: (d, N), beta: (1, N), X, G: (d, dv*N), Delta: (dv, N)
//   -> dX: (d, dv*N), dK: (d, N), dBeta: (1, N), dV: (dv, N); all overwritten.
template <class DK, class DB, class DX, class DD, class DG>
void deltaWriteBackward(const Eigen::MatrixBase<DK>& KIn, const Eigen::MatrixBase<DB>& betaIn,
                        const Eigen::MatrixBase<DX>& XIn, const Eigen::MatrixBase<DD>& DeltaIn,
                        const Eigen::MatrixBase<DG>& GIn, MatX<typename DK::Scalar>& dX, MatX<typename DK::Scalar>& dK,
                        RowX<typename DK::Scalar>& dBeta, MatX<typename DK::Scalar>& dV) {
  const detail::Operand<DK> K = KIn.derived();
  const detail::Operand<DB> beta = betaIn.derived();
  const detail::Operand<DX> X = XIn.derived();
  const detail::Operand<DD> Delta = DeltaIn.derived();
  const detail::Operand<DG> G = GIn.derived();
  using S = typename DK::Scalar;
  const char* fn = "ddl::deltaWriteBackward";
  const Index dv = detail::checkDeltaOperands(fn, K, beta, X);
  const Index d = K.rows(), N = K.cols();
  checkShape(fn, "Delta", Delta, dv, N);
  checkShape(fn, "G", G, d, dv * N);
  detail::resizeIfNeeded(dX, d, dv * N);
  detail::resizeIfNeeded(dV, dv, N);
  detail::forEachChannelBackward(K, beta, G, dv, dK, dBeta,
                                 [&](Index n, Index j, Index c, const auto& k, S b, S g, S& db) {
                                   const S delta = Delta(j, n);
                                   db += g * delta;
                                   dV(j, n) = b * g;
                                   dK.col(n) += b * (delta * G.col(c) - g * X.col(c));  // before dX: dX may alias G
                                   dX.col(c) = G.col(c) - (b * g) * k;
                                 });
}

// ---------------------------------------------------------------------------------------------
// Write-only control (ablation), Y = X + beta k v^T per token: writes without erasing.
// K: (d, N), beta: (1, N), V: (dv, N), X: (d, dv*N) -> Y: (d, dv*N)
template <class DK, class DB, class DV, class DX>
void writeOnly(const Eigen::MatrixBase<DK>& KIn, const Eigen::MatrixBase<DB>& betaIn, const Eigen::MatrixBase<DV>& VIn,
               const Eigen::MatrixBase<DX>& XIn, MatX<typename DK::Scalar>& Y) {
  const detail::Operand<DK> K = KIn.derived();
  const detail::Operand<DB> beta = betaIn.derived();
  const detail::Operand<DV> V = VIn.derived();
  const detail::Operand<DX> X = XIn.derived();
  using S = typename DK::Scalar;
  const char* fn = "ddl::writeOnly";
  const Index dv = detail::checkDeltaOperands(fn, K, beta, X);
  const Index d = K.rows(), N = K.cols();
  checkShape(fn, "V", V, dv, N);
  detail::resizeIfNeeded(Y, d, dv * N);
  detail::forEachChannel(K, beta, dv, [&](Index n, Index j, Index c, const auto& k, S b) {
    Y.col(c) = X.col(c) + (b * V(j, n)) * k;
  });
}

// Backward of writeOnly: dX = G, dv = beta g, dbeta = sum_j g_j v_j, dk = beta sum_j v_j G_j.
// K: (d, N), beta: (1, N), V: (dv, N), G: (d, dv*N) -> dX: (d, dv*N), dK: (d, N), dBeta: (1, N), dV: (dv, N)
template <class DK, class DB, class DV, class DG>
void writeOnlyBackward(const Eigen::MatrixBase<DK>& KIn, const Eigen::MatrixBase<DB>& betaIn,
                       const Eigen::MatrixBase<DV>& VIn, const Eigen::MatrixBase<DG>& GIn, MatX<typename DK::Scalar>& dX,
                       MatX<typename DK::Scalar>& dK, RowX<typename DK::Scalar>& dBeta,
                       MatX<typename DK::Scalar>& dV) {
  const detail::Operand<DK> K = KIn.derived();
  const detail::Operand<DB> beta = betaIn.derived();
  const detail::Operand<DV> V = VIn.derived();
  const detail::Operand<DG> G = GIn.derived();
  using S = typename DK::Scalar;
  const char* fn = "ddl::writeOnlyBackward";
  const Index dv = detail::checkDeltaOperands(fn, K, beta, G);
  const Index N = K.cols();
  checkShape(fn, "V", V, dv, N);
  detail::resizeIfNeeded(dV, dv, N);
  detail::forEachChannelBackward(K, beta, G, dv, dK, dBeta,
                                 [&](Index n, Index j, Index c, const auto&, S b, S g, S& db) {
                                   db += g * V(j, n);
                                   dV(j, n) = b * g;
                                   dK.col(n) += (b * V(j, n)) * G.col(c);
                                 });
  dX = G;  // identity Jacobian
}

// ---------------------------------------------------------------------------------------------
// Additive baseline (plain residual), Y = X + H. H is (d, N), broadcast to every value channel,
// or (d, dv*N), one branch output per channel.
// H: (d, N) or (d, dv*N), X: (d, dv*N) -> Y: (d, dv*N)
template <class DH, class DX>
void additiveResidual(const Eigen::MatrixBase<DH>& H, const Eigen::MatrixBase<DX>& X, MatX<typename DH::Scalar>& Y) {
  const char* fn = "ddl::additiveResidual";
  const Index d = X.rows(), N = H.cols();
  if (H.rows() != d || N == 0 || X.cols() % N != 0)
    throw ShapeError(message(fn, "H has shape ", shapeOf(H), ", expected (", d, ", N) with N dividing the ",
                             X.cols(), " columns of X ", shapeOf(X)));
  const Index dv = X.cols() / N;
  detail::resizeIfNeeded(Y, d, X.cols());
  for (Index j = 0; j < dv; ++j) Y.middleCols(j * N, N) = X.middleCols(j * N, N) + H;
}

// Backward of additiveResidual: dX = G, dH = sum over channels of G (or G itself when H had dv*N columns).
// G: (d, dv*N), H columns N -> dX: (d, dv*N), dH: (d, N); both overwritten.
template <class DG>
void additiveResidualBackward(const Eigen::MatrixBase<DG>& G, Index hCols, MatX<typename DG::Scalar>& dX,
                              MatX<typename DG::Scalar>& dH) {
  const char* fn = "ddl::additiveResidualBackward";
  if (hCols <= 0 || G.cols() % hCols != 0)
    throw ShapeError(message(fn, "H has ", hCols, " columns, which does not divide the ", G.cols(),
                             " columns of G ", shapeOf(G)));
  const Index dv = G.cols() / hCols;
  detail::resizeIfNeeded(dH, G.rows(), hCols);
  dH = G.middleCols(0, hCols);
  for (Index j = 1; j < dv; ++j) dH += G.middleCols(j * hCols, hCols);
  dX = G;
}

}  // namespace ddl
