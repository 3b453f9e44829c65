#pragma once
// ddl/data/state_tracking.hpp: synthetic state-tracking classification tasks, the data of the claim
// test (docs/claims.md): a state is carried through L steps, each step's input changes it, and the label
// is the final state. Each sample is one column laid out step-major (StepLayout, data/sequence_sampling.hpp)
// so a depth-as-time model can feed step t's input into block t.
//   swap         n cups, a ball under the start cup, L swaps of two cups; label: the ball's cup
//   parity       L bits as +-1; label: their XOR
//   permutation  L permutations of S_n; label: the rank of their composition
// Every task is a function of its parameters, the split sizes and the seed; the train, validation and
// test sequences are distinct (no held-out sequence occurs in training), and sizes that the sequence
// space cannot hold are refused with a ValueError that names the task and counts its space. Besides the
// final label, each split carries the label after every step (StepLabels: the state of each prefix), for
// a model supervised at every step.
//   auto swap = ddl::makeSwapTask<float>({3, 8}, {10000, 2000, 2000}, seed);
//   swap.train.images  (n + L * n(n-1)/2, 10000), swap.train.labels in [0, n)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/dataset.hpp"
#include "ddl/data/sequence_sampling.hpp"

namespace ddl {

// n cups (2 <= n <= 64), a start cup, L >= 1 swaps. Input: the start cup one-hot (prefix, width n), then
// per step the swapped pair one-hot over the n(n-1)/2 pairs (swapPair). Label: the ball's final cup.
// Sequence space: n * (n(n-1)/2)^L.
struct SwapTask {
  int cups = 3;
  Index steps = 8;
};

// L >= 1 bits b_t, input x_t = 1 - 2 b_t (+1 for 0, -1 for 1; width 1, no prefix). Label: b_1 xor ... xor
// b_L, i.e. 1 when an odd number of inputs is -1. Sequence space: 2^L.
struct ParityTask {
  Index steps = 16;
};

// L >= 1 permutations pi_1 .. pi_L of S_n (2 <= n <= 7), step t's input the one-hot of pi_t's rank
// (permutationRank; width n!, no prefix). Label: the rank of sigma = pi_L o ... o pi_1, the permutation
// that applies pi_1 first: sigma(i) = pi_L(...pi_2(pi_1(i))). Sequence space: (n!)^L.
struct PermutationTask {
  int n = 3;
  Index steps = 8;
};

// The label after every step of every sample of a split: at(j, t) is sample j's label after steps 1..t+1,
// t in [0, steps); at(j, steps - 1) is the final label (Dataset::labels[j]).
struct StepLabels {
  Index steps = 0;
  std::vector<int> values;  // sample-major: values[j * steps + t]
  int at(Index j, Index t) const { return values[static_cast<std::size_t>(j * steps + t)]; }
};

// The three splits of a classification task and where each step's input lies in a column.
// Every Dataset: images (layout.features(), size), shape {1, 1, layout.features()}.
template <class S>
struct SequenceTask {
  StepLayout layout;
  Dataset<S> train;
  Dataset<S> validation;
  Dataset<S> test;
  StepLabels trainSteps, validationSteps, testSteps;  // the labels after every step, per split
};

// The cups of swap pair p: (0,1), (0,2), ..., (0,n-1), (1,2), ... (lexicographic, i < j).
inline std::pair<int, int> swapPair(int cups, int p) {
  require(cups >= 2 && p >= 0 && p < cups * (cups - 1) / 2, "ddl::swapPair", "pair ", p, " expected in [0, ",
          cups * (cups - 1) / 2, ") for ", cups, " cups");
  for (int i = 0;; ++i) {
    const int row = cups - 1 - i;  // pairs (i, i+1) .. (i, n-1)
    if (p < row) return {i, i + 1 + p};
    p -= row;
  }
}

// n! for 0 <= n <= 20.
inline std::uint64_t factorial(int n) {
  require(n >= 0 && n <= 20, "ddl::factorial", "n expected in [0, 20], found ", n);
  std::uint64_t f = 1;
  for (int i = 2; i <= n; ++i) f *= static_cast<std::uint64_t>(i);
  return f;
}

// The lexicographic rank of a permutation of 0..n-1 in one-line notation (perm[i] = image of i); the
// identity has rank 0, the reversal n! - 1. ValueError when perm is not a permutation.
inline std::uint64_t permutationRank(const std::vector<int>& perm) {
  const int n = static_cast<int>(perm.size());
  require(n <= 20, "ddl::permutationRank", "at most 20 elements, got ", n);
  std::vector<bool> used(perm.size(), false);
  std::uint64_t rank = 0;
  for (int i = 0; i < n; ++i) {
    const int v = perm[static_cast<std::size_t>(i)];
    require(v >= 0 && v < n && !used[static_cast<std::size_t>(v)], "ddl::permutationRank", "entry ", i, " = ", v,
            " is out of [0, ", n, ") or repeated: not a permutation");
    int smaller = 0;  // unused values below v: the Lehmer digit
    for (int u = 0; u < v; ++u) smaller += used[static_cast<std::size_t>(u)] ? 0 : 1;
    used[static_cast<std::size_t>(v)] = true;
    rank = rank * static_cast<std::uint64_t>(n - i) + static_cast<std::uint64_t>(smaller);
  }
  return rank;
}

// The permutation of 0..n-1 of lexicographic rank `rank` in [0, n!), in one-line notation.
inline std::vector<int> permutationFromRank(int n, std::uint64_t rank) {
  require(n >= 1 && n <= 20 && rank < factorial(n), "ddl::permutationFromRank", "rank ", rank,
          " expected in [0, n!) for n = ", n, " (1 <= n <= 20)");
  std::vector<int> rest(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) rest[static_cast<std::size_t>(i)] = i;
  std::vector<int> perm;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t block = factorial(n - 1 - i);
    const auto digit = static_cast<std::size_t>(rank / block);
    rank %= block;
    perm.push_back(rest[digit]);
    rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(digit));
  }
  return perm;
}

