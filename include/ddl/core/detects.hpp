#pragma once
// ddl/core/detects.hpp: the detection idiom, once. Detects<Probe, T...> is std::true_type when Probe<T...>
// names a type, i.e. when the types have what Probe asks for, else std::false_type:
//   template <class Model>
//   using GradientsReadyProbe = decltype(std::declval<Model&>().setGradientsReady(GradientsReady()));
//   if constexpr (detail::Detects<GradientsReadyProbe, Model>::value) ...
// Every compile-time question "does this model, task, source or optimizer have X" is asked with it.
#include <type_traits>

namespace ddl {
namespace detail {

template <class Void, template <class...> class Probe, class... Ts>
struct DetectsImpl : std::false_type {};
template <template <class...> class Probe, class... Ts>
struct DetectsImpl<std::void_t<Probe<Ts...>>, Probe, Ts...> : std::true_type {};

template <template <class...> class Probe, class... Ts>
using Detects = DetectsImpl<void, Probe, Ts...>;

}  // namespace detail
}  // namespace ddl
