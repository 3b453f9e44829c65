// Tests for include/ddl/train: AdamW, Sgd, clipGradNorm, LrSchedule. The optimizers see models only
// through visitParams, so the models here are small hand-written structs.
#include "eigen_guard.hpp"  // first: live allocation checks even with NDEBUG

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/grad_clip.hpp"
#include "ddl/train/lr_schedule.hpp"
#include "ddl/train/sgd.hpp"

#include "counting_new.hpp"  // counts every global operator new of this executable

namespace test_train_optim {  // each test file in its own namespace: a group of files compiles as one unit

namespace {

using ddl::MatX;
using ddl::Param;

// w: (2, 1) with weight decay, b: (1, 1) without (a bias).
template <class S>
struct WB {
  Param<S> w{2, 1};
  Param<S> b{1, 1, false};
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    f(ddl::joinName(prefix, "w"), w);
    f(ddl::joinName(prefix, "b"), b);
  }
};

// A nested model, for dotted names: "blocks.0.w", "blocks.0.b", "head".
struct Nested {
  WB<double> block;
  Param<double> head{1, 2};
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    block.visitParams(ddl::joinName(prefix, "blocks.0"), f);
    f(ddl::joinName(prefix, "head"), head);
  }
};

// Any number of named parameters, so tests can rename, reshape, add and drop them.
struct Flexible {
  std::vector<std::string> names;
  std::vector<Param<double>> params;
  void add(const std::string& name, ddl::Index rows, ddl::Index cols, bool decay = true) {
    names.push_back(name);
    params.emplace_back(rows, cols, decay);
  }
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    for (std::size_t i = 0; i < params.size(); ++i) f(ddl::joinName(prefix, names[i]), params[i]);
  }
};

