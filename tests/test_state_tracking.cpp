// Tests of the state-tracking tasks (ddl/data/state_tracking.hpp, householder_task.hpp,
// sequence_sampling.hpp): determinism from the seed, labels against brute-force computations written
// here independently, held-out sequences that never occur in training, the refusals of split sizes the
// sequence space cannot hold, and the Householder targets against dense reflection products in double.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "catch_compat.hpp"
#include "ddl/data/householder_task.hpp"
#include "ddl/data/sequence_sampling.hpp"
#include "ddl/data/state_tracking.hpp"

namespace test_state_tracking {  // each test file in its own namespace: a group of files compiles as one unit

using ddl_test::contains;
using ddl_test::thrownMessage;

namespace {

// The bytes of column j, as a hash key.
template <class S>
std::string columnKey(const ddl::MatX<S>& m, ddl::Index j) {
  return std::string(reinterpret_cast<const char*>(m.col(j).data()), sizeof(S) * static_cast<std::size_t>(m.rows()));
}

// Counts the columns of `held` that also occur in `train` (by their bytes).
template <class S>
int seenInTraining(const ddl::MatX<S>& train, const ddl::MatX<S>& held) {
  std::unordered_set<std::string> keys;
  for (ddl::Index j = 0; j < train.cols(); ++j) keys.insert(columnKey(train, j));
  int seen = 0;
  for (ddl::Index j = 0; j < held.cols(); ++j) seen += keys.count(columnKey(held, j)) ? 1 : 0;
  return seen;
}

// True when the columns of m are pairwise distinct.
template <class S>
bool distinctColumns(const ddl::MatX<S>& m) {
  std::unordered_set<std::string> keys;
  for (ddl::Index j = 0; j < m.cols(); ++j)
    if (!keys.insert(columnKey(m, j)).second) return false;
  return true;
}

// The position of the single 1 in x[offset, offset + width), or -1 unless x there is exactly one-hot.
template <class S>
int oneHot(const ddl::MatX<S>& x, ddl::Index col, ddl::Index offset, ddl::Index width) {
  int at = -1;
  for (ddl::Index i = 0; i < width; ++i) {
    const S v = x(offset + i, col);
    if (v == S(1)) {
      if (at >= 0) return -1;
      at = static_cast<int>(i);
    } else if (v != S(0)) {
      return -1;
    }
  }
  return at;
}

template <class S>
void requireSameSplits(const ddl::SequenceTask<S>& a, const ddl::SequenceTask<S>& b) {
  CHECK(a.train.images == b.train.images);
  CHECK(a.train.labels == b.train.labels);
  CHECK(a.validation.images == b.validation.images);
  CHECK(a.validation.labels == b.validation.labels);
  CHECK(a.test.images == b.test.images);
  CHECK(a.test.labels == b.test.labels);
}

// Every split's images with the layout's rows, the sizes asked for, and a valid Dataset.
template <class S>
void checkShapes(const ddl::SequenceTask<S>& t, const ddl::SplitSizes& sizes) {
  for (const ddl::Dataset<S>* d : {&t.train, &t.validation, &t.test}) {
    ddl::validate(*d);
    CHECK(d->features() == t.layout.features());
    CHECK(d->shape.size() == t.layout.features());
  }
  CHECK(t.train.size() == sizes.train);
  CHECK(t.validation.size() == sizes.validation);
  CHECK(t.test.size() == sizes.test);
}

// No validation or test column occurs in training, and no column repeats anywhere.
template <class S>
void checkHeldOut(const ddl::MatX<S>& train, const ddl::MatX<S>& validation, const ddl::MatX<S>& test) {
  CHECK(seenInTraining(train, validation) == 0);
  CHECK(seenInTraining(train, test) == 0);
  ddl::MatX<S> all(train.rows(), train.cols() + validation.cols() + test.cols());
  all << train, validation, test;
  CHECK(distinctColumns(all));
}

// The swap task's label by moving the ball between explicit cups; the pairs enumerated here by two loops.
int bruteSwap(const ddl::MatX<float>& x, ddl::Index col, int cups, ddl::Index steps) {
  std::vector<std::pair<int, int>> pairs;
  for (int i = 0; i < cups; ++i)
    for (int j = i + 1; j < cups; ++j) pairs.push_back({i, j});
  const auto P = static_cast<ddl::Index>(pairs.size());
  std::vector<int> hasBall(static_cast<std::size_t>(cups), 0);
  const int start = oneHot(x, col, 0, cups);
  REQUIRE(start >= 0);
  hasBall[static_cast<std::size_t>(start)] = 1;
  for (ddl::Index t = 0; t < steps; ++t) {
    const int p = oneHot(x, col, cups + t * P, P);
    REQUIRE(p >= 0);
    std::swap(hasBall[static_cast<std::size_t>(pairs[static_cast<std::size_t>(p)].first)],
              hasBall[static_cast<std::size_t>(pairs[static_cast<std::size_t>(p)].second)]);
  }
  return static_cast<int>(std::find(hasBall.begin(), hasBall.end(), 1) - hasBall.begin());
}

// All permutations of 0..n-1 in lexicographic order (std::next_permutation), so position = rank.
std::vector<std::vector<int>> allPermutations(int n) {
  std::vector<int> p(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = i;
  std::vector<std::vector<int>> all;
  do all.push_back(p);
  while (std::next_permutation(p.begin(), p.end()));
  return all;
}

}  // namespace

TEST_CASE("swap: labels match moving the ball between explicit cups, and the layout is step-major", "[state_tracking]") {
  const ddl::SplitSizes sizes{300, 50, 50};
  for (const ddl::SwapTask task : {ddl::SwapTask{3, 8}, ddl::SwapTask{4, 5}, ddl::SwapTask{2, 3}}) {
    CAPTURE(task.cups, task.steps);
    const auto small = task.cups == 2;  // 2 * 1^3 = 2 sequences: ask for them all
    const ddl::SplitSizes s = small ? ddl::SplitSizes{1, 1, 0} : sizes;
    const auto t = ddl::makeSwapTask<float>(task, s, 7);
    checkShapes(t, s);
    const ddl::Index pairs = task.cups * (task.cups - 1) / 2;
    CHECK(t.layout.prefixWidth == task.cups);
    CHECK(t.layout.stepWidth == pairs);
    CHECK(t.layout.steps == task.steps);
    CHECK(t.layout.stepOffset(1) == task.cups + pairs);
    CHECK(t.train.numClasses == task.cups);
    for (const ddl::Dataset<float>* d : {&t.train, &t.validation, &t.test})
      for (ddl::Index j = 0; j < d->size(); ++j)
        REQUIRE(d->labels[static_cast<std::size_t>(j)] == bruteSwap(d->images, j, task.cups, task.steps));
    // The label after every step: the ball after the first t + 1 swaps.
    REQUIRE(t.validationSteps.steps == task.steps);
    REQUIRE(t.validationSteps.values.size() == static_cast<std::size_t>(t.validation.size() * task.steps));
    for (ddl::Index j = 0; j < t.validation.size(); ++j)
      for (ddl::Index step = 0; step < task.steps; ++step)
        REQUIRE(t.validationSteps.at(j, step) == bruteSwap(t.validation.images, j, task.cups, step + 1));
    checkHeldOut(t.train.images, t.validation.images, t.test.images);
  }
}

TEST_CASE("swap: a request of the whole space yields every sequence exactly once", "[state_tracking]") {
  // 3 cups, 2 steps: 3 * 3^2 = 27 sequences.
  const auto t = ddl::makeSwapTask<double>({3, 2}, {15, 6, 6}, 1);
  ddl::MatX<double> all(t.layout.features(), 27);
  all << t.train.images, t.validation.images, t.test.images;
  CHECK(distinctColumns(all));
  std::set<std::vector<int>> seen;
  for (ddl::Index j = 0; j < 27; ++j)
    seen.insert({oneHot(all, j, 0, 3), oneHot(all, j, 3, 3), oneHot(all, j, 6, 3)});
  CHECK(seen.size() == 27);
  CHECK(seen.count({-1, -1, -1}) == 0);
}

TEST_CASE("parity: inputs are +-1 and labels are the XOR of the -1 steps", "[state_tracking]") {
  const ddl::SplitSizes sizes{400, 100, 100};
  const auto t = ddl::makeParityTask<float>({16}, sizes, 3);
  checkShapes(t, sizes);
  CHECK(t.layout.prefixWidth == 0);
  CHECK(t.layout.stepWidth == 1);
  CHECK(t.train.numClasses == 2);
  int ones = 0;
  for (const ddl::Dataset<float>* d : {&t.train, &t.validation, &t.test})
    for (ddl::Index j = 0; j < d->size(); ++j) {
      int minus = 0;
      for (ddl::Index i = 0; i < 16; ++i) {
        REQUIRE(std::fabs(d->images(i, j)) == 1.0f);
        minus += d->images(i, j) < 0 ? 1 : 0;
      }
      REQUIRE(d->labels[static_cast<std::size_t>(j)] == minus % 2);
      ones += d->labels[static_cast<std::size_t>(j)];
    }
  for (ddl::Index j = 0; j < t.train.size(); ++j) {  // after every step: the XOR of the bits so far
    int minus = 0;
    for (ddl::Index i = 0; i < 16; ++i) {
      minus += t.train.images(i, j) < 0 ? 1 : 0;
      REQUIRE(t.trainSteps.at(j, i) == minus % 2);
    }
  }
  CHECK(ones > 200);  // both classes occur (about half each)
  CHECK(ones < 400);
  checkHeldOut(t.train.images, t.validation.images, t.test.images);
}

TEST_CASE("permutation ranks follow std::next_permutation's lexicographic order", "[state_tracking]") {
  for (int n : {1, 2, 3, 5}) {
    const auto all = allPermutations(n);
    REQUIRE(all.size() == ddl::factorial(n));
    for (std::size_t r = 0; r < all.size(); ++r) {
      REQUIRE(ddl::permutationRank(all[r]) == r);
      REQUIRE(ddl::permutationFromRank(n, r) == all[r]);
    }
  }
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::permutationRank({0, 2, 2}); }), "not a permutation"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::permutationFromRank(3, 6); }), "ddl::permutationFromRank"));
}

