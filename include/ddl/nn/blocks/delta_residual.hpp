#pragma once
// ddl/nn/blocks/delta_residual.hpp: the rewrite step of one block (docs/spec.md §2), with every option of the paper
// versions and the authors' code, and the two controls (write-only, additive) as one option.
//
// Per token, given the state X (d x dv), the branch input x_in, c = RMSNorm(x_in) and the branch
// output h = F(c):
//   k~   = h                          (DirectionSource::BranchOutput, "k-Map", default)
//        | MLP_k(Pool X)              (DirectionSource::AuxiliaryMlp, v1; Pool = mean over value channels)
//   k    = normalize(k~)              (DirectionNorm::SqrtEps default, eps_k = 1e-5 | AddEps)
//   beta = 2 sigma(w c + b)           (GateKind::Linear default | TwoLayerTanh: 2 sigma(w2 tanh(W1 c) + b2))
//   v    = s sigma(W_v x_in + b_v)    (ValueKind::SigmoidScaled, s = 4; x_in is the raw state for dv = 1)
//        | W_v x_in + b_v             (LinearOnInput: the authors' ddl_v_sigmoid = False, on the same raw input)
//        | W_v c + b_v                (LinearOnC, latest paper)
//        | W_v h + b_v                (FromBranch, v1's "value from the branch")
//        | constant (2)               (Constant)
//   X'   = X + beta k (v^T - k^T X)   (ResidualKind::Delta)
//        | X + beta k v^T             (WriteOnly control)
//        | X + h                      (Additive baseline: no direction, gate or value parameters exist)
//
// Parameters (names under the residual's prefix): gate.weight (1, d), gate.bias [1]
// [TwoLayerTanh: gate.fc1.weight (hg, d), gate.fc2.weight (1, hg), gate.fc2.bias [1]],
// value.weight (dv, d), value.bias (dv, 1), [AuxiliaryMlp: direction.fc1.*, direction.fc2.*].
// Initialisation (seeded): gate and value weights as torch.nn.Linear (U(+-1/sqrt(fan_in))), value bias 0,
// gate bias = logit(beta0/2) (docs/spec.md §2), so every token starts near beta0; aux MLP as torch.nn.Linear.
// initValueBiasAsLinear(rng) redraws the value bias as torch.nn.Linear's (the authors' start; DeltaLM's
// init "authors").
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddl/core/alias.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"
#include "ddl/core/view.hpp"
#include "ddl/nn/layers/activation.hpp"
#include "ddl/nn/layers/init.hpp"
#include "ddl/nn/layers/linear.hpp"
#include "ddl/ops/delta_write.hpp"
#include "ddl/ops/direction.hpp"
#include "ddl/ops/gate.hpp"