double val(const Param<double>& p, ddl::Index i = 0) { return p.value(i); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// AdamW

TEST_CASE("AdamW matches a hand-computed two-step example", "[train][adamw]") {
  ddl::AdamWOptions o;
  o.lr = 0.1;  // beta1 0.9, beta2 0.999, eps 1e-8, weightDecay 0.01 are the defaults
  ddl::AdamW<double> opt(o);
  WB<double> m;
  m.w.value << 1.0, -2.0;
  m.b.value << 0.3;

  // Step 1 (t = 1: 1 - beta1^t = 0.1, 1 - beta2^t = 0.001), grads w = (0.5, -1), b = 0.2.
  //   w0: decay 1 -> 0.999; m = 0.05, v = 0.00025; m^ = 0.5, sqrt(v^) = 0.5
  //   w1: decay -2 -> -1.998; m = -0.1, v = 0.001; m^ = -1, sqrt(v^) = 1
  //   b : no decay; m = 0.02, v = 0.00004; m^ = 0.2, sqrt(v^) = 0.2
  m.w.grad << 0.5, -1.0;
  m.b.grad << 0.2;
  opt.step(m);
  const double w0s1 = 0.999 - 0.1 * 0.5 / (0.5 + 1e-8);
  const double w1s1 = -1.998 + 0.1 * 1.0 / (1.0 + 1e-8);
  const double bs1 = 0.3 - 0.1 * 0.2 / (0.2 + 1e-8);
  CHECK(val(m.w, 0) == Approx(w0s1).epsilon(1e-12));
  CHECK(val(m.w, 1) == Approx(w1s1).epsilon(1e-12));
  CHECK(val(m.b) == Approx(bs1).epsilon(1e-12));
  CHECK(opt.stepCount() == 1);

  // Step 2 (t = 2: 1 - beta1^2 = 0.19, 1 - beta2^2 = 0.001999), grads w = (-0.25, 2), b = 0.2.
  //   w0: m = 0.9*0.05 + 0.1*(-0.25) = 0.02;  v = 0.999*0.00025 + 0.001*0.0625 = 0.00031225
  //   w1: m = 0.9*(-0.1) + 0.1*2 = 0.11;       v = 0.999*0.001 + 0.001*4 = 0.004999
  //   b : m = 0.9*0.02 + 0.1*0.2 = 0.038;      v = 0.999*0.00004 + 0.001*0.04 = 0.00007996
  //       so m^ = 0.038/0.19 = 0.2 and v^ = 0.00007996/0.001999 = 0.04: the same step as step 1,
  //       which holds only if bias correction counts steps, not tensors (b is visited second).
  m.w.grad << -0.25, 2.0;
  m.b.grad << 0.2;
  opt.step(m);
  const double w0s2 = w0s1 * 0.999 - 0.1 * (0.02 / 0.19) / (std::sqrt(0.00031225 / 0.001999) + 1e-8);
  const double w1s2 = w1s1 * 0.999 - 0.1 * (0.11 / 0.19) / (std::sqrt(0.004999 / 0.001999) + 1e-8);
  const double bs2 = bs1 - 0.1 * 0.2 / (0.2 + 1e-8);
  CHECK(val(m.w, 0) == Approx(w0s2).epsilon(1e-12));
  CHECK(val(m.w, 1) == Approx(w1s2).epsilon(1e-12));
  CHECK(val(m.b) == Approx(bs2).epsilon(1e-12));
  // Numbers from an independent scalar loop in Python for the same example:
  CHECK(val(m.w, 0) == Approx(0.8714672987058463).epsilon(1e-12));
  CHECK(val(m.w, 1) == Approx(-1.9327123534710748).epsilon(1e-12));
  CHECK(val(m.b) == Approx(0.10000001).epsilon(1e-12));
  CHECK(opt.stepCount() == 2);

  // The moments themselves, through the checkpoint interface.
  std::vector<std::string> names;
  std::vector<double> first;
  opt.visitState([&](const std::string& name, MatX<double>& t) {
    names.push_back(name);
    first.push_back(t(0));
  });
  REQUIRE(names == std::vector<std::string>{"w.exp_avg", "w.exp_avg_sq", "b.exp_avg", "b.exp_avg_sq"});
  CHECK(first[0] == Approx(0.02).epsilon(1e-12));
  CHECK(first[1] == Approx(0.00031225).epsilon(1e-12));
  CHECK(first[2] == Approx(0.038).epsilon(1e-12));
  CHECK(first[3] == Approx(0.00007996).epsilon(1e-12));
}

TEST_CASE("AdamW decays only params with decay == true", "[train][adamw]") {
  ddl::AdamWOptions o;
  o.lr = 0.1;
  o.weightDecay = 0.5;
  ddl::AdamW<double> opt(o);
  WB<double> m;
  m.w.value << 2.0, -4.0;
  m.b.value << 3.0;
  // Zero gradients: the Adam term is 0 / (0 + eps) = 0, so only decoupled decay moves w:
  // w *= 1 - lr * wd = 0.95 per step; b stays.
  opt.step(m);
  CHECK(val(m.w, 0) == Approx(1.9).epsilon(1e-14));
  CHECK(val(m.w, 1) == Approx(-3.8).epsilon(1e-14));
  CHECK(val(m.b) == 3.0);
  opt.step(m);
  CHECK(val(m.w, 0) == Approx(1.805).epsilon(1e-14));
  CHECK(val(m.b) == 3.0);

  // weightDecay = 0 leaves decayed params untouched too.
  o.weightDecay = 0.0;
  ddl::AdamW<double> noDecay(o);
  noDecay.step(m);
  CHECK(val(m.w, 0) == Approx(1.805).epsilon(1e-14));
}

TEST_CASE("AdamW counts one step per step() whatever the number of params", "[train][adamw]") {
  ddl::AdamWOptions o;
  o.lr = 0.01;
  o.weightDecay = 0.0;
  ddl::AdamW<double> opt(o);
  Flexible m;
  for (const char* n : {"a", "b", "c", "d", "e"}) m.add(n, 1, 1);
  for (auto& p : m.params) p.grad.setConstant(1.0);
  // Constant gradient 1: m^ = 1 and v^ = 1 at every t if t counts steps, so every parameter
  // moves by lr / (1 + eps) per step. Counting per tensor would give each parameter a different t.
  for (int s = 1; s <= 3; ++s) {
    opt.step(m);
    CHECK(opt.stepCount() == s);
    for (std::size_t i = 0; i < m.params.size(); ++i) {
      CAPTURE(s, i);
      CHECK(val(m.params[i]) == Approx(-s * 0.01 / (1.0 + 1e-8)).epsilon(1e-12));
    }
  }
}

TEST_CASE("AdamW keeps a step count set before its first step", "[train][adamw]") {
  ddl::AdamWOptions o;
  o.lr = 0.01;
  o.weightDecay = 0.0;
  ddl::AdamW<double> opt(o);
  opt.setStepCount(5);
  Flexible m;
  m.add("x", 1, 1);
  m.params[0].grad(0) = 1.0;
  opt.step(m);
  CHECK(opt.stepCount() == 6);
  // t = 6 with zero moments: m = 0.1, v = 0.001; 1 - 0.9^6 = 0.468559, 1 - 0.999^6 = 0.005985019985005999
  CHECK(val(m.params[0]) ==
        Approx(-0.01 * (0.1 / 0.468559) / (std::sqrt(0.001 / 0.005985019985005999) + 1e-8)).epsilon(1e-12));
}

TEST_CASE("AdamW verifies the state by name and shape on every step", "[train][adamw]") {
  ddl::AdamWOptions o;
  o.lr = 0.1;
  ddl::AdamW<double> opt(o);
  Flexible m;
  m.add("first", 2, 2);
  m.add("w", 2, 1);
  for (auto& p : m.params) {
    p.value.setConstant(1.0);
    p.grad.setConstant(0.5);
  }
  opt.step(m);
  const MatX<double> firstAfterStep1 = m.params[0].value;

  SECTION("a reshaped parameter names itself and both shapes; nothing is updated") {
    m.params[1] = Param<double>(3, 1);
    const std::string msg = ddl_test::thrownMessage<ddl::ShapeError>([&] { opt.step(m); });
    CHECK(ddl_test::contains(msg, "AdamW::step"));
    CHECK(ddl_test::contains(msg, "'w'"));
    CHECK(ddl_test::contains(msg, "(3, 1)"));
    CHECK(ddl_test::contains(msg, "(2, 1)"));
    CHECK(m.params[0].value == firstAfterStep1);  // verified before any update
    CHECK(opt.stepCount() == 1);
  }
  SECTION("a renamed parameter") {
    m.names[1] = "v";
    const std::string msg = ddl_test::thrownMessage<ddl::ValueError>([&] { opt.step(m); });
    CHECK(ddl_test::contains(msg, "AdamW::step"));
    CHECK(ddl_test::contains(msg, "'v'"));
    CHECK(ddl_test::contains(msg, "'w'"));
  }
  SECTION("an extra parameter") {
    m.add("extra", 1, 1);
    const std::string msg = ddl_test::thrownMessage<ddl::ValueError>([&] { opt.step(m); });
    CHECK(ddl_test::contains(msg, "'extra'"));
  }
  SECTION("a missing parameter") {
    m.names.pop_back();
    m.params.pop_back();
    const std::string msg = ddl_test::thrownMessage<ddl::ValueError>([&] { opt.step(m); });
    CHECK(ddl_test::contains(msg, "has 1 parameters but the optimizer state has 2"));
    CHECK(ddl_test::contains(msg, "'w'"));
  }
  SECTION("a grad of the wrong shape") {
    m.params[1].grad.resize(1, 2);
    const std::string msg = ddl_test::thrownMessage<ddl::ShapeError>([&] { opt.step(m); });
    CHECK(ddl_test::contains(msg, "'w'"));
    CHECK(ddl_test::contains(msg, "grad shape (1, 2)"));
  }
  SECTION("a state tensor resized through visitState (a bad checkpoint load)") {
    opt.visitState([](const std::string& name, MatX<double>& t) {
      if (name == "w.exp_avg_sq") t.resize(4, 4);
    });
    const std::string msg = ddl_test::thrownMessage<ddl::ShapeError>([&] { opt.step(m); });
    CHECK(ddl_test::contains(msg, "exp_avg_sq has shape (4, 4)"));
  }
  SECTION("a moved model is fine: state is keyed by walk order, not address") {
    Flexible moved = std::move(m);
    CHECK_NOTHROW(opt.step(moved));
    CHECK(opt.stepCount() == 2);
  }
}

TEST_CASE("AdamW rejects invalid options naming the option and value", "[train][adamw]") {
  auto msgFor = [](ddl::AdamWOptions o) {
    return ddl_test::thrownMessage<ddl::ValueError>([&] { ddl::AdamW<float> opt(o); });
  };
  ddl::AdamWOptions o;
  o.lr = -1;
  CHECK(ddl_test::contains(msgFor(o), "AdamW: option lr = -1"));
  o = {};
  o.beta1 = 1.0;
  CHECK(ddl_test::contains(msgFor(o), "option beta1 = 1 must be in [0, 1)"));
  o = {};
  o.beta2 = -0.1;
  CHECK(ddl_test::contains(msgFor(o), "option beta2 = -0.1"));
  o = {};
  o.eps = 0;
  CHECK(ddl_test::contains(msgFor(o), "option eps = 0"));
  o = {};
  o.weightDecay = -0.5;
  CHECK(ddl_test::contains(msgFor(o), "option weightDecay = -0.5"));
  o = {};
  o.lr = std::numeric_limits<double>::quiet_NaN();
  CHECK(ddl_test::contains(msgFor(o), "option lr = nan"));

  ddl::AdamW<float> opt;
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([&] { opt.setLr(-0.5); }),
                           "AdamW::setLr: lr = -0.5"));
  opt.setLr(0.25);
  CHECK(opt.lr() == 0.25);
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([&] { opt.setStepCount(-3); }),
                           "step count = -3"));
}

