#pragma once
// ddl/core/view.hpp: a read-only view of an activation owned by someone else, what a layer keeps of
// its input for backward instead of a copy (docs/decisions.md, "Activation caches are views").
//
// Lifetime rule: the viewed matrix must stay alive, unresized and unchanged from the forward that bound
// the view until the backward that reads it. Inside ddl the owner is the block or network that made the
// activation (its outputs live until its next forward). A caller of a single layer keeps the input
// alive itself. An expression that Eigen::Ref has to evaluate (X.cast<float>(), 2 * X, X.transpose())
// lives only as long as the call, so bind() detects it and keeps its own copy of that value instead:
// passing an expression is never a dangling view, it only costs the copy Eigen made anyway.
#include <Eigen/Core>

#include "ddl/core/types.hpp"

namespace ddl {
namespace detail {
// Whether an Eigen::Ref<const MatX<S>> holds its own evaluated copy of an expression (the protected
// member Ref::m_object, read through a pointer to member named in a derived class) rather than
// pointing at the caller's storage.
template <class S>
struct RefCopyProbe : Eigen::Ref<const MatX<S>> {
  static bool holdsCopy(const Eigen::Ref<const MatX<S>>& ref) {
    const MatX<S>& own = ref.*(&RefCopyProbe::m_object);
    return own.size() > 0 && own.data() == ref.data();
  }
};
}  // namespace detail

template <class S>
class ConstView {
 public:
  using Map = Eigen::Map<const MatX<S>, 0, Eigen::OuterStride<>>;

  ConstView() = default;

  // Points at X's storage (no copy); X: (rows, cols), any column stride. If X is a Ref's evaluated
  // copy of an expression (gone when the caller's statement ends), the view copies it and points there.
  void bind(const Eigen::Ref<const MatX<S>>& X) {
    m_ownsCopy = detail::RefCopyProbe<S>::holdsCopy(X);
    if (m_ownsCopy) {
      m_copy = X;
      point(m_copy.data(), m_copy.rows(), m_copy.cols(), m_copy.rows());
    } else {
      point(X.data(), X.rows(), X.cols(), X.outerStride());
    }
  }

  // Whether the last bind had to keep a copy (its argument was an evaluated expression).
  bool ownsCopy() const { return m_ownsCopy; }

  // The bound matrix (an empty one before bind).
  Map map() const { return Map(m_data, m_rows, m_cols, Eigen::OuterStride<>(m_stride > 0 ? m_stride : 1)); }
  const S* data() const { return m_data; }
  Index rows() const { return m_rows; }
  Index cols() const { return m_cols; }
  Index outerStride() const { return m_stride; }

 private:
  void point(const S* data, Index rows, Index cols, Index stride) {
    m_data = data;
    m_rows = rows;
    m_cols = cols;
    m_stride = stride;
  }
  const S* m_data = nullptr;
  Index m_rows = 0, m_cols = 0, m_stride = 0;
  bool m_ownsCopy = false;
  MatX<S> m_copy;  // only for an expression argument
};

}  // namespace ddl
