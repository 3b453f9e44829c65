#pragma once
// ddl/nn/layers/beta_gate.hpp: the gate beta of one rewrite (docs/spec.md §2) as one object: its form, its
// parameters and their names in checkpoints, its start, its forward and backward, and the cap betaMax.
//   beta = betaMax sigma(z),  betaMax = 2
//   z = w c + b             GateKind::Linear (default): gate.weight (1, d), gate.bias [1], as nn.Linear(d, 1)
//     | w2 tanh(W1 c) + b2  GateKind::TwoLayerTanh: gate.fc1.weight (hg, d) (no bias), gate.fc2.weight (1, hg),
//                           gate.fc2.bias [1], as fc1 = nn.Linear(d, hg, bias=False), fc2 = nn.Linear(hg, 1)
// An evaluation intervention, setClamp(c): beta <- min(betaMax sigma(z), c) in both modes, with d beta/dz = 0
// where the clamp binds (docs/claims.md, "The clamp intervention"); c = +inf (the default) changes nothing.
// Start (seeded): the weights as torch.nn.Linear (U(+-1/sqrt(fan_in))), the bias logit(beta0 / betaMax), so
// every token starts near beta0. The arithmetic is ops/gate.hpp's.
// A new form is an enumerator of GateKind and a case in each switch of this header: the switches have no
// default, so -Wswitch (in ddl's warnings, an error with DDL_WARNINGS_AS_ERRORS) names every one it misses.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/init.hpp"
#include "ddl/ops/gate.hpp"

namespace ddl {

enum class GateKind { Linear, TwoLayerTanh };

// The name in configurations and checkpoints' metadata ("gate").
inline const char* toString(GateKind k) {
  switch (k) {
    case GateKind::Linear: return "linear";
    case GateKind::TwoLayerTanh: return "two_layer_tanh";
  }
  return "?";
}

// Throws ValueError naming the accepted names.
inline GateKind parseGateKind(const std::string& s) {
  std::string choices;
  for (GateKind k : {GateKind::Linear, GateKind::TwoLayerTanh}) {
    if (s == toString(k)) return k;
    choices += (choices.empty() ? "" : ", ") + std::string(toString(k));
  }
  throw ValueError(message("ddl::parseGateKind", "unknown value '", s, "', expected one of ", choices));
}

struct GateOptions {
  GateKind kind = GateKind::Linear;
  Index hidden = 128;   // hg of TwoLayerTanh
  double beta0 = 1.0;   // the start, in [0, betaMax]; 0 gives a dead gate (d beta/dz ~ 1e-6 betaMax)
  double betaMax = 2.0; // the cap: beta in (0, betaMax), betaMax in (0, 2]

  // Throws ValueError naming the option and its value.
  void validate(const char* fn) const {
    require(betaMax > 0 && betaMax <= 2, fn, "betaMax must lie in (0, 2], got ", betaMax);
    require(beta0 >= 0 && beta0 <= betaMax, fn, "beta0 must lie in [0, ", betaMax, "], got ", beta0);
    require(hidden >= 1, fn, "gateHidden must be >= 1, got ", hidden);
  }
};

// The tensors of a form on d features, in the order of BetaGate::visitParams: the name under the gate's
// prefix and the logical shape. What a checkpoint of the gate holds, known without building (allocating) it.
struct GateTensor {
  const char* name;
  std::vector<Index> shape;
};
inline std::vector<GateTensor> gateTensors(Index d, const GateOptions& opt) {
  switch (opt.kind) {
    case GateKind::Linear: return {{"weight", {1, d}}, {"bias", {1}}};
    case GateKind::TwoLayerTanh:
      return {{"fc1.weight", {opt.hidden, d}}, {"fc2.weight", {1, opt.hidden}}, {"fc2.bias", {1}}};
  }
  return {};
}

template <class S>
class BetaGate {
 public:
  // d >= 1 features of c; opt as validated by GateOptions::validate.
  BetaGate(Index d, const GateOptions& opt) : m_opt(opt), m_b(std::vector<Index>{1}, /*withDecay=*/false) {
    switch (opt.kind) {
      case GateKind::Linear: m_w = Param<S>(1, d); break;
      case GateKind::TwoLayerTanh:
        m_w1 = Param<S>(opt.hidden, d);
        m_w = Param<S>(1, opt.hidden);
        break;
    }
  }