TEST_CASE("AdamW state: names, initState, hyperParams, and a copy that continues identically", "[train][adamw]") {
  ddl::AdamWOptions o;
  o.lr = 0.05;
  ddl::AdamW<double> a(o);
  CHECK(std::string(ddl::AdamW<double>::kName) == "adamw");
  CHECK(a.hyperParams() == std::map<std::string, double>{
                               {"lr", 0.05}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0.01}});
  int visitedFresh = 0;  // a fresh optimizer has no state tensors yet, only a step count
  a.visitState([&](const std::string&, MatX<double>&) { ++visitedFresh; });
  CHECK(visitedFresh == 0);
  CHECK_FALSE(a.hasState());

  Nested m;
  m.block.w.value << 0.5, -0.5;
  m.head.value << 1.0, 2.0;
  auto setGrads = [](Nested& n, double s) {
    n.block.w.grad << s, -2 * s;
    n.block.b.grad << 0.5 * s;
    n.head.grad << -s, 3 * s;
  };
  for (int s = 1; s <= 3; ++s) {
    setGrads(m, 0.1 * s);
    a.step(m);
  }
  std::vector<std::string> names;
  a.visitState([&](const std::string& name, MatX<double>&) { names.push_back(name); });
  CHECK(names == std::vector<std::string>{"blocks.0.w.exp_avg", "blocks.0.w.exp_avg_sq", "blocks.0.b.exp_avg",
                                          "blocks.0.b.exp_avg_sq", "head.exp_avg", "head.exp_avg_sq"});

  // What a checkpoint does: fresh optimizer, initState, copy tensors by name, restore the counter.
  ddl::AdamW<double> b(o);
  Nested copy = m;
  b.initState(copy);
  CHECK(b.stepCount() == 0);
  std::vector<MatX<double>> saved;
  a.visitState([&](const std::string&, MatX<double>& t) { saved.push_back(t); });
  std::size_t k = 0;
  b.visitState([&](const std::string&, MatX<double>& t) {
    CHECK(t.isZero(0.0));
    t = saved[k++];
  });
  b.setStepCount(a.stepCount());
  for (int s = 4; s <= 5; ++s) {
    setGrads(m, 0.1 * s);
    setGrads(copy, 0.1 * s);
    a.step(m);
    b.step(copy);
  }
  CHECK(m.block.w.value == copy.block.w.value);
  CHECK(m.block.b.value == copy.block.b.value);
  CHECK(m.head.value == copy.head.value);
  CHECK(b.stepCount() == 5);
}

