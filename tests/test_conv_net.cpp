// Image nets (nn/conv_branch, stage_transition, conv_delta_net, conv_delta_net_config): central-difference
// checks in double of DeltaConvBlock and a small ConvDeltaNet per residual kind and dv, the additive block
// against a hand-built plain residual conv block, threads against one thread at a size that runs the
// parallel paths, configuration round trips and errors, checkpoint round trip, a Trainer smoke run.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "fd_check.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/data/cifar.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/nn/models/conv_delta_net.hpp"
#include "ddl/nn/models/delta_net.hpp"
#include "ddl/testing/grad_check.hpp"
#include "ddl/train/trainer.hpp"

namespace test_conv_net {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::Index;
using ddl::MatX;
using ddl::testing::numericGrad;
using ddl::testing::relErr;

namespace {

template <class Module, class Loss>
void checkParams(Module& m, Loss&& loss) {
  m.visitParams("", [&](const std::string& name, ddl::Param<double>& p) {
    CAPTURE(name);
    FD_CHECK(p.grad, numericGrad(p.value, loss));
  });
}

// Moves every parameter off its initial value: at the start all value channels are equal, and the
// compressor's true gradient is then ~eps_norm, below central-difference resolution.
template <class Module>
void perturb(Module& m, double scale) {
  m.visitParams("", [&](const std::string&, ddl::Param<double>& p) {
    p.value += scale * MatX<double>::Random(p.value.rows(), p.value.cols());
  });
}

ddl::ConvDeltaNetConfig smallConfig(ddl::ResidualKind kind, Index dv, const std::string& preset = "code") {
  ddl::ConvDeltaNetConfig c;
  c.channels = 2;
  c.height = 5;
  c.width = 4;
  c.classes = 3;
  c.widths = {3, 4};
  c.depths = {1, 1};
  c.dv = dv;
  c.learnedExpansion = dv > 1;
  c.block.residual.residual = kind;
  ddl::applyPreset(c, preset);
  c.block.residual.gateHidden = 3;
  c.block.residual.auxHidden = 2;
  return c;
}

}  // namespace

TEST_CASE("Conv2d backward matches central differences (kernel, stride, padding, bias)", "[nn][conv][grad]") {
  struct Case {
    Index in, out, k, stride, pad, B, H, W;
    bool bias;
  };
  const Case c = GENERATE(Case{1, 1, 1, 1, 0, 1, 1, 1, true}, Case{2, 3, 3, 1, 1, 2, 4, 3, true},
                          Case{3, 2, 3, 2, 1, 1, 5, 5, false}, Case{2, 2, 2, 2, 0, 2, 4, 5, true},
                          Case{1, 2, 5, 1, 2, 1, 3, 2, true});
  CAPTURE(c.in, c.out, c.k, c.stride, c.pad, c.B, c.H, c.W, c.bias);
  std::srand(11);
  ddl::Conv2d<double> conv(c.in, c.out, c.k, c.stride, c.pad, c.bias);
  ddl::Rng rng(3);
  conv.init(rng);
  const ddl::TokenLayout l = ddl::TokenLayout::image(c.B, c.H, c.W), lo = conv.outputLayout(l);
  MatX<double> X = MatX<double>::Random(c.in, l.tokens()), G = MatX<double>::Random(c.out, lo.tokens()), Y, dX;
  auto loss = [&] { MatX<double> Yl; conv.forward(X, l, Yl); return (G.array() * Yl.array()).sum(); };
  conv.forward(X, l, Y);
  REQUIRE(Y.cols() == lo.tokens());
  ddl::zeroGrad(conv);
  conv.backward(G, dX);
  FD_CHECK(dX, numericGrad(X, loss));
  checkParams(conv, loss);
}

TEST_CASE("Conv2d matches the direct sum and stores PyTorch's weight shape", "[nn][conv]") {
  ddl::Conv2d<double> conv(2, 3, 3, 2, 1);
  ddl::Rng rng(5);
  conv.init(rng);
  CHECK(conv.weight().shape == std::vector<Index>{3, 2, 3, 3});
  CHECK(conv.bias().shape == std::vector<Index>{3});
  const ddl::TokenLayout l = ddl::TokenLayout::image(2, 5, 4), lo = conv.outputLayout(l);
  CHECK(lo == ddl::TokenLayout::image(2, 3, 2));
  std::srand(2);
  MatX<double> X = MatX<double>::Random(2, l.tokens()), Y;
  conv.forward(X, l, Y);
  double worst = 0;
  for (Index b = 0; b < 2; ++b)
    for (Index oy = 0; oy < 3; ++oy)
      for (Index ox = 0; ox < 2; ++ox)
        for (Index o = 0; o < 3; ++o) {
          double s = conv.bias().value(o, 0);
          for (Index c = 0; c < 2; ++c)
            for (Index ky = 0; ky < 3; ++ky)
              for (Index kx = 0; kx < 3; ++kx) {
                const Index y = oy * 2 + ky - 1, x = ox * 2 + kx - 1;
                if (y < 0 || y >= 5 || x < 0 || x >= 4) continue;
                s += conv.weight().value(o, (c * 3 + ky) * 3 + kx) * X(c, (b * 5 + y) * 4 + x);
              }
          worst = std::max(worst, std::abs(s - Y(o, (b * 3 + oy) * 2 + ox)));
        }
  CHECK(worst < 1e-12);
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::Error>([&] { conv.forward(X.leftCols(3), l, Y); }), "ddl::Conv2d::forward"));
}