namespace detail {
// Cuts the sequences (in their drawn order) into train, validation and test; encode(seq, column) writes a
// sample's features into a zeroed column, labels(seq, out) writes its class after each step into out[0..L).
template <class S, class Encode, class Labels>
SequenceTask<S> buildSequenceTask(const StepLayout& layout, int numClasses,
                                  const std::vector<std::vector<std::uint32_t>>& seqs, const SplitSizes& sizes,
                                  Encode encode, Labels labels) {
  SequenceTask<S> task;
  task.layout = layout;
  Index next = 0;
  const Index L = layout.steps;
  std::vector<int> after(static_cast<std::size_t>(L));
  auto fill = [&](Dataset<S>& d, StepLabels& steps, Index n) {
    d.numClasses = numClasses;
    d.shape = ImageShape{1, 1, layout.features()};
    d.images = MatX<S>::Zero(layout.features(), n);
    d.labels.resize(static_cast<std::size_t>(n));
    steps.steps = L;
    steps.values.resize(static_cast<std::size_t>(n * L));
    for (Index j = 0; j < n; ++j, ++next) {
      const auto& seq = seqs[static_cast<std::size_t>(next)];
      auto column = d.images.col(j);
      encode(seq, column);
      labels(seq, after);
      std::copy(after.begin(), after.end(), steps.values.begin() + j * L);
      d.labels[static_cast<std::size_t>(j)] = after.back();
    }
  };
  fill(task.train, task.trainSteps, sizes.train);
  fill(task.validation, task.validationSteps, sizes.validation);
  fill(task.test, task.testSteps, sizes.test);
  return task;
}
}  // namespace detail

// The swap task (SwapTask): images (n + L n(n-1)/2, size), labels in [0, n).
template <class S = float>
SequenceTask<S> makeSwapTask(const SwapTask& task, const SplitSizes& sizes, std::uint64_t seed) {
  const char* fn = "ddl::makeSwapTask";
  require(task.cups >= 2 && task.cups <= 64, fn, "cups expected in [2, 64], found ", task.cups);
  require(task.steps >= 1, fn, "steps must be >= 1, got ", task.steps);
  const int n = task.cups, pairs = n * (n - 1) / 2;
  const std::string name = "swap (cups " + std::to_string(n) + ", steps " + std::to_string(task.steps) + ")";
  requireDistinctSplits(fn, name, "cups * (cups(cups-1)/2)^steps",
                        sequenceCount(static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(pairs), task.steps),
                        sizes);
  Rng rng(seed);
  const auto seqs = sampleDistinctSequences(static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(pairs),
                                            task.steps, sizes.total(), rng);
  const StepLayout layout{n, task.steps, pairs};
  std::vector<std::pair<int, int>> pairOf;
  for (int p = 0; p < pairs; ++p) pairOf.push_back(swapPair(n, p));
  auto encode = [&](const std::vector<std::uint32_t>& seq, auto& column) {
    column(static_cast<Index>(seq[0])) = S(1);
    for (Index t = 0; t < layout.steps; ++t)
      column(layout.stepOffset(t) + static_cast<Index>(seq[static_cast<std::size_t>(t) + 1])) = S(1);
  };
  auto labels = [&](const std::vector<std::uint32_t>& seq, std::vector<int>& after) {
    int ball = static_cast<int>(seq[0]);
    for (std::size_t t = 1; t < seq.size(); ++t) {
      const auto [i, j] = pairOf[seq[t]];
      ball = ball == i ? j : ball == j ? i : ball;
      after[t - 1] = ball;
    }
  };
  return detail::buildSequenceTask<S>(layout, n, seqs, sizes, encode, labels);
}