// ---------------------------------------------------------------------------------------------
// SGD

TEST_CASE("Sgd momentum, Nesterov and dampening match hand-computed values", "[train][sgd]") {
  // One scalar x = 1 with gradients 1, 0.5, -1; lr 0.1, momentum 0.9.
  const double grads[3] = {1.0, 0.5, -1.0};
  auto run = [&](ddl::SgdOptions o, int steps) {
    ddl::Sgd<double> opt(o);
    Flexible m;
    m.add("x", 1, 1);
    m.params[0].value(0) = 1.0;
    std::vector<double> xs;
    for (int s = 0; s < steps; ++s) {
      m.params[0].grad(0) = grads[s];
      opt.step(m);
      xs.push_back(val(m.params[0]));
    }
    return xs;
  };
  ddl::SgdOptions o;
  o.lr = 0.1;
  SECTION("plain") {
    // x = 1 - 0.1 = 0.9; 0.9 - 0.05 = 0.85; 0.85 + 0.1 = 0.95
    const auto xs = run(o, 3);
    CHECK(xs[0] == Approx(0.9).epsilon(1e-14));
    CHECK(xs[1] == Approx(0.85).epsilon(1e-14));
    CHECK(xs[2] == Approx(0.95).epsilon(1e-14));
  }
  SECTION("momentum") {
    // buf = 1 (first step: buf = g)          x = 1 - 0.1*1 = 0.9
    // buf = 0.9*1 + 0.5 = 1.4                x = 0.9 - 0.14 = 0.76
    // buf = 0.9*1.4 - 1 = 0.26               x = 0.76 - 0.026 = 0.734
    o.momentum = 0.9;
    const auto xs = run(o, 3);
    CHECK(xs[0] == Approx(0.9).epsilon(1e-14));
    CHECK(xs[1] == Approx(0.76).epsilon(1e-14));
    CHECK(xs[2] == Approx(0.734).epsilon(1e-14));
  }
  SECTION("Nesterov") {
    // buf = 1;    g' = 1 + 0.9*1 = 1.9        x = 1 - 0.19 = 0.81
    // buf = 1.4;  g' = 0.5 + 0.9*1.4 = 1.76   x = 0.81 - 0.176 = 0.634
    // buf = 0.26; g' = -1 + 0.9*0.26 = -0.766 x = 0.634 + 0.0766 = 0.7106
    o.momentum = 0.9;
    o.nesterov = true;
    const auto xs = run(o, 3);
    CHECK(xs[0] == Approx(0.81).epsilon(1e-14));
    CHECK(xs[1] == Approx(0.634).epsilon(1e-14));
    CHECK(xs[2] == Approx(0.7106).epsilon(1e-14));
  }
  SECTION("dampening is not applied on the first step (PyTorch)") {
    // buf = 1 (not 0.5)                      x = 0.9
    // buf = 0.9*1 + 0.5*0.5 = 1.15           x = 0.9 - 0.115 = 0.785
    o.momentum = 0.9;
    o.dampening = 0.5;
    const auto xs = run(o, 2);
    CHECK(xs[0] == Approx(0.9).epsilon(1e-14));
    CHECK(xs[1] == Approx(0.785).epsilon(1e-14));
  }
}

