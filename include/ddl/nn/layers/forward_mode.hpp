#pragma once
// ddl/nn/layers/forward_mode.hpp: the two modes of one forward path (docs/decisions.md, "Inference forward").
//   Train      keeps what backward reads and runs the sub-modules' forward
//   Inference  keeps nothing backward reads and runs the sub-modules' forwardInference (same output, bit for bit)
// A module writes its forward once, as a private run(..., mode), and calls its sub-modules through forwardAs.
#include <utility>

namespace ddl {

enum class ForwardMode { Train, Inference };

// m.forward(args...) in Train mode, m.forwardInference(args...) in Inference mode; returns what it returns.
template <class M, class... A>
decltype(auto) forwardAs(ForwardMode mode, M& m, A&&... args) {
  if (mode == ForwardMode::Train) return m.forward(std::forward<A>(args)...);
  return m.forwardInference(std::forward<A>(args)...);
}

// The same for a module applied more than once per step, whose forward keeps what backward reads in a
// cache of the caller's: m.forward(args..., cache) in Train mode, m.forwardInference(args...) in Inference.
template <class M, class Cache, class... A>
void forwardKeepingAs(ForwardMode mode, M& m, Cache& cache, A&&... args) {
  if (mode == ForwardMode::Train)
    m.forward(std::forward<A>(args)..., cache);
  else
    m.forwardInference(std::forward<A>(args)...);
}

}  // namespace ddl