namespace ddl {

enum class ResidualKind { Delta, WriteOnly, Additive };
enum class DirectionSource { BranchOutput, AuxiliaryMlp };
enum class GateKind { Linear, TwoLayerTanh };
enum class ValueKind { SigmoidScaled, LinearOnC, FromBranch, Constant, LinearOnInput };

inline const char* toString(ResidualKind k) {
  return k == ResidualKind::Delta ? "delta" : k == ResidualKind::WriteOnly ? "write_only" : "additive";
}
inline const char* toString(DirectionSource k) { return k == DirectionSource::BranchOutput ? "kmap" : "aux_mlp"; }
inline const char* toString(GateKind k) { return k == GateKind::Linear ? "linear" : "two_layer_tanh"; }
inline const char* toString(ValueKind k) {
  switch (k) {
    case ValueKind::SigmoidScaled: return "sigmoid_scaled";
    case ValueKind::LinearOnC: return "linear_on_c";
    case ValueKind::FromBranch: return "from_branch";
    case ValueKind::Constant: return "constant";
    case ValueKind::LinearOnInput: return "linear_on_input";
  }
  return "?";
}

namespace detail {
template <class E, std::size_t N>
E parseEnum(const char* fn, const std::string& name, const E (&all)[N]) {
  std::string choices;
  for (E e : all) {
    if (name == toString(e)) return e;
    choices += (choices.empty() ? "" : ", ") + std::string(toString(e));
  }
  throw ValueError(message(fn, "unknown value '", name, "', expected one of ", choices));
}
}  // namespace detail

inline ResidualKind parseResidualKind(const std::string& s) {
  const ResidualKind all[] = {ResidualKind::Delta, ResidualKind::WriteOnly, ResidualKind::Additive};
  return detail::parseEnum("ddl::parseResidualKind", s, all);
}
inline DirectionSource parseDirectionSource(const std::string& s) {
  const DirectionSource all[] = {DirectionSource::BranchOutput, DirectionSource::AuxiliaryMlp};
  return detail::parseEnum("ddl::parseDirectionSource", s, all);
}
inline GateKind parseGateKind(const std::string& s) {
  const GateKind all[] = {GateKind::Linear, GateKind::TwoLayerTanh};
  return detail::parseEnum("ddl::parseGateKind", s, all);
}
inline ValueKind parseValueKind(const std::string& s) {
  const ValueKind all[] = {ValueKind::SigmoidScaled, ValueKind::LinearOnC, ValueKind::FromBranch, ValueKind::Constant,
                          ValueKind::LinearOnInput};
  return detail::parseEnum("ddl::parseValueKind", s, all);
}

// Every option of the rewrite step. Defaults are the authors' code (preset "code").
struct DeltaResidualOptions {
  ResidualKind residual = ResidualKind::Delta;
  DirectionSource direction = DirectionSource::BranchOutput;
  DirectionNorm norm = DirectionNorm::SqrtEps;
  double epsK = 1e-5;
  GateKind gate = GateKind::Linear;
  Index gateHidden = 128;  // TwoLayerTanh only
  double beta0 = 1.0;      // initial gate value in [0, 2]; 0 gives a dead gate (d beta/dz ~ 2e-6)
  ValueKind value = ValueKind::SigmoidScaled;
  double valueScale = 4.0;     // s of SigmoidScaled
  double valueConstant = 2.0;  // Constant
  Index auxHidden = 0;         // AuxiliaryMlp hidden width; 0 means d / 4 (at least 1)
  Activation auxActivation = Activation::GELU;

  // Throws ValueError naming the option and its value.
  void validate(const char* fn) const {
    require(epsK >= 0 && std::isfinite(epsK), fn, "epsK must be finite and >= 0, got ", epsK);
    require(beta0 >= 0 && beta0 <= 2, fn, "beta0 must lie in [0, 2], got ", beta0);
    require(gateHidden >= 1, fn, "gateHidden must be >= 1, got ", gateHidden);
    require(auxHidden >= 0, fn, "auxHidden must be >= 0, got ", auxHidden);
    require(std::isfinite(valueScale) && valueScale > 0, fn, "valueScale must be finite and > 0, got ", valueScale);
    require(std::isfinite(valueConstant), fn, "valueConstant must be finite, got ", valueConstant);
    require(!(direction == DirectionSource::BranchOutput && value == ValueKind::FromBranch), fn,
            "value 'from_branch' needs direction 'aux_mlp' (with k-Map the branch output is the direction)");
    require(!(norm == DirectionNorm::AddEps && epsK == 0), fn, "add_eps normalization needs epsK > 0");
  }
};

template <class S>
class DeltaResidual {
 public:
  // d >= 1 features, dv >= 1 value channels.
  DeltaResidual(Index d, Index dv, const DeltaResidualOptions& opt)
      : m_d(d), m_dv(dv), m_opt(opt), m_value(d, dv), m_auxFc1(d, auxHiddenOf(d, opt)), m_auxFc2(auxHiddenOf(d, opt), d),
        m_auxAct(opt.auxActivation) {
    const char* fn = "ddl::DeltaResidual";
    require(d >= 1, fn, "d must be >= 1, got ", d);
    require(dv >= 1, fn, "dv must be >= 1, got ", dv);
    opt.validate(fn);
    if (opt.gate == GateKind::Linear) {
      m_gateW = Param<S>(1, d);
    } else {
      m_gateW1 = Param<S>(opt.gateHidden, d);
      m_gateW = Param<S>(1, opt.gateHidden);
    }
    m_gateB = Param<S>(std::vector<Index>{1}, /*withDecay=*/false);
  }

  // Seeded initialisation; draw order: aux MLP (fc1, fc2), gate (fc1, weight), value.
  void init(Rng& rng);