TEST_CASE("Sgd weight decay is L2 on the gradient, only for decay params", "[train][sgd]") {
  ddl::SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weightDecay = 0.1;
  ddl::Sgd<double> opt(o);
  WB<double> m;
  m.w.value << 1.0, 1.0;
  m.b.value << 1.0;
  // w: g' = 1 + 0.1*1 = 1.1, buf = 1.1, x = 1 - 0.11 = 0.89
  //    g' = 0.5 + 0.1*0.89 = 0.589, buf = 0.9*1.1 + 0.589 = 1.579, x = 0.89 - 0.1579 = 0.7321
  // b: no decay: buf = 1, x = 0.9; buf = 1.4, x = 0.76
  m.w.grad.setConstant(1.0);
  m.b.grad.setConstant(1.0);
  opt.step(m);
  CHECK(val(m.w, 1) == Approx(0.89).epsilon(1e-14));
  CHECK(val(m.b) == Approx(0.9).epsilon(1e-14));
  m.w.grad.setConstant(0.5);
  m.b.grad.setConstant(0.5);
  opt.step(m);
  CHECK(val(m.w, 0) == Approx(0.7321).epsilon(1e-14));
  CHECK(val(m.b) == Approx(0.76).epsilon(1e-14));
  CHECK(opt.stepCount() == 2);
}

TEST_CASE("Sgd state names, verification and options", "[train][sgd]") {
  CHECK(std::string(ddl::Sgd<float>::kName) == "sgd");
  ddl::SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  ddl::Sgd<double> opt(o);
  Nested m;
  opt.initState(m);
  std::vector<std::string> names;
  opt.visitState([&](const std::string& name, MatX<double>& t) {
    names.push_back(name);
    CHECK(t.isZero(0.0));
  });
  CHECK(names == std::vector<std::string>{"blocks.0.w.momentum_buffer", "blocks.0.b.momentum_buffer",
                                          "head.momentum_buffer"});
  CHECK(opt.hyperParams() == std::map<std::string, double>{
                                 {"lr", 0.1}, {"momentum", 0.9}, {"dampening", 0.0}, {"weight_decay", 0.0},
                                 {"nesterov", 0.0}});

  m.head = Param<double>(2, 2);
  const std::string msg = ddl_test::thrownMessage<ddl::ShapeError>([&] { opt.step(m); });
  CHECK(ddl_test::contains(msg, "Sgd::step"));
  CHECK(ddl_test::contains(msg, "'head'"));
  CHECK(ddl_test::contains(msg, "momentum_buffer has shape (1, 2)"));

  // Without momentum there is no state to save.
  ddl::Sgd<double> plain;
  plain.initState(m);
  int visited = 0;
  plain.visitState([&](const std::string&, MatX<double>&) { ++visited; });
  CHECK(visited == 0);

  auto msgFor = [](ddl::SgdOptions bad) {
    return ddl_test::thrownMessage<ddl::ValueError>([&] { ddl::Sgd<float> s(bad); });
  };
  ddl::SgdOptions bad;
  bad.lr = -0.1;
  CHECK(ddl_test::contains(msgFor(bad), "Sgd: option lr = -0.1"));
  bad = {};
  bad.momentum = -1;
  CHECK(ddl_test::contains(msgFor(bad), "option momentum = -1"));
  bad = {};
  bad.dampening = 2;
  CHECK(ddl_test::contains(msgFor(bad), "option dampening = 2"));
  bad = {};
  bad.weightDecay = -1e-4;
  CHECK(ddl_test::contains(msgFor(bad), "option weightDecay = -0.0001"));
  bad = {};
  bad.nesterov = true;
  CHECK(ddl_test::contains(msgFor(bad), "nesterov = true needs momentum > 0"));
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([&] { opt.setLr(-2); }), "Sgd::setLr: lr = -2"));
}

