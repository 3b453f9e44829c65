#pragma once
// ddl/ops/delta_operator.hpp: the single-token Delta Operator A = I - beta k k^T as an Eigen operator
// object (docs/spec.md §1), modelled on Eigen's HouseholderSequence.
//
// A is never materialized unless asked for. Everything below works and costs O(d * dv):
//   Y = A * X;            // X: (d, dv)   eager, returns a plain matrix
//   Y = X * A;            // X: (n, d)
//   X.applyOnTheLeft(A);  // X <- A X, in place
//   X.applyOnTheRight(A); // X <- X A, in place (same as X *= A)
// Dense only on request, O(d^2):  MatX<S> M = A;  or  A.toDense().
//
// Lifetime: k is held the way Eigen nests it (typename KType::Nested): a REFERENCE for plain vectors,
// so the operator must not outlive k, and k must not alias the X it is applied to. Build it from a
// named vector (or a Block/Map of one), not from a temporary expression that dies at the semicolon.
//
// k need not be unit: with rho = k^T k (a guarded k has rho < 1) the eigenvalue along k is
// 1 - beta*rho, and every spectral helper reports that value, never 1 - beta.
#include <cmath>
#include <algorithm>
#include <limits>
#include <type_traits>

#include <Eigen/Core>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"

namespace ddl {
template <class KType>
class DeltaOperator;
}  // namespace ddl

namespace Eigen {
namespace internal {

template <class KType>
struct traits<ddl::DeltaOperator<KType>> {
  using Scalar = typename KType::Scalar;
  using StorageIndex = typename KType::StorageIndex;
  using StorageKind = typename KType::StorageKind;
  enum {
    RowsAtCompileTime = traits<KType>::RowsAtCompileTime,
    ColsAtCompileTime = traits<KType>::RowsAtCompileTime,
    MaxRowsAtCompileTime = traits<KType>::MaxRowsAtCompileTime,
    MaxColsAtCompileTime = traits<KType>::MaxRowsAtCompileTime,
    Flags = 0
  };
};

// A custom shape sends `MatX<S> M = A;` to the generic EigenBase2EigenBase assignment, which calls
// A.evalTo(M); without it Eigen would try to build a coefficient evaluator for A.
struct DeltaOperatorShape {};

template <class KType>
struct evaluator_traits<ddl::DeltaOperator<KType>> : public evaluator_traits_base<ddl::DeltaOperator<KType>> {
  using Shape = DeltaOperatorShape;
};

template <>
struct AssignmentKind<DenseShape, DeltaOperatorShape> {
  using Kind = EigenBase2EigenBase;
};

}  // namespace internal
}  // namespace Eigen

namespace ddl {

// Where an operator sits on the gate's path, judged by the effective gate b = beta * rho (for a unit k,
// b = beta and the k-eigenvalue is lambda = 1 - b). The bands follow the diagnostics of docs/spec.md §6:
//   Identity           |b| < 0.1             lambda in (0.9, 1.1): (almost) the skip connection
//   Contraction        0.1 <= b <= 0.9       lambda in [0.1, 0.9]: shrinks the k component
//   Projection         |b - 1| < 0.1         lambda in (-0.1, 0.1): (almost) erases the k component
//   PartialReflection  1.1 <= b <= 1.9       lambda in [-0.9, -0.1]: flips and shrinks it
//   Reflection         1.9 < b < 2.1         lambda in (-1.1, -0.9): (almost) the Householder mirror
//   Expansion          b <= -0.1 or b >= 2.1 |lambda| >= 1.1: amplifies it (outside the gate's
//                                            range [0, 2]; inverses of contractions land here)
// This is the one regime taxonomy of ddl: the gate audit (diag/gate_audit.hpp) counts tokens by it too.
// Inside the gate's range (beta in [0, 2], rho <= 1, so b in [0, 2]) the three named bands are exactly the
// thresholds of docs/spec.md §6 applied to b: identity-like b < 0.1, projection-like |b - 1| < 0.1,
// reflection-like b > 1.9.
enum class DeltaRegime { Identity, Contraction, Projection, PartialReflection, Reflection, Expansion };
inline constexpr int kDeltaRegimeCount = 6;  // the enumerators above, in order (0 .. 5)

inline const char* regimeName(DeltaRegime r) {
  switch (r) {
    case DeltaRegime::Identity: return "identity";
    case DeltaRegime::Contraction: return "contraction";
    case DeltaRegime::Projection: return "projection";
    case DeltaRegime::PartialReflection: return "partial-reflection";
    case DeltaRegime::Reflection: return "reflection";
    case DeltaRegime::Expansion: return "expansion";
  }
  return "unknown";
}

// Regime of an effective gate b = beta * rho (bands above). Throws ValueError for a non-finite b.
template <class S>
DeltaRegime classifyRegime(S b) {
  require(std::isfinite(b), "ddl::classifyRegime", "effective gate beta*rho must be finite, got ", b);
  if (std::abs(b) < S(0.1)) return DeltaRegime::Identity;
  if (std::abs(b - S(1)) < S(0.1)) return DeltaRegime::Projection;
  if (std::abs(b - S(2)) < S(0.1)) return DeltaRegime::Reflection;
  if (b > S(0) && b < S(1)) return DeltaRegime::Contraction;
  if (b > S(1) && b < S(2)) return DeltaRegime::PartialReflection;
  return DeltaRegime::Expansion;
}

template <class KType>
class DeltaOperator : public Eigen::EigenBase<DeltaOperator<KType>> {
  using Traits = Eigen::internal::traits<DeltaOperator>;
  static_assert(KType::ColsAtCompileTime == 1, "DeltaOperator: k must be a column vector (use .col(j) of a matrix)");

