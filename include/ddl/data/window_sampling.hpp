#pragma once
// ddl/data/window_sampling.hpp: B random windows of T + 1 consecutive tokens of one sequence, as input and
// next-token target, the draw that text_corpus.hpp (bytes) and token_files.hpp (token files) share: window b
// starts at Rng(seed).below(size - T), one draw per window in order, so a seed gives the same windows
// whatever holds the sequence.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"

namespace ddl {
namespace detail {

// Checks B, T and the size (messages name fn and call a token `unit`, the sequence `whole`), resizes input
// and target to B*T (window-major) and calls copy(start, in, next) for each window: in[0, T) = the tokens at
// [start, start + T), next[0, T) = those at [start + 1, start + T + 1).
template <class CopyWindow>
void drawWindowsOf(const char* fn, std::uint64_t size, const char* unit, const char* whole, Index B, Index T,
                   std::uint64_t seed, std::vector<int>& input, std::vector<int>& target, CopyWindow&& copy) {
  require(B >= 1 && T >= 1, fn, "need B >= 1 windows of T >= 1 tokens, got B = ", B, ", T = ", T);
  require(size > static_cast<std::uint64_t>(T), fn, "a window of T + 1 = ", static_cast<std::uint64_t>(T) + 1, " ",
          unit, " does not fit in a ", whole, " of ", size, " ", unit);
  require(static_cast<std::uint64_t>(B) <= std::numeric_limits<std::size_t>::max() / 2 / static_cast<std::uint64_t>(T),
          fn, "B * T overflows: B = ", B, ", T = ", T);
  require(&input != &target, fn, "input and target must be different vectors");
  const auto len = static_cast<std::size_t>(T);
  input.resize(static_cast<std::size_t>(B) * len);
  target.resize(input.size());
  Rng rng(seed);
  const std::uint64_t starts = size - len;  // window [s, s + T] fits for s in [0, starts)
  for (std::size_t b = 0; b < static_cast<std::size_t>(B); ++b) {
    const std::uint64_t s = rng.below(starts);
    copy(s, input.data() + b * len, target.data() + b * len);
  }
}

}  // namespace detail
}  // namespace ddl