TEST_CASE("DeltaConvBlock backward matches central differences per preset, residual kind and dv", "[nn][conv][grad]") {
  const auto preset = GENERATE(as<std::string>{}, "code", "paper", "v1");
  const auto kind = GENERATE(ddl::ResidualKind::Delta, ddl::ResidualKind::WriteOnly, ddl::ResidualKind::Additive);
  const Index dv = GENERATE(1, 2);
  const auto seed = GENERATE(take(1, random(1u, 100000u)));
  std::mt19937 gen(seed);
  std::srand(seed);
  const Index d = std::uniform_int_distribution<int>(1, 3)(gen), B = std::uniform_int_distribution<int>(1, 2)(gen);
  const Index H = std::uniform_int_distribution<int>(1, 3)(gen), W = std::uniform_int_distribution<int>(1, 3)(gen);
  CAPTURE(preset, ddl::toString(kind), dv, seed, d, B, H, W);
  ddl::ConvDeltaNetConfig cfg = smallConfig(kind, dv, preset);
  ddl::DeltaBlockOptions opt = cfg.block;
  opt.hidden = 2;
  if (d == 1) opt.residual.epsK = 0.5;  // d = 1: |k| = 1 always, keep the normalisation smooth
  ddl::DeltaConvBlock<double> blk(d, dv, opt);
  ddl::Rng init(seed);
  blk.init(init);
  perturb(blk, 0.2);
  const ddl::TokenLayout l = ddl::TokenLayout::image(B, H, W);
  MatX<double> X = MatX<double>::Random(d, dv * l.tokens()), G = MatX<double>::Random(d, dv * l.tokens()), Y, dX;
  auto loss = [&] { MatX<double> Yl; blk.forward(X, l, Yl); return (G.array() * Yl.array()).sum(); };
  blk.forward(X, l, Y);
  ddl::zeroGrad(blk);
  blk.backward(G, dX);
  FD_CHECK(dX, numericGrad(X, loss));
  checkParams(blk, loss);
}

TEST_CASE("additive DeltaConvBlock is the plain pre-norm residual conv block", "[nn][conv]") {
  ddl::DeltaBlockOptions opt;
  opt.residual.residual = ddl::ResidualKind::Additive;
  opt.activation = ddl::Activation::ReLU;
  ddl::DeltaConvBlock<double> blk(3, 1, opt);
  ddl::Rng rng(9);
  blk.init(rng);
  std::vector<std::string> names;
  blk.visitParams("", [&](const std::string& n, ddl::Param<double>&) { names.push_back(n); });
  CHECK(names == std::vector<std::string>{"norm.weight", "conv.conv1.weight", "conv.conv1.bias", "conv.conv2.weight",
                                          "conv.conv2.bias"});
  // the same computation by hand: X + conv2(relu(conv1(RMSNorm(X))))
  ddl::Conv2d<double> c1(3, 3, 3, 1, 1), c2(3, 3, 3, 1, 1);
  ddl::Rng same(9);
  c1.init(same);
  c2.init(same);
  const ddl::TokenLayout l = ddl::TokenLayout::image(2, 4, 3);
  std::srand(4);
  MatX<double> X = MatX<double>::Random(3, l.tokens()), Y, c, a, h;
  blk.forward(X, l, Y);
  c.resize(3, l.tokens());
  for (Index j = 0; j < X.cols(); ++j) c.col(j) = X.col(j) / std::sqrt(X.col(j).squaredNorm() / 3 + 1e-5);
  c1.forward(c, l, a);
  a = a.cwiseMax(0.0);
  c2.forward(a, l, h);
  CHECK(relErr(Y, MatX<double>(X + h)) < 1e-13);
}

