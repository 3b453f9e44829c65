#pragma once
// ddl/core/reduce.hpp: sums over tokens that feed parameter gradients, accumulated in double.
//
// A bias or gain gradient is a sum of N per-token terms that may cancel by orders of magnitude (a gate
// bias of a trained net: 256 terms cancelling ~3700 : 1). Summed in float, the rounding of the running
// sum grows with N and is multiplied by that cancellation. Accumulated in double it is ~2^-29 times
// smaller, so what is left is the float rounding of the terms themselves and one final rounding: an
// error that does not grow with N (docs/decisions.md, "Float reductions over tokens").
// Every function here runs on one thread in a fixed order, so results are the same bits on any
// thread count. The accumulator is double for float and double scalars alike.
#include <Eigen/Core>

#include "ddl/core/types.hpp"

namespace ddl {

// The accumulator of a sum over tokens of S values.
template <class S>
struct SumAccumulator {
  using type = double;
};
template <>
struct SumAccumulator<long double> {
  using type = long double;
};
template <class S>
using SumType = typename SumAccumulator<S>::type;

// sum_n a(n), a any dense row or column expression (read once), accumulated in double in 8 fixed
// lanes (independent partial sums, so the loop vectorises without reordering), lanes added pairwise.
template <class D>
SumType<typename D::Scalar> sumWide(const Eigen::DenseBase<D>& a) {
  using A = SumType<typename D::Scalar>;
  constexpr Index kLanes = 8;
  A lane[kLanes] = {};
  const Index n = a.size(), full = n - n % kLanes;
  const auto& v = a.derived();
  for (Index i = 0; i < full; i += kLanes)
    for (Index l = 0; l < kLanes; ++l) lane[l] += static_cast<A>(v(i + l));
  for (Index i = full; i < n; ++i) lane[i - full] += static_cast<A>(v(i));
  for (Index w = kLanes / 2; w >= 1; w /= 2)
    for (Index l = 0; l < w; ++l) lane[l] += lane[l + w];
  return lane[0];
}

// sum_n a(n) b(n) of two expressions of equal size, accumulated like sumWide.
template <class DA, class DB>
SumType<typename DA::Scalar> dotWide(const Eigen::DenseBase<DA>& a, const Eigen::DenseBase<DB>& b) {
  using A = SumType<typename DA::Scalar>;
  constexpr Index kLanes = 8;
  A lane[kLanes] = {};
  const Index n = a.size(), full = n - n % kLanes;
  const auto& x = a.derived();
  const auto& y = b.derived();
  for (Index i = 0; i < full; i += kLanes)
    for (Index l = 0; l < kLanes; ++l) lane[l] += static_cast<A>(x(i + l)) * static_cast<A>(y(i + l));
  for (Index i = full; i < n; ++i) lane[i - full] += static_cast<A>(x(i)) * static_cast<A>(y(i));
  for (Index w = kLanes / 2; w >= 1; w /= 2)
    for (Index l = 0; l < w; ++l) lane[l] += lane[l + w];
  return lane[0];
}

// acc(r) += sum_n M(r, n): per-row sums of a (rows, N) expression, column by column (contiguous,
// vectorised along the rows). acc: (rows) in the wide type, caller-owned so that no call allocates.
template <class D>
void addRowSums(const Eigen::MatrixBase<D>& M, Eigen::Ref<VecX<SumType<typename D::Scalar>>> acc) {
  using A = SumType<typename D::Scalar>;
  eigen_assert(acc.size() == M.rows());
  for (Index n = 0; n < M.cols(); ++n) acc += M.col(n).template cast<A>();
}

// acc(r) += sum_n M(r, n) X(r, n): per-row sums of an elementwise product, like addRowSums.
template <class DM, class DX>
void addRowDots(const Eigen::MatrixBase<DM>& M, const Eigen::MatrixBase<DX>& X,
                Eigen::Ref<VecX<SumType<typename DM::Scalar>>> acc) {
  using A = SumType<typename DM::Scalar>;
  eigen_assert(acc.size() == M.rows() && X.rows() == M.rows() && X.cols() == M.cols());
  for (Index n = 0; n < M.cols(); ++n)
    acc.array() += M.col(n).template cast<A>().array() * X.col(n).template cast<A>().array();
}

}  // namespace ddl
