#pragma once
// ddl/core/swap_each.hpp: a module's swapScratch written once (docs/decisions.md, "Scratch shared between
// blocks"). A module lists its dead buffers and sub-modules in one std::tie; swapEach exchanges each with
// the same entry of another module's list: a sub-module by its swapScratch, a matrix by its swap.
#include <cstddef>
#include <tuple>
#include <utility>

namespace ddl {
namespace detail {
// A sub-module (preferred, int beats long) by its swapScratch, anything else by its swap.
template <class T>
auto swapOne(T& a, T& b, int) noexcept -> decltype(a.swapScratch(b)) {
  a.swapScratch(b);
}
template <class T>
void swapOne(T& a, T& b, long) noexcept {
  a.swap(b);
}

template <class A, std::size_t... I>
void swapEach(const A& a, const A& b, std::index_sequence<I...>) noexcept {
  (swapOne(std::get<I>(a), std::get<I>(b), 0), ...);
}
}  // namespace detail

// a, b: std::tie of the same members of two modules of one shape.
template <class... T>
void swapEach(const std::tuple<T&...>& a, const std::tuple<T&...>& b) noexcept {
  detail::swapEach(a, b, std::index_sequence_for<T...>{});
}

}  // namespace ddl