TEST_CASE("whole ConvDeltaNet backward matches central differences per residual kind and dv", "[nn][conv][grad]") {
  const auto kind = GENERATE(ddl::ResidualKind::Delta, ddl::ResidualKind::WriteOnly, ddl::ResidualKind::Additive);
  const Index dv = GENERATE(1, 2);
  const Index stemStride = GENERATE(1, 2);
  CAPTURE(ddl::toString(kind), dv, stemStride);
  ddl::ConvDeltaNetConfig cfg = smallConfig(kind, dv);
  cfg.stemStride = stemStride;
  ddl::ConvDeltaNet<double> net(cfg, 7);
  std::srand(5);
  perturb(net, 0.2);
  MatX<double> X = MatX<double>::Random(net.inputDim(), 2), G = MatX<double>::Random(3, 2), logits;
  auto loss = [&] { MatX<double> l; net.forward(X, l); return (G.array() * l.array()).sum(); };
  net.forward(X, logits);
  REQUIRE(logits.rows() == 3);
  ddl::zeroGrad(net);
  net.backward(G);
  checkParams(net, loss);
}

TEST_CASE("ConvDeltaNet gives the same gradients on 2 threads as on 1 (parallel paths)", "[nn][conv][threads]") {
  const Index dv = GENERATE(1, 2);
  CAPTURE(dv);
  ddl::ConvDeltaNetConfig cfg = smallConfig(ddl::ResidualKind::Delta, dv);
  cfg.channels = 3;
  cfg.height = cfg.width = 16;
  cfg.widths = {32, 48};
  cfg.depths = {1, 1};
  auto gradients = [&](int threads) {
    ddl::setNumThreads(threads);
    ddl::ConvDeltaNet<double> net(cfg, 3);
    std::srand(8);
    MatX<double> X = MatX<double>::Random(cfg.inputDim(), 8), G = MatX<double>::Random(3, 8), logits;
    net.forward(X, logits);
    ddl::zeroGrad(net);
    net.backward(G);
    std::vector<MatX<double>> g;
    net.visitParams("", [&](const std::string&, ddl::Param<double>& p) { g.push_back(p.grad); });
    g.push_back(logits);
    return g;
  };
  const auto one = gradients(1), two = gradients(2);
  ddl::setNumThreads(0);
  REQUIRE(one.size() == two.size());
  for (std::size_t i = 0; i < one.size(); ++i) {
    CAPTURE(i);
    CHECK(relErr(one[i], two[i]) < 1e-12);
  }
}

TEST_CASE("ConvDeltaNet::init(seed) after training equals a new net of that seed, every parameter", "[nn][conv][init]") {
  ddl::ConvDeltaNetConfig cfg = smallConfig(ddl::ResidualKind::Delta, 2);
  cfg.learnedExpansion = true;
  ddl::ConvDeltaNet<float> net(cfg, 5);
  net.visitParams("", [](const std::string&, ddl::Param<float>& p) { p.value.array() += 0.25f; });
  net.init(5);
  ddl::ConvDeltaNet<float> fresh(cfg, 5);
  std::vector<MatX<float>> a, b;
  net.visitParams("", [&](const std::string&, ddl::Param<float>& p) { a.push_back(p.value); });
  fresh.visitParams("", [&](const std::string&, ddl::Param<float>& p) { b.push_back(p.value); });
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(a[i] == b[i]);
  }
}

TEST_CASE("ConvDeltaNetConfig round-trips through key/values and refuses bad values", "[nn][conv][config]") {
  ddl::ConvDeltaNetConfig c = smallConfig(ddl::ResidualKind::WriteOnly, 2, "paper");
  c.widths = {8, 16, 24};
  c.depths = {2, 0, 1};
  const auto kv = c.toKeyValues();
  CHECK(ddl::ConvDeltaNetConfig::fromKeyValues(kv).toKeyValues() == kv);
  auto bad = kv;
  bad["widths"] = "8,x";
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::Error>([&] { ddl::ConvDeltaNetConfig::fromKeyValues(bad); }), "widths"));
  bad = kv;
  bad["model"] = "delta_net";
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::Error>([&] { ddl::ConvDeltaNetConfig::fromKeyValues(bad); }), "conv_delta_net"));
  ddl::ConvDeltaNetConfig wrong = c;
  wrong.depths = {1};
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::Error>([&] { wrong.validate(); }), "one per stage"));
  wrong = c;
  wrong.block.hidden = 4;
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::Error>([&] { wrong.validate(); }), "block.hidden"));
}