  // The value bias as torch.nn.Linear starts it, U(+-1/sqrt(d)) (fan_in = d), instead of 0; no-op when the
  // residual has no value parameters (additive, constant value).
  void initValueBiasAsLinear(Rng& rng) {
    if (!hasValueParams()) return;
    const double bound = 1.0 / std::sqrt(static_cast<double>(m_d));
    fillUniform(m_value.bias().value, rng, -bound, bound);
  }

  // X: (d, dv*N) state, channel j = X.middleCols(j*N, N); Xin: (d, N) the branch input (X for dv = 1);
  // C: (d, N) = RMSNorm(Xin); H: (d, N) branch output -> Y: (d, dv*N). Y must not alias X.
  // Keeps views of X, C and (through the value and aux layers) Xin or H: all four must stay alive and
  // unchanged until backward.
  void forward(const Eigen::Ref<const MatX<S>>& X, const Eigen::Ref<const MatX<S>>& Xin,
               const Eigen::Ref<const MatX<S>>& C, const Eigen::Ref<const MatX<S>>& H, MatX<S>& Y) {
    run(*this, "ddl::DeltaResidual::forward", X, Xin, C, H, Y, m_train);
    m_N = H.cols();
    m_lastInference = false;
    m_C.bind(C);  // the gate's backward needs c
    m_X.bind(X);  // the write's backward needs the old state
  }

  // Same Y as forward, bit for bit; writes none of forward's caches, so backward still refers to the
  // last forward. The diagnostics (beta(), directions(), ...) then describe this call; they live in
  // buffers of their own, so steady state allocates nothing. Y must not alias X.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, const Eigen::Ref<const MatX<S>>& Xin,
                        const Eigen::Ref<const MatX<S>>& C, const Eigen::Ref<const MatX<S>>& H, MatX<S>& Y) {
    std::as_const(*this).forwardInference(X, Xin, C, H, Y, m_inference);
    m_lastInference = true;
  }

  // What one forward computes per token: kept for backward (training), for the diagnostics, or in a
  // caller's Workspace.
  struct Tensors {
    MatX<S> K;        // (d, N) unit directions k
    MatX<S> Kt;       // (d, N) raw directions k~ of the aux MLP (the branch output H otherwise)
    MatX<S> V;        // (dv, N) values v
    MatX<S> delta;    // (dv, N) v - X^T k (Delta kind)
    MatX<S> gateHid;  // (hg, N) tanh(W1 c) (TwoLayerTanh)
    MatX<S> pool, auxPre, auxHid;  // (d, N), (ha, N), (ha, N): aux MLP input, pre-activation, hidden
    RowX<S> kNorm;    // (1, N) n (SqrtEps) or |k~| (AddEps)
    RowX<S> Z, beta;  // (1, N) gate logits and beta = 2 sigma(Z)
  };
  // Everything the const forwardInference writes: one per caller, so callers on several threads can
  // share one residual (decoding, nn/models/lm_decoder.hpp).
  struct Workspace {
    Tensors t;
    typename Linear<S>::Workspace value, auxFc1, auxFc2;
  };

  // The same into ws, reading the residual only; the diagnostics do not see this call.
  void forwardInference(const Eigen::Ref<const MatX<S>>& X, const Eigen::Ref<const MatX<S>>& Xin,
                        const Eigen::Ref<const MatX<S>>& C, const Eigen::Ref<const MatX<S>>& H, MatX<S>& Y,
                        Workspace& ws) const {
    run(*this, "ddl::DeltaResidual::forwardInference", X, Xin, C, H, Y, ws);
  }

