#pragma once
// ddl/core/swap_each.hpp: a module's swapScratch written once (docs/decisions.md, "Scratch shared between
// blocks"). A module lists its dead buffers and sub-modules in one std::tie; swapEach exchanges each with
// the same entry of another module's list: a sub-module by its swapScratch, a matrix by its swap.
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

namespace ddl {
namespace detail {
template <class T, class = void>
struct HasSwapScratch : std::false_type {};
template <class T>
struct HasSwapScratch<T, std::void_t<decltype(std::declval<T&>().swapScratch(std::declval<T&>()))>> : std::true_type {};

template <class T>
void swapOne(T& a, T& b) noexcept {
  if constexpr (HasSwapScratch<T>::value)
    a.swapScratch(b);
  else
    a.swap(b);
}

template <class A, std::size_t... I>
void swapEach(const A& a, const A& b, std::index_sequence<I...>) noexcept {
  (swapOne(std::get<I>(a), std::get<I>(b)), ...);
}
}  // namespace detail

// a, b: std::tie of the same members of two modules of one shape.
template <class... T>
void swapEach(const std::tuple<T&...>& a, const std::tuple<T&...>& b) noexcept {
  detail::swapEach(a, b, std::index_sequence_for<T...>{});
}

}  // namespace ddl