TEST_CASE("permutation: labels are the composition that applies the first step first", "[state_tracking]") {
  for (const ddl::PermutationTask task : {ddl::PermutationTask{3, 6}, ddl::PermutationTask{5, 4}}) {
    CAPTURE(task.n, task.steps);
    const ddl::SplitSizes sizes{200, 40, 40};
    const auto t = ddl::makePermutationTask<float>(task, sizes, 11);
    checkShapes(t, sizes);
    const auto all = allPermutations(task.n);
    std::map<std::vector<int>, int> rankOf;
    for (std::size_t r = 0; r < all.size(); ++r) rankOf[all[r]] = static_cast<int>(r);
    const auto width = static_cast<ddl::Index>(all.size());
    CHECK(t.layout.stepWidth == width);
    CHECK(t.train.numClasses == width);
    for (const ddl::Dataset<float>* d : {&t.train, &t.validation, &t.test})
      for (ddl::Index j = 0; j < d->size(); ++j) {
        std::vector<int> where(static_cast<std::size_t>(task.n));  // where[i]: i sent through steps 1..t
        for (int i = 0; i < task.n; ++i) where[static_cast<std::size_t>(i)] = i;
        for (ddl::Index s = 0; s < task.steps; ++s) {
          const int r = oneHot(d->images, j, s * width, width);
          REQUIRE(r >= 0);
          for (int& w : where) w = all[static_cast<std::size_t>(r)][static_cast<std::size_t>(w)];
          if (d == &t.test) REQUIRE(t.testSteps.at(j, s) == rankOf.at(where));  // after every step
        }
        REQUIRE(d->labels[static_cast<std::size_t>(j)] == rankOf.at(where));
      }
    checkHeldOut(t.train.images, t.validation.images, t.test.images);
  }
  // Two steps by hand: pi_1 = (1 0 2) (swap 0, 1), pi_2 = (0 2 1) (swap 1, 2). pi_2 o pi_1 sends
  // 0 -> 1 -> 2, 1 -> 0 -> 0, 2 -> 2 -> 1: (2 0 1), rank 4 of (012 021 102 120 201 210).
  const auto t = ddl::makePermutationTask<double>({3, 2}, {36, 0, 0}, 5);  // all 36 sequences
  int checked = 0;
  for (ddl::Index j = 0; j < 36; ++j)
    if (oneHot(t.train.images, j, 0, 6) == 2 && oneHot(t.train.images, j, 6, 6) == 1) {
      CHECK(t.train.labels[static_cast<std::size_t>(j)] == 4);
      ++checked;
    }
  CHECK(checked == 1);
}