// ---------------------------------------------------------------------------------------------
// Allocation

int* volatile g_escape = nullptr;  // an allocation stored here is observable

TEST_CASE("the no-malloc guard of this file does fire", "[train][alloc]") {
  // Without this, a silent guard (NDEBUG) would make the next test pass vacuously.
  Eigen::internal::set_is_malloc_allowed(false);
  const std::string msg = ddl_test::thrownMessage<std::logic_error>([] { MatX<float> big(64, 64); });
  Eigen::internal::set_is_malloc_allowed(true);
  CHECK(ddl_test::contains(msg, "heap allocation is forbidden"));
  const long before = ddl_test::operatorNewCount();
  std::vector<int> v(100);
  g_escape = v.data();  // the allocation escapes: clang may not elide it
  CHECK(ddl_test::operatorNewCount() > before);
  g_escape = nullptr;
}

TEST_CASE("AdamW and Sgd steps allocate nothing after the first step", "[train][alloc]") {
  WB<float> m;  // short names: the walk's std::string values fit the small-string buffer
  m.w.value << 1.0f, 2.0f;
  m.w.grad << 0.5f, -0.5f;
  m.b.grad << 0.25f;
  ddl::AdamW<float> adam;
  ddl::SgdOptions so;
  so.momentum = 0.9;
  so.nesterov = true;
  so.weightDecay = 1e-4;
  ddl::Sgd<float> sgd(so);
  adam.step(m);  // first steps allocate the state
  sgd.step(m);

  const long before = ddl_test::operatorNewCount();
  Eigen::internal::set_is_malloc_allowed(false);
  std::string failure;
  try {
    adam.step(m);
    sgd.step(m);
    adam.step(m);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  Eigen::internal::set_is_malloc_allowed(true);
  const long newCalls = ddl_test::operatorNewCount() - before;
  CHECK(failure.empty());
  CHECK(newCalls == 0);
  CHECK(adam.stepCount() == 3);
  CHECK(sgd.stepCount() == 2);
}

// ---------------------------------------------------------------------------------------------
// Gradient clipping

TEST_CASE("clipGradNorm returns the global norm and scales like PyTorch", "[train][clip]") {
  WB<double> m;
  auto setGrads = [&] {
    m.w.grad << 3.0, 0.0;
    m.b.grad << 4.0;  // global norm sqrt(9 + 16) = 5
  };
  SECTION("below maxNorm: untouched") {
    setGrads();
    CHECK(ddl::clipGradNorm(m, 10.0) == 5.0);
    CHECK(m.w.grad(0) == 3.0);
    CHECK(m.b.grad(0) == 4.0);
  }
  SECTION("above maxNorm: scaled by maxNorm / (norm + 1e-6)") {
    setGrads();
    CHECK(ddl::clipGradNorm(m, 1.0) == 5.0);
    const double c = 1.0 / (5.0 + 1e-6);
    CHECK(m.w.grad(0) == Approx(3.0 * c).epsilon(1e-15));
    CHECK(m.w.grad(1) == 0.0);
    CHECK(m.b.grad(0) == Approx(4.0 * c).epsilon(1e-15));
    CHECK(ddl::gradNorm(m) == Approx(5.0 / (5.0 + 1e-6)).epsilon(1e-15));
  }
  SECTION("exactly maxNorm: PyTorch's coefficient 5/(5+1e-6) < 1 still applies") {
    setGrads();
    CHECK(ddl::clipGradNorm(m, 5.0) == 5.0);
    CHECK(m.b.grad(0) == Approx(4.0 * 5.0 / (5.0 + 1e-6)).epsilon(1e-15));
  }
  SECTION("float gradients, norm accumulated in double") {
    WB<float> f;
    f.w.grad << 1e20f, 0.0f;  // 1e40 overflows float but not double
    f.b.grad << 1e20f;
    const double norm = ddl::clipGradNorm(f, 1.0);
    CHECK(norm == Approx(std::sqrt(2.0) * 1e20).epsilon(1e-6));
    CHECK(f.w.grad(0) == Approx(1.0 / std::sqrt(2.0)).epsilon(1e-6));
  }
  SECTION("huge but finite double gradients do not overflow the norm") {
    m.w.grad << 1e200, 1e200;
    m.b.grad << 0.0;
    CHECK(ddl::clipGradNorm(m, 1.0) == Approx(std::sqrt(2.0) * 1e200).epsilon(1e-12));
    CHECK(m.w.grad(0) == Approx(1.0 / std::sqrt(2.0)).epsilon(1e-12));
  }
  SECTION("a non-finite gradient names the first such parameter and changes nothing") {
    setGrads();
    m.b.grad(0) = std::numeric_limits<double>::quiet_NaN();
    std::string msg = ddl_test::thrownMessage<ddl::ValueError>([&] { ddl::clipGradNorm(m, 1.0); });
    CHECK(ddl_test::contains(msg, "clipGradNorm"));
    CHECK(ddl_test::contains(msg, "parameter 'b'"));
    CHECK(ddl_test::contains(msg, "entry (0, 0) = nan"));
    CHECK(m.w.grad(0) == 3.0);
    m.w.grad(1) = std::numeric_limits<double>::infinity();
    msg = ddl_test::thrownMessage<ddl::ValueError>([&] { ddl::clipGradNorm(m, 1.0); });
    CHECK(ddl_test::contains(msg, "parameter 'w'"));
    CHECK(ddl_test::contains(msg, "entry (1, 0) = inf"));
  }
  SECTION("long tensors: 16-lane chunks plus a tail") {
    Flexible f;
    f.add("long", 37, 1);  // 2 chunks of 16 and a tail of 5
    for (int i = 0; i < 37; ++i) f.params[0].grad(i) = i + 1;
    // sum of k^2 for k = 1..37 = 37 * 38 * 75 / 6 = 17575
    CHECK(ddl::clipGradNorm(f, 1e6) == Approx(std::sqrt(17575.0)).epsilon(1e-15));
    f.params[0].grad(20) = -std::numeric_limits<double>::infinity();
    CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([&] { ddl::clipGradNorm(f, 1.0); }),
                             "parameter 'long' is not finite: entry (20, 0) = -inf"));
  }
  SECTION("maxNorm must be positive") {
    setGrads();
    CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::ValueError>([&] { ddl::clipGradNorm(m, 0.0); }),
                             "clipGradNorm: maxNorm = 0"));
  }
}