// The parity task (ParityTask): images (L, size) of +-1, labels in {0, 1}.
template <class S = float>
SequenceTask<S> makeParityTask(const ParityTask& task, const SplitSizes& sizes, std::uint64_t seed) {
  const char* fn = "ddl::makeParityTask";
  require(task.steps >= 1, fn, "steps must be >= 1, got ", task.steps);
  requireDistinctSplits(fn, "parity (steps " + std::to_string(task.steps) + ")", "2^steps",
                        sequenceCount(1, 2, task.steps), sizes);
  Rng rng(seed);
  const auto seqs = sampleDistinctSequences(1, 2, task.steps, sizes.total(), rng);
  const StepLayout layout{0, task.steps, 1};
  auto encode = [&](const std::vector<std::uint32_t>& seq, auto& column) {
    for (Index t = 0; t < layout.steps; ++t) column(t) = seq[static_cast<std::size_t>(t) + 1] ? S(-1) : S(1);
  };
  auto labels = [](const std::vector<std::uint32_t>& seq, std::vector<int>& after) {
    std::uint32_t x = 0;
    for (std::size_t t = 1; t < seq.size(); ++t) {
      x ^= seq[t];
      after[t - 1] = static_cast<int>(x);
    }
  };
  return detail::buildSequenceTask<S>(layout, 2, seqs, sizes, encode, labels);
}

// The permutation task (PermutationTask): images (L n!, size), labels in [0, n!).
template <class S = float>
SequenceTask<S> makePermutationTask(const PermutationTask& task, const SplitSizes& sizes, std::uint64_t seed) {
  const char* fn = "ddl::makePermutationTask";
  require(task.n >= 2 && task.n <= 7, fn, "n expected in [2, 7], found ", task.n);
  require(task.steps >= 1, fn, "steps must be >= 1, got ", task.steps);
  const auto order = factorial(task.n);
  const std::string name = "permutation (n " + std::to_string(task.n) + ", steps " + std::to_string(task.steps) + ")";
  requireDistinctSplits(fn, name, "(n!)^steps", sequenceCount(1, order, task.steps), sizes);
  Rng rng(seed);
  const auto seqs = sampleDistinctSequences(1, static_cast<std::uint32_t>(order), task.steps, sizes.total(), rng);
  const StepLayout layout{0, task.steps, static_cast<Index>(order)};
  std::vector<std::vector<int>> perms;
  for (std::uint64_t r = 0; r < order; ++r) perms.push_back(permutationFromRank(task.n, r));
  auto encode = [&](const std::vector<std::uint32_t>& seq, auto& column) {
    for (Index t = 0; t < layout.steps; ++t)
      column(layout.stepOffset(t) + static_cast<Index>(seq[static_cast<std::size_t>(t) + 1])) = S(1);
  };
  auto labels = [&](const std::vector<std::uint32_t>& seq, std::vector<int>& after) {
    std::vector<int> sigma = perms[0];  // the identity
    for (std::size_t t = 1; t < seq.size(); ++t) {
      const std::vector<int>& pi = perms[seq[t]];
      for (int& s : sigma) s = pi[static_cast<std::size_t>(s)];  // sigma <- pi o sigma
      after[t - 1] = static_cast<int>(permutationRank(sigma));
    }
  };
  return detail::buildSequenceTask<S>(layout, static_cast<int>(order), seqs, sizes, encode, labels);
}

}  // namespace ddl