  // dY: (d, dv*N) -> dX: (d, dv*N), dXin, dC, dH: (d, N); all overwritten. Parameter grads accumulate.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX, MatX<S>& dXin, MatX<S>& dC, MatX<S>& dH);

  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    if (usesAuxMlp()) {
      m_auxFc1.visitParams(joinName(prefix, "direction.fc1"), f);
      m_auxFc2.visitParams(joinName(prefix, "direction.fc2"), f);
    }
    if (hasGate()) {
      // Named as a PyTorch module builds them: nn.Linear(d, 1) for the linear gate, and
      // nn.Sequential-like fc1 = nn.Linear(d, hg, bias=False), fc2 = nn.Linear(hg, 1) for the two-layer one.
      if (m_opt.gate == GateKind::TwoLayerTanh) {
        f(joinName(prefix, "gate.fc1.weight"), m_gateW1);
        f(joinName(prefix, "gate.fc2.weight"), m_gateW);
        f(joinName(prefix, "gate.fc2.bias"), m_gateB);
      } else {
        f(joinName(prefix, "gate.weight"), m_gateW);
        f(joinName(prefix, "gate.bias"), m_gateB);
      }
    }
    if (hasValueParams()) m_value.visitParams(joinName(prefix, "value"), f);
  }

  // Whether backward reads the branch output H of forward (the value head on h, ValueKind::FromBranch);
  // otherwise H is dead once forward returns (k-Map keeps the unit directions it needs).
  bool readsBranchOutput() const { return hasValueParams() && m_opt.value == ValueKind::FromBranch; }

  // Exchanges backward's scratch and the layers' product workspaces with other's, a residual of the same
  // shape and options (docs/decisions.md, "Scratch shared between blocks"); what forward keeps stays.
  void swapScratch(DeltaResidual& other) noexcept {
    m_dK.swap(other.m_dK);
    m_dKt.swap(other.m_dKt);
    m_dV.swap(other.m_dV);
    m_dTmp.swap(other.m_dTmp);
    m_gateDPre.swap(other.m_gateDPre);
    m_dAuxHid.swap(other.m_dAuxHid);
    m_dPool.swap(other.m_dPool);
    m_dBeta.swap(other.m_dBeta);
    m_dZ.swap(other.m_dZ);
    m_value.swapScratch(other.m_value);
    m_auxFc1.swapScratch(other.m_auxFc1);
    m_auxFc2.swapScratch(other.m_auxFc2);
  }

  // Diagnostics of the last forward or forwardInference (empty for the additive baseline).
  const RowX<S>& beta() const { return last().beta; }     // (1, N)
  const MatX<S>& directions() const { return last().K; }  // (d, N)
  const RowX<S>& directionNorms() const { return last().kNorm; }  // (1, N): n (SqrtEps) or |k~| (AddEps)
  const MatX<S>& values() const { return last().V; }      // (dv, N)
  const MatX<S>& discrepancy() const { return last().delta; }  // (dv, N): v - X^T k, Delta kind only
  const DeltaResidualOptions& options() const { return m_opt; }

 private:
  const Tensors& last() const { return m_lastInference ? m_inference.t : m_train.t; }

  // The forward of both modes, written once (fn names the public caller in errors). Self is the
  // residual itself in Train mode, which runs the sub-layers' forward and keeps what backward reads in
  // ws; a const residual runs Inference: the sub-layers' const forwardInference into ws.
  template <class Self>
  static void run(Self& self, const char* fn, const Eigen::Ref<const MatX<S>>& X, const Eigen::Ref<const MatX<S>>& Xin,
                  const Eigen::Ref<const MatX<S>>& C, const Eigen::Ref<const MatX<S>>& H, MatX<S>& Y, Workspace& ws);

  static Index auxHiddenOf(Index d, const DeltaResidualOptions& opt);
  bool usesAuxMlp() const {
    return m_opt.residual != ResidualKind::Additive && m_opt.direction == DirectionSource::AuxiliaryMlp;
  }
  bool hasGate() const { return m_opt.residual != ResidualKind::Additive; }
  bool hasValueParams() const { return hasGate() && m_opt.value != ValueKind::Constant; }

  // Pool = mean over the value channels. X: (d, dv*N) -> P: (d, N)
  void poolChannels(const Eigen::Ref<const MatX<S>>& X, MatX<S>& P) const;

  Index m_d, m_dv;
  DeltaResidualOptions m_opt;
  Index m_N = -1;
  Linear<S> m_value;  // (dv, d): on x_in, c or h by ValueKind
  Linear<S> m_auxFc1, m_auxFc2;
  ActivationLayer<S> m_auxAct;
  Param<S> m_gateW, m_gateW1, m_gateB;
  // forward caches; m_inference holds what forwardInference computes (diagnostics only)
  ConstView<S> m_X, m_C;  // the state and c of the last forward, owned by the caller
  Workspace m_train, m_inference;
  bool m_lastInference = false;
  // backward workspaces
  MatX<S> m_dK, m_dKt, m_dV, m_dTmp, m_gateDPre, m_dAuxHid, m_dPool;
  RowX<S> m_dBeta, m_dZ;
};

