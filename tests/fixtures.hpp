#pragma once
// Shared test fixtures: small net configurations by their sizes, Gaussian-blob data sets with a seed,
// random token batches, a net's parameter values and a bit-for-bit comparison of them, a module's
// parameters perturbed off their trivial starts, the gradient of a random readout of a model's logits,
// fresh paths under DDL_TEST_TMPDIR, writing and reading a file's bytes.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "catch_compat.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_batch.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/dataset.hpp"
#include "ddl/nn/models/conv_delta_net_config.hpp"
#include "ddl/nn/models/delta_lm_config.hpp"
#include "ddl/nn/models/delta_net_config.hpp"

namespace ddl_test {

// A uniform integer in [lo, hi].
inline int randInt(std::mt19937& gen, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); }

// n token ids drawn uniformly from [0, vocab).
inline std::vector<int> randomIds(std::mt19937& gen, int vocab, int n) {
  std::vector<int> ids(static_cast<std::size_t>(n));
  for (int& id : ids) id = randInt(gen, 0, vocab - 1);
  return ids;
}

// The hidden width that leaves a DeltaNet block its default (4 d).
constexpr ddl::Index kDefaultHidden = 0;

// A batch of B sequences of T token ids drawn uniformly from [0, vocab), seeded.
inline ddl::TokenBatch randomTokenBatch(ddl::Index B, ddl::Index T, ddl::Index vocab, std::uint64_t seed) {
  std::mt19937 gen(static_cast<unsigned>(seed));
  ddl::TokenBatch b;
  b.layout = ddl::TokenLayout::sequence(B, T);
  b.ids.resize(static_cast<std::size_t>(B * T));
  for (int& id : b.ids) id = std::uniform_int_distribution<int>(0, static_cast<int>(vocab) - 1)(gen);
  return b;
}

// Gains, biases, kernels and read vectors (every 1-D parameter) of a double module off their trivial
// starts by U(-0.3, 0.3), so no gradient term hides behind a 1 or a 0.
template <class Module>
void perturbSmallParams(Module& m, std::uint64_t seed) {
  ddl::Rng rng(seed);
  m.visitParams("", [&](const std::string&, ddl::Param<double>& p) {
    if (p.shape.size() == 1)
      for (ddl::Index i = 0; i < p.value.size(); ++i) p.value.data()[i] += rng.uniform(-0.3, 0.3);
  });
}

// A double module's parameters by their dotted names.
template <class Module>
std::map<std::string, ddl::Param<double>*> namedParams(Module& m) {
  std::map<std::string, ddl::Param<double>*> out;
  m.visitParams("", [&](const std::string& name, ddl::Param<double>& p) { out[name] = &p; });
  return out;
}

// A double attention module with seeded weights and its norm gains (RMSNorm, QK-norm, the output
// norm or subln) moved off 1, so that their gradients and their use are both visible.
template <class Attention>
void initRandomAttention(Attention& a, unsigned seed) {
  ddl::Rng rng(seed);
  a.init(rng);
  std::srand(seed);
  for (auto& [name, p] : namedParams(a))
    if (contains(name, "norm") || contains(name, "subln"))
      p->value.array() += 0.4 * ddl::MatX<double>::Random(p->value.rows(), 1).array();
}

// For a double language model (DeltaLM<double>): runs the training forward on the batch, draws a
// random W of the logits' shape (Eigen's Random) and backpropagates L = sum(W .* logits) into freshly
// zeroed gradients. Returns L as a function of the current parameters (the inference forward), for
// finite differences against those gradients; the training forward's logits go to *logitsOut if given.
template <class LM>
std::function<double()> backwardOfRandomReadout(LM& lm, const ddl::TokenBatch& batch,
                                                ddl::MatX<double>* logitsOut = nullptr) {
  ddl::MatX<double> logits;
  lm.forward(batch, logits);
  if (logitsOut) *logitsOut = logits;
  const ddl::MatX<double> W = ddl::MatX<double>::Random(logits.rows(), logits.cols());
  ddl::zeroGrad(lm);
  lm.backward(W);
  return [&lm, batch, W] {
    ddl::MatX<double> l;
    lm.forwardInference(batch, l);
    return (W.array() * l.array()).sum();
  };
}

// A DeltaNet configuration with these sizes; every other field (preset, residual, gate) is the default.
inline ddl::DeltaNetConfig deltaNetConfig(ddl::Index inputDim, ddl::Index classes, ddl::Index d, ddl::Index depth,
                                          ddl::Index hidden, ddl::Index dv = 1) {
  ddl::DeltaNetConfig c;
  c.inputDim = inputDim;
  c.classes = classes;
  c.d = d;
  c.depth = depth;
  c.dv = dv;
  c.block.hidden = hidden;
  return c;
}

// A ConvDeltaNet configuration for (channels, height, width) images with these stages; every other
// field (preset, residual, expansion, stem) is the default.
inline ddl::ConvDeltaNetConfig convNetConfig(ddl::Index channels, ddl::Index height, ddl::Index width,
                                             ddl::Index classes, std::vector<ddl::Index> widths,
                                             std::vector<ddl::Index> depths, ddl::Index dv = 1) {
  ddl::ConvDeltaNetConfig c;
  c.channels = channels;
  c.height = height;
  c.width = width;
  c.classes = classes;
  c.widths = std::move(widths);
  c.depths = std::move(depths);
  c.dv = dv;
  return c;
}