TEST_CASE("S5 over a space beyond 2^62 still draws distinct sequences", "[state_tracking]") {
  CHECK(ddl::sequenceCount(1, 120, 10) == std::numeric_limits<std::uint64_t>::max());  // 120^10 > 2^64
  CHECK(ddl::sequenceCount(1, 120, 8) == 42998169600000000ull);                      // 120^8 < 2^62
  CHECK(ddl::sequenceCount(3, 3, 8) == 19683);
  const auto t = ddl::makePermutationTask<float>({5, 10}, {300, 50, 50}, 2);
  checkHeldOut(t.train.images, t.validation.images, t.test.images);
  const auto again = ddl::makePermutationTask<float>({5, 10}, {300, 50, 50}, 2);
  requireSameSplits(t, again);
}

TEST_CASE("state-tracking tasks are a function of the seed", "[state_tracking]") {
  const ddl::SplitSizes sizes{100, 20, 20};
  requireSameSplits(ddl::makeSwapTask<float>({3, 8}, sizes, 42), ddl::makeSwapTask<float>({3, 8}, sizes, 42));
  requireSameSplits(ddl::makeParityTask<float>({16}, sizes, 42), ddl::makeParityTask<float>({16}, sizes, 42));
  requireSameSplits(ddl::makePermutationTask<float>({3, 8}, sizes, 42),
                    ddl::makePermutationTask<float>({3, 8}, sizes, 42));
  CHECK(ddl::makeSwapTask<float>({3, 8}, sizes, 42).train.images !=
        ddl::makeSwapTask<float>({3, 8}, sizes, 43).train.images);
  CHECK(ddl::makeParityTask<float>({16}, sizes, 42).train.images !=
        ddl::makeParityTask<float>({16}, sizes, 43).train.images);
  const auto h1 = ddl::makeHouseholderTask<float>({3, 4}, sizes, 42);
  const auto h2 = ddl::makeHouseholderTask<float>({3, 4}, sizes, 42);
  CHECK(h1.train.inputs == h2.train.inputs);
  CHECK(h1.test.targets == h2.test.targets);
  CHECK(ddl::makeHouseholderTask<float>({3, 4}, sizes, 43).train.inputs != h1.train.inputs);
}