template <class S>
void DeltaResidual<S>::init(Rng& rng) {
  if (usesAuxMlp()) {
    m_auxFc1.init(rng);
    m_auxFc2.init(rng);
  }
  if (hasGate()) {
    if (m_opt.gate == GateKind::TwoLayerTanh) initLinearParams<S>(m_gateW1.value, nullptr, rng, InitScheme::pytorchDefault());
    initLinearParams<S>(m_gateW.value, nullptr, rng, InitScheme::pytorchDefault());
    m_gateB.value(0, 0) = static_cast<S>(gateBiasFromBeta0(m_opt.beta0));
  }
  if (hasValueParams()) {
    initLinearParams<S>(m_value.weight().value, nullptr, rng, InitScheme::pytorchDefault());
    m_value.bias().value.setZero();
  }
}

template <class S>
void DeltaResidual<S>::backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX, MatX<S>& dXin, MatX<S>& dC,
                                MatX<S>& dH) {
  const char* fn = "ddl::DeltaResidual::backward";
  if (m_N < 0) throw Error(message(fn, "called before forward"));
  checkShape(fn, "dY", dY, m_d, m_dv * m_N);
  const Index N = m_N;
  const Tensors& t = m_train.t;
  if (m_opt.residual == ResidualKind::Additive) {
    additiveResidualBackward(dY, N, dX, dH);
    dC.setZero(m_d, N);
    dXin.setZero(m_d, N);
    return;
  }
  if (m_opt.residual == ResidualKind::Delta)
    deltaWriteBackward(t.K, t.beta, m_X.map(), t.delta, dY, dX, m_dK, m_dBeta, m_dV);
  else
    writeOnlyBackward(t.K, t.beta, t.V, dY, dX, m_dK, m_dBeta, m_dV);
  // gate -> dC
  gateFromLogitsBackward(t.Z, m_dBeta, m_dZ);
  if (m_opt.gate == GateKind::Linear)
    linearGateLogitsBackward(m_gateW.value, m_C.map(), m_dZ, dC, m_gateW.grad, m_gateB.grad);
  else
    twoLayerGateLogitsBackward(m_gateW1.value, m_gateW.value, m_C.map(), t.gateHid, m_dZ, dC, m_gateW1.grad,
                               m_gateW.grad, m_gateB.grad, m_gateDPre);
  // direction -> dH (k-Map, written in place) or dX (aux MLP)
  normalizeDirectionsBackward(t.K, t.kNorm, m_opt.norm, static_cast<S>(m_opt.epsK), m_dK,
                              usesAuxMlp() ? m_dKt : dH);
  if (usesAuxMlp()) {
    dH.setZero(m_d, N);
    m_auxFc2.backward(m_dKt, m_dAuxHid);
    m_auxAct.backward(m_dAuxHid, m_dAuxHid);
    m_auxFc1.backward(m_dAuxHid, m_dPool);
    const S invDv = S(1) / static_cast<S>(m_dv);
    for (Index j = 0; j < m_dv; ++j) dX.middleCols(j * N, N) += invDv * m_dPool;
  }
  // value; dXin is nonzero only when the value head reads x_in, which then writes it directly
  switch (m_opt.value) {
    case ValueKind::SigmoidScaled: {
      const S s = static_cast<S>(m_opt.valueScale);
      m_dV.array() *= t.V.array() * (1 - t.V.array() / s);  // v = s sigma(a): dv/da = v (1 - v/s)
      m_value.backward(m_dV, dXin);
      break;
    }
    case ValueKind::LinearOnInput: m_value.backward(m_dV, dXin); break;  // v = W_v x_in + b_v
    case ValueKind::LinearOnC:
      m_value.backward(m_dV, m_dTmp);
      dC += m_dTmp;
      dXin.setZero(m_d, N);
      break;
    case ValueKind::FromBranch:
      m_value.backward(m_dV, m_dTmp);
      dH += m_dTmp;
      dXin.setZero(m_d, N);
      break;
    case ValueKind::Constant: dXin.setZero(m_d, N); break;
  }
}