// ---------------------------------------------------------------------------------------------
// LR schedules

TEST_CASE("LrSchedule cosine with warmup at key steps", "[train][schedule]") {
  const auto s = ddl::LrSchedule::cosine(1.0, /*warmupSteps=*/10, /*totalSteps=*/110, /*minLr=*/0.1);
  CHECK(s.lrAt(0) == Approx(0.1).epsilon(1e-15));   // 1 * (0 + 1) / 10
  CHECK(s.lrAt(4) == Approx(0.5).epsilon(1e-15));   // 1 * 5 / 10
  CHECK(s.lrAt(9) == Approx(1.0).epsilon(1e-15));   // warmup end: 10 / 10
  CHECK(s.lrAt(10) == Approx(1.0).epsilon(1e-15));  // cosine progress 0
  // progress 25/100: 0.1 + 0.45 (1 + cos(pi/4)) = 0.1 + 0.45 * 1.70710678118654752
  CHECK(s.lrAt(35) == Approx(0.868198051533946).epsilon(1e-13));
  CHECK(s.lrAt(60) == Approx(0.55).epsilon(1e-13));  // middle: progress 1/2, cos = 0
  CHECK(s.lrAt(110) == Approx(0.1).epsilon(1e-13));  // end: minLr
  CHECK(s.lrAt(111) == 0.1);                         // beyond end
  CHECK(s.lrAt(1000000) == 0.1);

  const auto noWarm = ddl::LrSchedule::cosine(2.0, 0, 4);  // minLr 0
  CHECK(noWarm.lrAt(0) == 2.0);
  CHECK(noWarm.lrAt(1) == Approx(1.0 + std::sqrt(0.5)).epsilon(1e-14));  // 1 + cos(pi/4)
  CHECK(noWarm.lrAt(2) == Approx(1.0).epsilon(1e-14));
  CHECK(noWarm.lrAt(4) == Approx(0.0).margin(1e-15));
}

