#pragma once
// ddl/core/types.hpp: the matrix aliases every layer speaks. Tokens are columns (docs/architecture.md principle 1).
#include <Eigen/Core>

namespace ddl {

using Index = Eigen::Index;

template <class S>
using MatX = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;  // column-major, one token per column
template <class S>
using VecX = Eigen::Matrix<S, Eigen::Dynamic, 1>;
template <class S>
using RowX = Eigen::Matrix<S, 1, Eigen::Dynamic>;  // one scalar per token (beta, readouts)

}  // namespace ddl
