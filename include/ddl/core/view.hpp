#pragma once
// ddl/core/view.hpp: a read-only view of an activation owned by someone else, what a layer keeps of
// its input for backward instead of a copy (docs/decisions.md, "Activation caches are views").
//
// Lifetime rule: the viewed matrix must stay alive, unresized and unchanged from the forward that bound
// the view until the backward that reads it. Inside ddl the owner is the block or network that made the
// activation (its outputs live until its next forward). A caller of a single layer keeps the input
// alive itself; an expression that Eigen::Ref must copy (X.cast<float>(), X.transpose(), a row) is a
// temporary of the call and must not be passed to a forward followed by a backward.
#include <Eigen/Core>

#include "ddl/core/types.hpp"

namespace ddl {

template <class S>
class ConstView {
 public:
  using Map = Eigen::Map<const MatX<S>, 0, Eigen::OuterStride<>>;

  ConstView() = default;

  // Points at X's storage (no copy); X: (rows, cols), any column stride.
  void bind(const Eigen::Ref<const MatX<S>>& X) {
    m_data = X.data();
    m_rows = X.rows();
    m_cols = X.cols();
    m_stride = X.outerStride();
  }

  // The bound matrix (an empty one before bind).
  Map map() const { return Map(m_data, m_rows, m_cols, Eigen::OuterStride<>(m_stride > 0 ? m_stride : 1)); }
  const S* data() const { return m_data; }
  Index rows() const { return m_rows; }
  Index cols() const { return m_cols; }
  Index outerStride() const { return m_stride; }

 private:
  const S* m_data = nullptr;
  Index m_rows = 0, m_cols = 0, m_stride = 0;
};

}  // namespace ddl