TEST_CASE("split sizes the sequence space cannot hold are refused with the count", "[state_tracking]") {
  // swap, 3 cups, 2 steps: 3 * 3^2 = 27 sequences; 28 requested.
  const std::string swap = thrownMessage<ddl::ValueError>([] { ddl::makeSwapTask<float>({3, 2}, {20, 4, 4}, 1); });
  CHECK(contains(swap, "ddl::makeSwapTask"));
  CHECK(contains(swap, "cups 3, steps 2"));
  CHECK(contains(swap, "has 27 distinct sequences"));
  CHECK(contains(swap, "20 + 4 + 4 = 28"));
  CHECK_NOTHROW(ddl::makeSwapTask<float>({3, 2}, {20, 4, 3}, 1));
  // parity, 4 steps: 16 sequences.
  const std::string parity = thrownMessage<ddl::ValueError>([] { ddl::makeParityTask<float>({4}, {10, 4, 3}, 1); });
  CHECK(contains(parity, "ddl::makeParityTask"));
  CHECK(contains(parity, "steps 4"));
  CHECK(contains(parity, "has 16 distinct sequences (2^steps)"));
  // S3, 1 step: 6 sequences.
  const std::string perm =
      thrownMessage<ddl::ValueError>([] { ddl::makePermutationTask<float>({3, 1}, {5, 1, 1}, 1); });
  CHECK(contains(perm, "ddl::makePermutationTask"));
  CHECK(contains(perm, "n 3, steps 1"));
  CHECK(contains(perm, "has 6 distinct sequences"));
  // Parameters outside their domain.
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::makeSwapTask<float>({1, 4}, {1, 0, 0}, 1); }), "cups"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::makeParityTask<float>({0}, {1, 0, 0}, 1); }), "steps"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::makePermutationTask<float>({8, 2}, {1, 0, 0}, 1); }),
                 "n expected in [2, 7]"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::makeSwapTask<float>({3, 8}, {-1, 0, 0}, 1); }),
                 "split sizes must be >= 0"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::makeHouseholderTask<float>({0, 4}, {1, 0, 0}, 1); }),
                 "ddl::makeHouseholderTask: dim (m) must be >= 1"));
  CHECK(contains(thrownMessage<ddl::ValueError>([] { ddl::makeHouseholderTask<float>({3, 0}, {1, 0, 0}, 1); }),
                 "steps must be >= 1"));
}