// A DeltaLM configuration with these sizes and a variant (dv1, cc, cc-ec, tc, tc-ec: applyVariant);
// every other field is the default.
inline ddl::DeltaLMConfig deltaLMConfig(ddl::Index d, ddl::Index heads, ddl::Index depth, ddl::Index context,
                                        ddl::Index hidden, const std::string& variant) {
  ddl::DeltaLMConfig c;
  std::tie(c.d, c.heads, c.depth, c.context, c.hidden) = std::tie(d, heads, depth, context, hidden);
  ddl::applyVariant(c, variant);
  return c;
}

// A small DeltaLM case: a variant with a residual kind, a preset, dv (0: the variant's), heads and tied
// or untied head.
struct LmCase {
  std::string variant;
  ddl::ResidualKind residual = ddl::ResidualKind::Delta;
  std::string preset = "code";
  ddl::Index dv = 0;  // 0: the variant's
  ddl::Index heads = 2;
  bool tied = true;
};

// The small DeltaLM of a case: vocab 11, d 12, depth 2, context 6, hidden 7; the preset first, then
// the variant, then dv when the case sets it.
inline ddl::DeltaLMConfig smallLMConfig(const LmCase& k) {
  ddl::DeltaLMConfig c;
  c.vocab = 11;
  c.d = 12;
  c.heads = k.heads;
  c.depth = 2;
  c.context = 6;
  c.hidden = 7;
  c.tiedHead = k.tied;
  c.block.residual.residual = k.residual;
  ddl::applyPreset(c, k.preset);
  ddl::applyVariant(c, k.variant);
  if (k.dv > 0) c.dv = k.dv;
  return c;
}

// A configuration (DeltaNet, ConvDeltaNet) with a residual kind and a preset; the preset keeps the
// shapes and the residual kind.
template <class Config>
Config withPreset(Config c, const std::string& preset, ddl::ResidualKind kind) {
  c.block.residual.residual = kind;
  ddl::applyPreset(c, preset);
  return c;
}

// Gaussian blobs: a random class per sample, class c has its mean at +separation on feature c (noise 1
// everywhere). Shape (1, 1, features), images (features, n).
template <class S = float>
ddl::Dataset<S> gaussianBlobs(ddl::Index features, int classes, ddl::Index n, std::uint64_t seed,
                              double separation = 3.0) {
  ddl::Rng rng(seed);
  ddl::Dataset<S> d;
  d.numClasses = classes;
  d.shape = ddl::ImageShape{1, 1, features};
  d.images.resize(features, n);
  d.labels.resize(static_cast<std::size_t>(n));
  for (ddl::Index j = 0; j < n; ++j) {
    const int y = static_cast<int>(rng.below(static_cast<std::uint64_t>(classes)));
    d.labels[static_cast<std::size_t>(j)] = y;
    for (ddl::Index i = 0; i < features; ++i)
      d.images(i, j) = static_cast<S>(rng.normal() + (i == y ? separation : 0.0));
  }
  return d;
}

// A copy of every parameter's value of a net (DeltaNet<S>, ConvDeltaNet<S>, ...), in visit order.
template <template <class> class Net, class S>
std::vector<ddl::MatX<S>> paramValues(Net<S>& net) {
  std::vector<ddl::MatX<S>> v;
  net.visitParams("", [&](const std::string&, ddl::Param<S>& p) { v.push_back(p.value); });
  return v;
}

// A copy of every parameter's gradient of a module, in visit order.
template <template <class> class Net, class S>
std::vector<ddl::MatX<S>> paramGrads(Net<S>& net) {
  std::vector<ddl::MatX<S>> g;
  net.visitParams("", [&](const std::string&, ddl::Param<S>& p) { g.push_back(p.grad); });
  return g;
}

// CHECKs each parameter's gradient == the one at its visit position in grads (a paramGrads copy), with
// the parameter's name captured. Returns how many parameters were visited.
template <template <class> class Net, class S>
std::size_t checkGradsEqual(Net<S>& net, const std::vector<ddl::MatX<S>>& grads) {
  std::size_t i = 0;
  net.visitParams("", [&](const std::string& name, ddl::Param<S>& p) {
    CAPTURE(name);
    CHECK(p.grad == grads[i++]);
  });
  return i;
}

// True when both lists hold matrices of the same shapes and the same bits.
template <class S>
bool bitIdentical(const std::vector<ddl::MatX<S>>& a, const std::vector<ddl::MatX<S>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].rows() != b[i].rows() || a[i].cols() != b[i].cols() ||
        std::memcmp(a[i].data(), b[i].data(), sizeof(S) * static_cast<std::size_t>(a[i].size())) != 0)
      return false;
  return true;
}

// DDL_TEST_TMPDIR/name with nothing there: whatever a previous run left is removed.
inline std::string clearedTestPath(const std::string& name) {
  const std::string path = std::string(DDL_TEST_TMPDIR) + "/" + name;
  std::filesystem::remove_all(path);
  return path;
}

// DDL_TEST_TMPDIR/name as a new, empty directory.
inline std::string freshTestDir(const std::string& name) {
  const std::string dir = clearedTestPath(name);
  std::filesystem::create_directories(dir);
  return dir;
}

// Writes the bytes to path (replacing the file); REQUIREs that the write succeeded.
inline void writeBytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream os(path, std::ios::binary | std::ios::trunc);
  os.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(os.good());
}

// A file's bytes ("" if it cannot be read).
inline std::string fileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace ddl_test
