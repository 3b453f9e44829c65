#pragma once
// ddl/core/alias.hpp: detect an output that shares memory with an input. A layer that resizes its
// output or writes it while still reading the input would read freed or overwritten memory, so
// layers documented "must not alias" refuse such calls with a clear error instead.
#include <cstddef>
#include <functional>
#include <utility>

#include <Eigen/Core>

#include "ddl/core/error.hpp"

namespace ddl {
namespace detail {

// [first, last) element addresses spanned by a column-major dense expression with direct access.
template <class M>
std::pair<const void*, const void*> storageSpan(const M& m) {
  if (m.size() == 0) return {nullptr, nullptr};
  const auto* first = m.data();
  const auto* last = first + (m.cols() - 1) * m.outerStride() + m.rows();
  return {static_cast<const void*>(first), static_cast<const void*>(last)};
}

// True when the storage of a and b overlaps (empty matrices never overlap).
template <class A, class B>
bool sharesStorage(const A& a, const B& b) {
  const auto sa = storageSpan(a), sb = storageSpan(b);
  if (sa.first == nullptr || sb.first == nullptr) return false;
  const std::less<const void*> lt;
  return lt(sa.first, sb.second) && lt(sb.first, sa.second);
}

}  // namespace detail

// Throws ddl::Error "fn: <outName> must not alias <inName>" when out and in share memory.
template <class In, class Out>
void requireNoAlias(const char* fn, const char* inName, const In& in, const char* outName, const Out& out) {
  if (detail::sharesStorage(in, out))
    throw Error(message(fn, outName, " must not alias ", inName, " (they share memory); pass a separate matrix"));
}

}  // namespace ddl