 public:
  enum {
    RowsAtCompileTime = Traits::RowsAtCompileTime,
    ColsAtCompileTime = Traits::ColsAtCompileTime,
    MaxRowsAtCompileTime = Traits::MaxRowsAtCompileTime,
    MaxColsAtCompileTime = Traits::MaxColsAtCompileTime
  };
  using Scalar = typename Traits::Scalar;
  using PlainMatrix = MatX<Scalar>;

  // k: (d, 1), stored by reference for plain vectors (see the header comment); beta: any real.
  DeltaOperator(const KType& k, Scalar beta) : m_k(k), m_beta(beta) {}

  Index rows() const { return m_k.size(); }
  Index cols() const { return m_k.size(); }
  const KType& k() const { return m_k; }
  Scalar beta() const { return m_beta; }
  // rho = k^T k (1 for a unit k, < 1 for a guarded one).
  Scalar rho() const { return m_k.squaredNorm(); }

  // ---- application, O(d * n), allocation-free ---------------------------------------------------
  // X <- A X = X - beta k (k^T X).   X: (d, n)
  // On return workspace holds the readouts k^T X taken before the update, shape (1, n) or (n, 1).
  // A workspace that already has n entries makes the call allocate nothing.
  template <class Dst, class Workspace>
  void applyThisOnTheLeft(Dst& X, Workspace& workspace) const {
    checkWorkspace<Workspace>();
    checkLeft("DeltaOperator::applyThisOnTheLeft", X.rows(), X.cols());
    if (workspace.size() != X.cols()) workspace.resize(X.cols());
    leftKernel(X, workspace.data());
  }
  // X <- A X; what X.applyOnTheLeft(A) calls. Allocation-free as well.   X: (d, n)
  template <class Dst>
  void applyThisOnTheLeft(Dst& X) const {
    checkLeft("DeltaOperator::applyThisOnTheLeft", X.rows(), X.cols());
    leftKernel(X, nullptr);
  }

  // X <- X A = X - beta (X k) k^T.   X: (n, d)
  // On return workspace holds X k taken before the update, n entries. A column-major X needs it as
  // scratch; with n entries already in place the call allocates nothing.
  template <class Dst, class Workspace>
  void applyThisOnTheRight(Dst& X, Workspace& workspace) const {
    checkWorkspace<Workspace>();
    checkRight("DeltaOperator::applyThisOnTheRight", X.rows(), X.cols());
    if (workspace.size() != X.rows()) workspace.resize(X.rows());
    rightKernel(X, workspace.data());
  }
  // X <- X A; what X.applyOnTheRight(A) and X *= A call. Allocates one n-vector of scratch; use the
  // workspace overload in loops.   X: (n, d)
  template <class Dst>
  void applyThisOnTheRight(Dst& X) const {
    checkRight("DeltaOperator::applyThisOnTheRight", X.rows(), X.cols());
    VecX<Scalar> workspace(X.rows());
    rightKernel(X, workspace.data());
  }

  // Y = A X, eager (like HouseholderSequence): returns a plain matrix.   X: (d, n) -> (d, n)
  template <class Other>
  typename Other::PlainObject operator*(const Eigen::MatrixBase<Other>& X) const {
    checkLeft("DeltaOperator::operator* (A * X)", X.rows(), X.cols());
    typename Other::PlainObject Y = X;
    leftKernel(Y, nullptr);
    return Y;
  }

  // ---- dense, only on request, O(d^2) -------------------------------------------------------------
  // dst <- I - beta k k^T.   dst: (d, d)
  template <class Dst>
  void evalTo(Dst& dst) const {
    const Index d = rows();
    dst.resize(d, d);
    for (Index j = 0; j < d; ++j) {
      dst.col(j) = (-m_beta * m_k.coeff(j)) * m_k;
      dst(j, j) += Scalar(1);
    }
  }
  // (d, d)
  PlainMatrix toDense() const {
    PlainMatrix M;
    evalTo(M);
    return M;
  }

