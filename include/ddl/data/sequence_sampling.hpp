#pragma once
// ddl/data/sequence_sampling.hpp: distinct random token sequences, for the synthetic state-tracking
// tasks (data/state_tracking.hpp). A sequence is one prefix token (the initial state, one of
// `prefixRadix` values; radix 1 when a task has none) and `steps` step tokens (each one of `stepRadix`
// values). The train, validation and test sequences are drawn together without replacement and then
// cut into the splits, so no held-out sequence occurs in training (docs/claims.md, "Data").
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

// How many sequences each split gets.
struct SplitSizes {
  Index train = 0;
  Index validation = 0;
  Index test = 0;
  Index total() const { return train + validation + test; }
};

// Where a model finds step t's input in a sample's column (steps are 0-based): the prefix (the initial
// state; width 0 when the task has none) in rows [0, prefixWidth), then step t in rows
// [stepOffset(t), stepOffset(t) + stepWidth). Step-major, so a depth-as-time model feeds
// X.middleRows(stepOffset(t), stepWidth) into block t.
struct StepLayout {
  Index prefixWidth = 0;
  Index steps = 0;
  Index stepWidth = 0;
  Index features() const { return prefixWidth + steps * stepWidth; }
  Index stepOffset(Index t) const { return prefixWidth + t * stepWidth; }
};

// prefixRadix * stepRadix^steps, exact, or UINT64_MAX when it is at least that large (saturated: a
// request of fewer than 2^63 sequences then always fits).
inline std::uint64_t sequenceCount(std::uint64_t prefixRadix, std::uint64_t stepRadix, Index steps) {
  const std::uint64_t cap = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t count = prefixRadix;
  for (Index t = 0; t < steps && count != cap && count != 0; ++t)
    count = (stepRadix != 0 && count > cap / stepRadix) ? cap : count * stepRadix;
  return count;
}

// "27", or "more than 18446744073709551614" for a saturated count.
inline std::string sequenceCountString(std::uint64_t count) {
  if (count == std::numeric_limits<std::uint64_t>::max())
    return "more than " + std::to_string(count - 1);
  return std::to_string(count);
}

// Throws ValueError unless the sizes are >= 0 and train + validation + test distinct sequences exist
// among `count`. `task` describes the task and its parameters, `formula` how count follows from them
// ("cups * (cups(cups-1)/2)^steps"); both appear in the message with fn.
inline void requireDistinctSplits(const char* fn, const std::string& task, const std::string& formula,
                                  std::uint64_t count, const SplitSizes& sizes) {
  require(sizes.train >= 0 && sizes.validation >= 0 && sizes.test >= 0, fn, "split sizes must be >= 0, got train ",
          sizes.train, ", validation ", sizes.validation, ", test ", sizes.test);
  require(static_cast<std::uint64_t>(sizes.total()) <= count, fn, task, " has ", sequenceCountString(count),
          " distinct sequences (", formula, "), fewer than train + validation + test = ", sizes.train, " + ",
          sizes.validation, " + ", sizes.test, " = ", sizes.total(),
          ": the held-out sequences could not all be unseen in training; lower the sizes or lengthen the sequences");
}

// `count` distinct sequences in a uniformly random order, each as {prefix, step 0, ..., step steps-1}.
// Requires count <= sequenceCount(prefixRadix, stepRadix, steps) (checked). Deterministic in rng.
inline std::vector<std::vector<std::uint32_t>> sampleDistinctSequences(std::uint32_t prefixRadix,
                                                                       std::uint32_t stepRadix, Index steps,
                                                                       Index count, Rng& rng) {
  const char* fn = "ddl::sampleDistinctSequences";
  require(prefixRadix >= 1 && stepRadix >= 1, fn, "radices must be >= 1, got prefix ", prefixRadix, ", step ",
          stepRadix);
  require(steps >= 0 && count >= 0, fn, "steps and count must be >= 0, got ", steps, " and ", count);
  const std::uint64_t space = sequenceCount(prefixRadix, stepRadix, steps);
  require(static_cast<std::uint64_t>(count) <= space, fn, "cannot draw ", count, " distinct sequences from ",
          sequenceCountString(space));
  const auto len = static_cast<std::size_t>(steps) + 1;
  std::vector<std::vector<std::uint32_t>> out;
  out.reserve(static_cast<std::size_t>(count));
  if (space <= (std::uint64_t{1} << 62)) {
    // Robert Floyd's sampling of `count` distinct indices from [0, space), then a shuffle for the order;
    // index = prefix + prefixRadix * (step0 + stepRadix * (step1 + ...)).
    std::unordered_set<std::uint64_t> chosen;
    std::vector<std::uint64_t> picked;
    picked.reserve(static_cast<std::size_t>(count));
    for (std::uint64_t j = space - static_cast<std::uint64_t>(count); j < space; ++j) {
      std::uint64_t t = rng.below(j + 1);
      if (chosen.count(t) != 0) t = j;
      chosen.insert(t);
      picked.push_back(t);
    }
    shuffle(picked.begin(), picked.end(), rng);
    for (std::uint64_t index : picked) {
      std::vector<std::uint32_t> seq(len);
      seq[0] = static_cast<std::uint32_t>(index % prefixRadix);
      index /= prefixRadix;
      for (std::size_t t = 1; t < len; ++t) {
        seq[t] = static_cast<std::uint32_t>(index % stepRadix);
        index /= stepRadix;
      }
      out.push_back(std::move(seq));
    }
    return out;
  }
  // A space beyond 2^62: independent uniform draws, a repeat (vanishingly rare) drawn again.
  std::set<std::vector<std::uint32_t>> seen;
  while (static_cast<Index>(out.size()) < count) {
    std::vector<std::uint32_t> seq(len);
    seq[0] = static_cast<std::uint32_t>(rng.below(prefixRadix));
    for (std::size_t t = 1; t < len; ++t) seq[t] = static_cast<std::uint32_t>(rng.below(stepRadix));
    if (seen.insert(seq).second) out.push_back(std::move(seq));
  }
  return out;
}

}  // namespace ddl