TEST_CASE("LrSchedule constant and step at key steps", "[train][schedule]") {
  const auto c = ddl::LrSchedule::constant(0.01);
  CHECK(c.lrAt(0) == 0.01);
  CHECK(c.lrAt(123456) == 0.01);
  const auto cw = ddl::LrSchedule::constant(0.01, /*warmupSteps=*/4);
  CHECK(cw.lrAt(0) == Approx(0.0025).epsilon(1e-15));
  CHECK(cw.lrAt(3) == Approx(0.01).epsilon(1e-15));
  CHECK(cw.lrAt(4) == 0.01);

  const auto st = ddl::LrSchedule::stepDecay(1.0, /*stepSize=*/30, /*gamma=*/0.1);
  CHECK(st.lrAt(0) == 1.0);
  CHECK(st.lrAt(29) == 1.0);
  CHECK(st.lrAt(30) == Approx(0.1).epsilon(1e-15));
  CHECK(st.lrAt(65) == Approx(0.01).epsilon(1e-15));
  CHECK(st.lrAt(90) == Approx(0.001).epsilon(1e-15));
}

TEST_CASE("LrSchedule kinds parse and print, invalid schedules are rejected", "[train][schedule]") {
  for (auto k : {ddl::LrScheduleKind::Constant, ddl::LrScheduleKind::Cosine, ddl::LrScheduleKind::Step})
    CHECK(ddl::parseLrScheduleKind(ddl::toString(k)) == k);
  CHECK(std::string(ddl::toString(ddl::LrScheduleKind::Cosine)) == "cosine");
  CHECK(ddl_test::contains(
      ddl_test::thrownMessage<ddl::ValueError>([] { ddl::parseLrScheduleKind("linear"); }),
      "parseLrScheduleKind: unknown schedule 'linear', expected one of constant, cosine, step"));

  using ddl::LrSchedule;
  auto msg = [](auto f) { return ddl_test::thrownMessage<ddl::ValueError>(f); };
  CHECK(ddl_test::contains(msg([] { LrSchedule::cosine(1.0, 10, 10); }),
                           "cosine totalSteps = 10 must be > warmupSteps = 10"));
  CHECK(ddl_test::contains(msg([] { LrSchedule::cosine(1.0, 0, 10, 2.0); }), "cosine minLr = 2"));
  CHECK(ddl_test::contains(msg([] { LrSchedule::stepDecay(1.0, 0, 0.5); }), "step stepSize = 0"));
  CHECK(ddl_test::contains(msg([] { LrSchedule::stepDecay(1.0, 5, 0.0); }), "step gamma = 0"));
  CHECK(ddl_test::contains(msg([] { LrSchedule::constant(-1.0); }), "LrSchedule: baseLr = -1"));
  CHECK(ddl_test::contains(msg([] { LrSchedule::constant(1.0, -2); }), "warmupSteps = -2"));
  CHECK(ddl_test::contains(msg([] { LrSchedule::constant(1.0).lrAt(-1); }), "LrSchedule::lrAt: step = -1"));
  // Fields set directly are validated at use.
  LrSchedule s;
  s.kind = ddl::LrScheduleKind::Cosine;  // totalSteps still 0
  CHECK(ddl_test::contains(msg([&] { s.lrAt(0); }), "cosine totalSteps = 0"));
}

TEST_CASE("a schedule drives an optimizer's lr by its step count", "[train][schedule]") {
  const auto s = ddl::LrSchedule::stepDecay(0.1, 2, 0.5);
  ddl::SgdOptions o;
  o.lr = 123.0;  // overwritten by the schedule before every step
  ddl::Sgd<double> opt(o);
  Flexible m;
  m.add("x", 1, 1);
  m.params[0].grad(0) = 1.0;
  // lr per step: 0.1, 0.1, 0.05, 0.05 -> x = -0.3
  for (int i = 0; i < 4; ++i) {
    opt.setLr(s.lrAt(opt.stepCount()));
    opt.step(m);
  }
  CHECK(val(m.params[0]) == Approx(-0.3).epsilon(1e-14));
  CHECK(opt.lr() == 0.05);
}

}  // namespace test_train_optim