  // ---- algebra: new small operators, nothing copied -----------------------------------------------
  // A is symmetric.
  DeltaOperator transpose() const { return *this; }
  DeltaOperator adjoint() const { return *this; }

  // Singular when 1 - beta rho is zero up to rounding: |1 - beta rho| <= 16 eps max(1, |beta rho|).
  // (For a unit k at beta = 1, rho is 1 only to within a few eps, so an exact test would miss it.)
  bool isSingular() const {
    const Scalar b = m_beta * rho();
    return !(std::abs(Scalar(1) - b) > Scalar(16) * Eigen::NumTraits<Scalar>::epsilon() * std::max(Scalar(1), std::abs(b)));
  }

  // Sherman-Morrison: A^{-1} = I + beta/(1 - beta rho) k k^T, i.e. the operator on the same k with
  // beta' = -beta / (1 - beta rho). Throws MathError when isSingular() (the projector-like case).
  DeltaOperator inverse() const {
    const Scalar r = rho();
    const Scalar lambda = Scalar(1) - m_beta * r;
    if (isSingular())
      throw MathError(message("DeltaOperator::inverse", "operator is singular: 1 - beta*rho = ", lambda,
                              " with beta = ", m_beta, ", rho = k^T k = ", r, " (A = I - beta k k^T has no inverse)"));
    return DeltaOperator(m_k, -m_beta / lambda);
  }

  // ---- spectrum (A is symmetric: singular values are |eigenvalues|) ---------------------------------
  // The eigenvalue along k: 1 - beta rho (1 - beta for a unit k).
  Scalar kEigenvalue() const { return Scalar(1) - m_beta * rho(); }
  // d eigenvalues: entries 0..d-2 are 1 (eigenspace k-perp), the LAST entry (index d-1) is
  // 1 - beta rho (eigenvector k). For d = 1 the single entry is 1 - beta rho.   -> (d, 1)
  VecX<Scalar> eigenvalues() const {
    VecX<Scalar> ev = VecX<Scalar>::Ones(rows());
    if (rows() > 0) ev(rows() - 1) = kEigenvalue();
    return ev;
  }
  // det A = 1 - beta rho.
  Scalar determinant() const { return kEigenvalue(); }
  // det of I_dv (x) A, the operator on the whole token state X: (d, dv) seen as vec X: (1 - beta rho)^dv.
  Scalar determinantOnState(Index dv) const {
    require(dv >= 0, "DeltaOperator::determinantOnState", "dv must be >= 0, got ", dv);
    return static_cast<Scalar>(std::pow(kEigenvalue(), static_cast<Scalar>(dv)));
  }
  // Orthogonal iff |1 - beta rho| = 1 (within tol), i.e. beta in {0, 2/rho} (or k = 0):
  // A^T A = I - beta (2 - beta rho) k k^T.
  bool isOrthogonal(Scalar tol = Eigen::NumTraits<Scalar>::dummy_precision()) const {
    return std::abs(std::abs(kEigenvalue()) - Scalar(1)) <= tol;
  }
  // 2-norm condition number max(1, |lambda|) / min(1, |lambda|) (for d = 1: 1); +inf when isSingular().
  Scalar conditionNumber() const {
    const Scalar a = std::abs(kEigenvalue());
    if (rows() == 0) return Scalar(1);
    if (isSingular()) return std::numeric_limits<Scalar>::infinity();
    if (rows() == 1) return Scalar(1);
    return std::max(Scalar(1), a) / std::min(Scalar(1), a);
  }
  // The band the effective gate beta rho falls in (see DeltaRegime).
  DeltaRegime regime() const { return classifyRegime(m_beta * rho()); }

 private:
  template <class Workspace>
  static constexpr void checkWorkspace() {
    static_assert(std::is_same<typename Workspace::Scalar, Scalar>::value, "DeltaOperator: workspace scalar type");
    static_assert(Workspace::IsVectorAtCompileTime && Workspace::InnerStrideAtCompileTime == 1,
                  "DeltaOperator: the workspace must be a contiguous vector (VecX<S> or RowX<S>)");
  }
  void checkLeft(const char* fn, Index r, Index c) const {
    if (r != rows())
      throw ShapeError(message(fn, "operator A has shape ", shapeString(rows(), cols()), " but X has shape ",
                               shapeString(r, c), "; A X needs X with ", rows(), " rows"));
  }
  void checkRight(const char* fn, Index r, Index c) const {
    if (c != cols())
      throw ShapeError(message(fn, "X has shape ", shapeString(r, c), " but operator A has shape ",
                               shapeString(rows(), cols()), "; X A needs X with ", cols(), " columns"));
  }

