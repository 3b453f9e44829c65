// Tests for include/ddl/nn/layers/embedding.hpp: the gather is exact, the scatter-add backward matches
// central differences in double (repeated ids, vocab 1, d 1, one token), bad ids are refused before
// anything is written, the weight is PyTorch's [vocab, d] in a checkpoint, and a steady-state step
// allocates nothing.
#include "counting_alloc.hpp"  // first: counts operator new and Eigen allocations (allocationsDuring)

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fixtures.hpp"
#include "fd_check.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/io/safetensors.hpp"
#include "ddl/nn/layers/embedding.hpp"
#include "ddl/testing/grad_check.hpp"

namespace test_embedding {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl_test::allocationsDuring;
using ddl_test::contains;
using ddl_test::randInt;
using ddl_test::randomIds;
using ddl_test::thrownMessage;

namespace {

// Central-difference check of the weight gradient for loss = <R, out>, so dOut = R.
void checkEmbeddingGrad(Index vocab, Index d, const std::vector<int>& ids, std::uint64_t seed) {
  CAPTURE(vocab, d, ids.size(), seed);
  ddl::Rng rng(seed);
  ddl::Embedding<double> emb(vocab, d, rng, 1.0);
  MatX<double> out;
  emb.forward(ids, out);
  REQUIRE(out.rows() == d);
  REQUIRE(out.cols() == static_cast<Index>(ids.size()));
  std::srand(static_cast<unsigned>(seed));
  const MatX<double> R = MatX<double>::Random(d, static_cast<Index>(ids.size()));
  auto loss = [&] {
    MatX<double> o;
    emb.forward(ids, o);
    return (R.array() * o.array()).sum();
  };
  ddl::zeroGrad(emb);
  emb.backward(R);
  FD_CHECK(emb.weight().grad, ddl::testing::numericGrad(emb.weight().value, loss));
  // The gradient is exactly the sum of dOut's columns per id (the loss is linear in W).
  MatX<double> expected = MatX<double>::Zero(vocab, d);
  for (std::size_t n = 0; n < ids.size(); ++n) expected.row(ids[n]) += R.col(static_cast<Index>(n)).transpose();
  CHECK(emb.weight().grad.isApprox(expected, 1e-15));
}

}  // namespace

TEST_CASE("Embedding backward matches central differences on random shapes with repeated ids", "[grad][embedding]") {
  const auto seed = GENERATE(take(8, random(1u, 1000000u)));
  std::mt19937 gen(seed);
  const int vocab = randInt(gen, 1, 9), d = randInt(gen, 1, 6), n = randInt(gen, 1, 12);
  checkEmbeddingGrad(vocab, d, randomIds(gen, vocab, n), seed);
}

TEST_CASE("Embedding backward matches central differences on edge shapes", "[grad][embedding]") {
  struct Case {
    Index vocab, d;
    std::vector<int> ids;
  };
  const Case c = GENERATE(Case{1, 1, {0}},                  // vocab 1, d 1, one token
                          Case{1, 4, {0, 0, 0}},            // one id, repeated
                          Case{6, 1, {5}},                  // d 1, one token, the last id
                          Case{3, 2, {2, 0, 2, 2, 1, 0, 2}},  // repeats, interleaved
                          Case{8, 3, {7, 6, 7}});           // unused rows get no gradient
  checkEmbeddingGrad(c.vocab, c.d, c.ids, static_cast<std::uint64_t>(c.vocab * 100 + c.d));
}

TEST_CASE("Embedding forward is the selected rows of the weight, exactly, forwardInference agrees", "[embedding]") {
  ddl::Rng rng(11);
  ddl::Embedding<float> emb(256, 7, rng);
  const std::vector<int> ids = {0, 255, 65, 65, 10, 0};
  MatX<float> out, inferred;
  emb.forward(ids, out);
  REQUIRE(out.rows() == 7);
  REQUIRE(out.cols() == 6);
  for (std::size_t n = 0; n < ids.size(); ++n) {
    CAPTURE(n);
    for (Index j = 0; j < 7; ++j) CHECK(out(j, static_cast<Index>(n)) == emb.weight().value(ids[n], j));
  }
  emb.forwardInference(ids, inferred);
  CHECK(inferred == out);
  // forwardInference keeps nothing: backward still refers to the last forward's 6 ids.
  emb.forwardInference({1, 2}, inferred);
  CHECK(inferred.cols() == 2);
  CHECK_NOTHROW(emb.backward(MatX<float>::Ones(7, 6)));
  CHECK(emb.weight().grad.row(65).isApprox(MatX<float>::Constant(1, 7, 2.0f)));
  CHECK(emb.weight().grad.row(1).isZero(0));
  // No ids: an empty (d, 0) output.
  emb.forward({}, out);
  CHECK(out.rows() == 7);
  CHECK(out.cols() == 0);
}

TEST_CASE("Embedding backward accumulates and is deterministic", "[embedding]") {
  ddl::Rng rng(3);
  ddl::Embedding<double> emb(5, 4, rng);
  const std::vector<int> ids = {1, 3, 1, 1, 4};
  MatX<double> out;
  emb.forward(ids, out);
  std::srand(3);
  const MatX<double> dOut = MatX<double>::Random(4, 5);
  emb.backward(dOut);
  const MatX<double> once = emb.weight().grad;
  CHECK(once.norm() > 0);
  emb.backward(dOut);
  CHECK(emb.weight().grad.isApprox(2 * once, 1e-15));
  // The same forward and backward again from zero gives the same bits.
  ddl::zeroGrad(emb);
  emb.forward(ids, out);
  emb.backward(dOut);
  CHECK(emb.weight().grad == once);
  // Row 1 sums positions 0, 2, 3 in that order.
  const Eigen::RowVectorXd row1 = ((dOut.col(0) + dOut.col(2)) + dOut.col(3)).transpose();
  CHECK(once.row(1) == row1);
}

TEST_CASE("Embedding: an id below 0 or from vocab on is a ValueError naming position, id and vocabulary, nothing is written",
          "[embedding][errors]") {
  ddl::Rng rng(5);
  ddl::Embedding<double> emb(5, 3, rng);
  const std::vector<int> good = {4, 0, 2};
  MatX<double> out;
  emb.forward(good, out);
  const MatX<double> goodOut = out;

  const std::string neg = thrownMessage<ddl::ValueError>([&] { emb.forward({1, 2, -1, 7}, out); });
  CHECK(neg == "ddl::Embedding::forward: id -1 at position 2 is outside [0, 5) (vocabulary size 5)");
  CHECK(out == goodOut);  // not resized, not written
  const std::string atVocab = thrownMessage<ddl::ValueError>([&] { emb.forward({5}, out); });
  CHECK(atVocab == "ddl::Embedding::forward: id 5 at position 0 is outside [0, 5) (vocabulary size 5)");
  CHECK(out == goodOut);
  const std::string inference = thrownMessage<ddl::ValueError>([&] { emb.forwardInference({0, 0, 0, 0, 0, 9}, out); });
  CHECK(inference == "ddl::Embedding::forwardInference: id 9 at position 5 is outside [0, 5) (vocabulary size 5)");
  CHECK(out == goodOut);

  // backward still pairs with the last good forward (3 positions).
  MatX<double> dOut = MatX<double>::Ones(3, 3);
  emb.backward(dOut);
  CHECK(emb.weight().grad.row(4).isApprox(Eigen::RowVector3d::Ones(), 1e-15));
  CHECK(emb.weight().grad.row(1).isZero(0));
}

TEST_CASE("Embedding: bad sizes, backward before forward and a wrong dOut shape are refused", "[embedding][errors]") {
  ddl::Rng rng(1);
  CHECK(thrownMessage<ddl::ValueError>([&] { ddl::Embedding<float>(0, 4, rng); }) ==
        "ddl::Embedding: vocab and d must be >= 1, got vocab = 0, d = 4");
  CHECK(thrownMessage<ddl::ValueError>([&] { ddl::Embedding<float>(3, 0, rng); }) ==
        "ddl::Embedding: vocab and d must be >= 1, got vocab = 3, d = 0");
  ddl::Embedding<float> emb(4, 2, rng);
  CHECK(thrownMessage<ddl::Error>([&] { emb.backward(MatX<float>::Zero(2, 1)); }) ==
        "ddl::Embedding::backward: called before forward");
  MatX<float> out;
  emb.forward({0, 1, 2}, out);
  CHECK(thrownMessage<ddl::ShapeError>([&] { emb.backward(MatX<float>::Zero(2, 2)); }) ==
        "ddl::Embedding::backward: dOut has shape (2, 2), expected (2, 3)");
  CHECK(thrownMessage<ddl::ShapeError>([&] { emb.backward(MatX<float>::Zero(3, 3)); }) ==
        "ddl::Embedding::backward: dOut has shape (3, 3), expected (2, 3)");
  // Gathering into the weight itself would resize it while reading it.
  const MatX<float> before = emb.weight().value;
  CHECK(thrownMessage<ddl::Error>([&] { emb.forward({1}, emb.weight().value); }) ==
        "ddl::Embedding::forward: out must not alias the weight (they share memory); pass a separate matrix");
  CHECK(contains(thrownMessage<ddl::Error>([&] { emb.forwardInference({1}, emb.weight().value); }),
                 "ddl::Embedding::forwardInference: out must not alias the weight"));
  CHECK(emb.weight().value == before);
}

TEST_CASE("Embedding init is N(0, 0.02^2), seeded, the same numbers in float and double", "[embedding][init]") {
  ddl::Rng a(9), b(9), c(10);
  ddl::Embedding<double> ed(256, 64, a);
  ddl::Embedding<float> ef(256, 64, b);
  ddl::Embedding<double> other(256, 64, c);
  const MatX<double>& W = ed.weight().value;
  CHECK(ef.weight().value == W.cast<float>());
  CHECK(other.weight().value != W);
  const double mean = W.mean();
  const double stddev = std::sqrt((W.array() - mean).square().mean());
  CHECK(std::abs(mean) < 0.001);  // 16384 draws: the mean's standard error is 0.02 / 128
  CHECK(std::abs(stddev - 0.02) < 0.001);
  // The first draws fill column 0 (column-major order).
  ddl::Rng again(9);
  CHECK(W(0, 0) == 0.02 * again.normal());
  CHECK(W(1, 0) == 0.02 * again.normal());
  CHECK(ed.weight().decay);
}

TEST_CASE("Embedding's walk is one 'weight' of PyTorch shape [vocab, d], row i the vector of token i in a checkpoint",
          "[embedding][io]") {
  ddl::Rng rng(4);
  ddl::Embedding<float> emb(6, 3, rng);
  std::vector<std::string> names;
  emb.visitParams("tok", [&](const std::string& name, ddl::Param<float>& p) {
    names.push_back(name);
    CHECK(p.shape == std::vector<Index>{6, 3});
    CHECK(p.value.rows() == 6);
    CHECK(p.value.cols() == 3);
  });
  CHECK(names == std::vector<std::string>{"tok.weight"});
  CHECK(ddl::numParams(emb) == 18);

  const std::string path = ddl_test::freshTestDir("embedding") + "/emb.safetensors";
  ddl::saveCheckpoint(path, emb);
  ddl::SafetensorsReader r(path);
  const ddl::TensorInfo& t = r.checkTensor<float>("weight", {6, 3});
  // Row-major data: element (i, j) of [vocab, d] at flat index i * d + j is W(i, j).
  const std::string file = ddl_test::fileBytes(path);
  REQUIRE(file.size() >= r.header().dataStart() + t.end);
  const char* data = file.data() + r.header().dataStart() + t.begin;
  for (Index i = 0; i < 6; ++i)
    for (Index j = 0; j < 3; ++j) {
      float v = 0;
      std::memcpy(&v, data + 4 * (i * 3 + j), 4);
      CHECK(v == emb.weight().value(i, j));
    }
  ddl::Rng other(5);
  ddl::Embedding<float> loaded(6, 3, other);
  ddl::loadCheckpoint(path, loaded);
  CHECK(loaded.weight().value == emb.weight().value);
}

TEST_CASE("Embedding forward and backward allocate nothing once their buffers have the batch's size",
          "[embedding][alloc]") {
  ddl::Rng rng(2);
  ddl::Embedding<float> emb(256, 32, rng);
  std::vector<int> ids(512);
  for (std::size_t n = 0; n < ids.size(); ++n) ids[n] = static_cast<int>((n * 37) % 256);
  MatX<float> out, inferred;
  const MatX<float> dOut = MatX<float>::Constant(32, 512, 0.5f);
  emb.forward(ids, out);
  emb.forwardInference(ids, inferred);
  emb.backward(dOut);
  const long steady = allocationsDuring([&] {
    for (int step = 0; step < 3; ++step) {
      ids[static_cast<std::size_t>(step)] = 255 - step;
      emb.forward(ids, out);
      emb.forwardInference(ids, inferred);
      emb.backward(dOut);
    }
  });
  CHECK(steady == 0);
  // The count does see allocations: a fresh output matrix and a larger batch allocate.
  MatX<float> fresh;
  std::vector<int> more(600, 1);
  CHECK(allocationsDuring([&] { emb.forward(more, fresh); }) > 0);
}

}  // namespace test_embedding