  // Seeded start; draws fc1 (TwoLayerTanh), then the weight next to the bias.
  void init(Rng& rng) {
    switch (m_opt.kind) {
      case GateKind::Linear: break;
      case GateKind::TwoLayerTanh: initLinearParams<S>(m_w1.value, nullptr, rng, InitScheme::pytorchDefault()); break;
    }
    initLinearParams<S>(m_w.value, nullptr, rng, InitScheme::pytorchDefault());
    m_b.value(0, 0) = static_cast<S>(gateBiasFromBeta0(m_opt.beta0, m_opt.betaMax));
  }

  // What one forward computes per token.
  struct Tensors {
    RowX<S> Z, beta;  // (1, N) logits and beta = betaMax sigma(z)
    MatX<S> hid;      // (hg, N) tanh(W1 c) (TwoLayerTanh)
  };

  // C: (d, N) -> t.Z, t.beta: (1, N). Reads the gate only.
  template <class DC>
  void forward(const Eigen::MatrixBase<DC>& C, Tensors& t) const {
    switch (m_opt.kind) {
      case GateKind::Linear: linearGateLogits(m_w.value, m_b.value(0, 0), C, t.Z); break;
      case GateKind::TwoLayerTanh: twoLayerGateLogits(m_w1.value, m_w.value, m_b.value(0, 0), C, t.hid, t.Z); break;
    }
    gateFromLogits(t.Z, t.beta, static_cast<S>(m_opt.betaMax));
    if (clamps()) t.beta = t.beta.cwiseMin(static_cast<S>(m_clamp));
  }

  // C and t of the forward, dBeta: (1, N) -> dC: (d, N) overwritten; parameter gradients accumulate.
  template <class DC>
  void backward(const Eigen::MatrixBase<DC>& C, const Tensors& t, const RowX<S>& dBeta, MatX<S>& dC) {
    gateFromLogitsBackward(t.Z, dBeta, m_dZ, static_cast<S>(m_opt.betaMax));
    if (clamps())  // the clamp's own derivative: 0 where min(., c) chose c
      for (Index n = 0; n < m_dZ.cols(); ++n)
        if (static_cast<S>(m_opt.betaMax) * stableSigmoid(t.Z(0, n)) > static_cast<S>(m_clamp)) m_dZ(0, n) = S(0);
    switch (m_opt.kind) {
      case GateKind::Linear: linearGateLogitsBackward(m_w.value, C, m_dZ, dC, m_w.grad, m_b.grad); break;
      case GateKind::TwoLayerTanh:
        twoLayerGateLogitsBackward(m_w1.value, m_w.value, C, t.hid, m_dZ, dC, m_w1.grad, m_w.grad, m_b.grad, m_dPre);
        break;
    }
  }

  // The names a PyTorch module of the form gives them (see the header comment), under prefix; the names and
  // shapes of gateTensors.
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    switch (m_opt.kind) {
      case GateKind::Linear:
        f(joinName(prefix, "weight"), m_w);
        f(joinName(prefix, "bias"), m_b);
        break;
      case GateKind::TwoLayerTanh:
        f(joinName(prefix, "fc1.weight"), m_w1);
        f(joinName(prefix, "fc2.weight"), m_w);
        f(joinName(prefix, "fc2.bias"), m_b);
        break;
    }
  }

  // Exchanges backward's scratch with other's (docs/decisions.md, "Scratch shared between blocks").
  void swapScratch(BetaGate& other) noexcept {
    m_dZ.swap(other.m_dZ);
    m_dPre.swap(other.m_dPre);
  }

  const GateOptions& options() const { return m_opt; }

  // beta <- min(beta, c) from the next forward on; c > 0 (NaN refused), +inf removes the clamp.
  void setClamp(double c) {
    require(c > 0, "ddl::BetaGate::setClamp", "the clamp must be > 0 (or +inf for none), got ", c);
    m_clamp = c;
  }
  double clamp() const { return m_clamp; }

 private:
  bool clamps() const { return m_clamp < m_opt.betaMax; }

  GateOptions m_opt;
  double m_clamp = std::numeric_limits<double>::infinity();
  Param<S> m_w, m_w1, m_b;  // the weight next to the bias (1, d | hg), fc1 (hg, d), the bias [1]
  RowX<S> m_dZ;             // backward's scratch
  MatX<S> m_dPre;
};

}  // namespace ddl