  // Column-major X: one fused pass per column (dot, then axpy while the column is in L1).
  // Row-major X: accumulate k^T X row by row, then update row by row. Plain vector ops on Maps of
  // the workspace only, so no temporaries: this is what makes the calls allocation-free.
  // ws: n scalars for the readouts k^T X, or nullptr.
  template <class Dst>
  void leftKernel(Dst& X, Scalar* ws) const {
    const Index n = X.cols();
    if (!Dst::IsRowMajor) {
      for (Index j = 0; j < n; ++j) {
        const Scalar p = m_k.dot(X.col(j));
        if (ws) ws[j] = p;
        if (m_beta != Scalar(0)) X.col(j) -= (m_beta * p) * m_k;
      }
      return;
    }
    // A row-major X needs all n readouts at once; without a caller workspace, one allocation.
    RowX<Scalar> own;
    if (!ws) {
      own.resize(n);
      ws = own.data();
    }
    Eigen::Map<RowX<Scalar>> p(ws, n);
    p.setZero();
    for (Index i = 0; i < X.rows(); ++i) p += m_k.coeff(i) * X.row(i);
    if (m_beta == Scalar(0)) return;
    for (Index i = 0; i < X.rows(); ++i) X.row(i) -= (m_beta * m_k.coeff(i)) * p;
  }

  // Column-major X: w = X k accumulated column by column, then X.col(j) -= beta k_j w.
  // Row-major X: one fused pass per row.   ws: n scalars, receives X k.
  template <class Dst>
  void rightKernel(Dst& X, Scalar* ws) const {
    const Index n = X.rows(), d = X.cols();
    Eigen::Map<VecX<Scalar>> w(ws, n);
    if (Dst::IsRowMajor) {
      for (Index i = 0; i < n; ++i) {
        const Scalar p = X.row(i).dot(m_k.transpose());
        w(i) = p;
        if (m_beta != Scalar(0)) X.row(i) -= (m_beta * p) * m_k.transpose();
      }
      return;
    }
    w.setZero();
    for (Index j = 0; j < d; ++j) w += m_k.coeff(j) * X.col(j);
    if (m_beta == Scalar(0)) return;
    for (Index j = 0; j < d; ++j) X.col(j) -= (m_beta * m_k.coeff(j)) * w;
  }

  typename KType::Nested m_k;
  Scalar m_beta;
};

// Y = X A, eager: returns a plain matrix.   X: (n, d) -> (n, d)
template <class Other, class KType>
typename Other::PlainObject operator*(const Eigen::MatrixBase<Other>& X, const DeltaOperator<KType>& A) {
  if (X.cols() != A.cols())
    throw ShapeError(message("DeltaOperator::operator* (X * A)", "X has shape ", shapeOf(X), " but operator A has shape ",
                             shapeOf(A), "; X A needs X with ", A.cols(), " columns"));
  typename Other::PlainObject Y = X;
  A.applyThisOnTheRight(Y);
  return Y;
}

// Factory: A = I - beta k k^T.   k: (d, 1). Holds k by reference (see the header comment).
template <class Derived>
DeltaOperator<Derived> deltaOperator(const Eigen::MatrixBase<Derived>& k, typename Derived::Scalar beta) {
  return DeltaOperator<Derived>(k.derived(), beta);
}

// Single-token synchronous rank-1 write, in place: X <- X + beta k (v^T - k^T X) = A X + beta k v^T.
// k: (d, 1), v: dv entries (row or column), X: (d, dv). Allocation-free.
template <class DK, class DV, class DX>
void deltaWriteToken(const Eigen::MatrixBase<DK>& k, typename DK::Scalar beta, const Eigen::MatrixBase<DV>& v,
                     const Eigen::MatrixBase<DX>& Xconst) {
  using S = typename DK::Scalar;
  auto& X = const_cast<Eigen::MatrixBase<DX>&>(Xconst);  // writable expressions (FunctionsTakingEigenTypes)
  const char* fn = "ddl::deltaWriteToken";
  checkShape(fn, "k", k, -1, 1);
  if (X.rows() != k.rows() || (v.rows() != 1 && v.cols() != 1) || v.size() != X.cols())
    throw ShapeError(message(fn, "X has shape ", shapeOf(X), ", k has shape ", shapeOf(k), ", v has shape ",
                             shapeOf(v), "; expected X (", k.rows(), ", dv) and v with dv = X.cols() entries"));
  for (Index j = 0; j < X.cols(); ++j) {
    const S delta = v.coeff(j) - k.col(0).dot(X.col(j));
    X.col(j) += (beta * delta) * k.col(0);
  }
}

}  // namespace ddl