template <class S>
template <class Self>
void DeltaResidual<S>::run(Self& self, const char* fn, const Eigen::Ref<const MatX<S>>& X,
                           const Eigen::Ref<const MatX<S>>& Xin, const Eigen::Ref<const MatX<S>>& C,
                           const Eigen::Ref<const MatX<S>>& H, MatX<S>& Y, Workspace& ws) {
  // layer(in, out): forward on a mutable residual, the const forwardInference with ws's buffers otherwise
  const auto apply = [&](auto& layer, typename Linear<S>::Workspace& lws, const auto& in, MatX<S>& out) {
    if constexpr (std::is_const_v<Self>)
      layer.forwardInference(in, out, lws);
    else
      layer.forward(in, out);
  };
  const DeltaResidualOptions& opt = self.m_opt;
  requireNoAlias(fn, "X", X, "Y", Y);
  const Index N = H.cols();
  checkShape(fn, "H", H, self.m_d, -1);
  checkShape(fn, "X", X, self.m_d, self.m_dv * N);
  checkShape(fn, "Xin", Xin, self.m_d, N);
  checkShape(fn, "C", C, self.m_d, N);
  if (opt.residual == ResidualKind::Additive) {
    additiveResidual(H, X, Y);
    return;
  }
  Tensors& t = ws.t;
  // direction
  if (self.usesAuxMlp()) {
    self.poolChannels(X, t.pool);
    apply(self.m_auxFc1, ws.auxFc1, t.pool, t.auxPre);
    if constexpr (std::is_const_v<Self>)
      self.m_auxAct.forwardInference(t.auxPre, t.auxHid);
    else
      self.m_auxAct.forward(t.auxPre, t.auxHid);
    apply(self.m_auxFc2, ws.auxFc2, t.auxHid, t.Kt);
    normalizeDirections(t.Kt, opt.norm, static_cast<S>(opt.epsK), t.K, t.kNorm);
  } else {
    normalizeDirections(H, opt.norm, static_cast<S>(opt.epsK), t.K, t.kNorm);
  }
  // gate
  if (opt.gate == GateKind::Linear)
    linearGateLogits(self.m_gateW.value, self.m_gateB.value(0, 0), C, t.Z);
  else
    twoLayerGateLogits(self.m_gateW1.value, self.m_gateW.value, self.m_gateB.value(0, 0), C, t.gateHid, t.Z);
  gateFromLogits(t.Z, t.beta);
  // value
  switch (opt.value) {
    case ValueKind::SigmoidScaled: {
      apply(self.m_value, ws.value, Xin, t.V);
      const S s = static_cast<S>(opt.valueScale);
      const Index dv = self.m_dv;
      MatX<S>& V = t.V;  // per token, so split over threads like the rest of the residual
      DDL_OMP(parallel for schedule(static) if (dv * N >= detail::kParallelMinWork))
      for (Index n = 0; n < N; ++n)
        for (Index j = 0; j < dv; ++j) V(j, n) = s * stableSigmoid(V(j, n));
      break;
    }
    case ValueKind::LinearOnInput: apply(self.m_value, ws.value, Xin, t.V); break;
    case ValueKind::LinearOnC: apply(self.m_value, ws.value, C, t.V); break;
    case ValueKind::FromBranch: apply(self.m_value, ws.value, H, t.V); break;
    case ValueKind::Constant: t.V.setConstant(self.m_dv, N, static_cast<S>(opt.valueConstant)); break;
  }
  // rewrite
  if (opt.residual == ResidualKind::Delta)
    deltaWrite(t.K, t.beta, t.V, X, Y, t.delta);
  else
    writeOnly(t.K, t.beta, t.V, X, Y);
}

template <class S>
Index DeltaResidual<S>::auxHiddenOf(Index d, const DeltaResidualOptions& opt) {
  if (opt.auxHidden > 0) return opt.auxHidden;
  return d / 4 > 0 ? d / 4 : 1;
}

template <class S>
void DeltaResidual<S>::poolChannels(const Eigen::Ref<const MatX<S>>& X, MatX<S>& P) const {
  const Index N = X.cols() / m_dv;
  P = X.middleCols(0, N);
  for (Index j = 1; j < m_dv; ++j) P += X.middleCols(j * N, N);
  if (m_dv > 1) P /= static_cast<S>(m_dv);
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class DeltaResidual<float>;
extern template class DeltaResidual<double>;
#endif

}  // namespace ddl