TEST_CASE("ConvDeltaNet checkpoint round trip reproduces the logits, names are dotted", "[nn][conv][io]") {
  ddl::ConvDeltaNetConfig cfg = smallConfig(ddl::ResidualKind::Delta, 2);
  ddl::ConvDeltaNet<float> a(cfg, 1), b(cfg, 2);
  std::vector<std::string> names;
  a.visitParams("", [&](const std::string& n, ddl::Param<float>&) { names.push_back(n); });
  CHECK(names.front() == "stem.weight");
  CHECK(std::find(names.begin(), names.end(), "transitions.0.conv.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "blocks.1.conv.conv2.bias") != names.end());
  CHECK(std::find(names.begin(), names.end(), "blocks.0.delta.gate.weight") != names.end());
  CHECK(names.back() == "head.bias");
  const std::string path = std::string(DDL_TEST_TMPDIR) + "/conv_net_roundtrip.safetensors";
  ddl::saveCheckpoint(path, a);
  ddl::loadCheckpoint(path, b);
  std::srand(3);
  MatX<float> X = MatX<float>::Random(cfg.inputDim(), 3), la, lb;
  a.forward(X, la);
  b.forward(X, lb);
  CHECK(la == lb);
}

TEST_CASE("Trainer trains a ConvDeltaNet on a separable image task", "[train][conv]") {
  // class = which half of the image is bright (left / right / top), with noise
  ddl::Dataset<float> d;
  const Index N = 192, H = 6, W = 6;
  d.shape = ddl::ImageShape{1, H, W};
  d.numClasses = 3;
  d.images.resize(H * W, N);
  ddl::Rng rng(4);
  for (Index i = 0; i < N; ++i) {
    const int label = static_cast<int>(i % 3);
    d.labels.push_back(label);
    for (Index y = 0; y < H; ++y)
      for (Index x = 0; x < W; ++x) {
        const bool bright = label == 0 ? x < W / 2 : label == 1 ? x >= W / 2 : y < H / 2;
        d.images(y * W + x, i) = static_cast<float>((bright ? 1.0 : 0.0) + 0.3 * rng.normal());
      }
  }
  ddl::ConvDeltaNetConfig cfg = smallConfig(ddl::ResidualKind::Delta, 1);
  cfg.channels = 1;
  cfg.height = H;
  cfg.width = W;
  ddl::ConvDeltaNet<float> net(cfg, 1);
  ddl::TrainerOptions opt;
  opt.epochs = 8;
  opt.batchSize = 32;
  opt.adam.lr = 1e-2;
  ddl::Trainer<float, ddl::ConvDeltaNet<float>> trainer(net, d, opt, nullptr, &d);
  const ddl::EpochMetrics m = trainer.run();
  CHECK(m.test.accuracy > 0.9);
  CHECK(trainer.gates().stats().size() == 2);  // the gate audit sees both blocks
}

TEST_CASE("example path: write a tiny CIFAR-10 set", "[data][conv][example]") {
  // 4 classes (the bright quadrant of the image), 400 training and 200 test records, written through
  // temporary names and renamed so a concurrent reader sees complete files only.
  const std::string dir = std::string(DDL_TEST_TMPDIR) + "/conv_net_tiny_cifar";
  std::filesystem::create_directories(dir);
  ddl::Rng rng(21);
  auto write = [&](const std::string& name, int n) {
    std::vector<char> bytes;
    for (int i = 0; i < n; ++i) {
      const int label = i % 4;
      bytes.push_back(static_cast<char>(label));
      for (int c = 0; c < 3; ++c)
        for (int y = 0; y < 32; ++y)
          for (int x = 0; x < 32; ++x) {
            const bool bright = (y < 16) == (label < 2) && (x < 16) == (label % 2 == 0);
            const double v = (bright ? 170.0 : 60.0) + 40.0 * rng.normal();
            bytes.push_back(static_cast<char>(static_cast<unsigned char>(std::clamp(v, 0.0, 255.0))));
          }
    }
    const std::string tmp = dir + "/" + name + ".tmp";
    {
      std::ofstream os(tmp, std::ios::binary);
      os.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      REQUIRE(os.good());
    }
    std::filesystem::rename(tmp, dir + "/" + name);
  };
  write("data_batch_1.bin", 400);
  write("test_batch.bin", 200);
  const ddl::Dataset<float> test = ddl::loadCifar10<float>(dir, ddl::DataPart::Test);
  CHECK(test.size() == 200);
  CHECK(test.labels[3] == 3);
}

}  // namespace test_conv_net