TEST_CASE("householder: targets are the dense reflection product of the inputs and keep the norm", "[state_tracking]") {
  const ddl::HouseholderTask task{5, 7};
  const ddl::SplitSizes sizes{60, 20, 20};
  const auto h = ddl::makeHouseholderTask<double>(task, sizes, 9);
  CHECK(h.layout.prefixWidth == 5);
  CHECK(h.layout.stepWidth == 5);
  CHECK(h.layout.features() == 5 + 7 * 5);
  for (const ddl::RegressionSet<double>* set : {&h.train, &h.validation, &h.test}) {
    REQUIRE(set->inputs.rows() == h.layout.features());
    REQUIRE(set->targets.rows() == 5);
    REQUIRE(set->targets.cols() == set->size());
    REQUIRE(set->stepTargets.rows() == 7 * 5);
    REQUIRE(set->stepTargets.cols() == set->size());
    for (ddl::Index j = 0; j < set->size(); ++j) {
      const Eigen::VectorXd x = set->inputs.col(j).head(5);
      Eigen::MatrixXd product = Eigen::MatrixXd::Identity(5, 5);
      for (ddl::Index t = 0; t < 7; ++t) {
        const Eigen::VectorXd u = set->inputs.col(j).segment(h.layout.stepOffset(t), 5);
        REQUIRE(std::fabs(u.norm() - 1) < 1e-14);
        const Eigen::MatrixXd H = Eigen::MatrixXd::Identity(5, 5) - 2 * u * u.transpose();
        product = H * product;  // H_t ... H_1
        REQUIRE((product * x - set->stepTargets.col(j).segment(t * 5, 5)).norm() <= 1e-12 * x.norm());
      }
      const Eigen::VectorXd y = set->targets.col(j);
      REQUIRE((product * x - y).norm() <= 1e-12 * x.norm());
      REQUIRE(std::fabs(y.norm() - x.norm()) <= 1e-12 * x.norm());
    }
  }
  CHECK(h.train.size() == 60);
  CHECK(h.validation.size() == 20);
  CHECK(h.test.size() == 20);
  checkHeldOut(h.train.inputs, h.validation.inputs, h.test.inputs);
  // float: the same draws rounded once.
  const auto f = ddl::makeHouseholderTask<float>(task, sizes, 9);
  CHECK((f.train.inputs.cast<double>() - h.train.inputs).cwiseAbs().maxCoeff() < 1e-6);
  CHECK((f.test.targets.cast<double>() - h.test.targets).cwiseAbs().maxCoeff() < 1e-5);
}

}  // namespace test_state_tracking
