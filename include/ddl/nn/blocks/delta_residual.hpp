#pragma once
// ddl/nn/blocks/delta_residual.hpp: the rewrite step of one block (docs/spec.md §2), with every option of the paper
// versions and the authors' code, and the two controls (write-only, additive) as one option.
//
// Per token, given the state X (d x dv), the branch input x_in, c = RMSNorm(x_in) and the branch
// output h = F(c):
//   k~   = h                          (DirectionSource::BranchOutput, "k-Map", default)
//        | MLP_k(Pool X)              (DirectionSource::AuxiliaryMlp, v1; Pool = mean over value channels)
//   k    = normalize(k~)              (DirectionNorm::SqrtEps default, eps_k = 1e-5 | AddEps)
//   beta = 2 sigma(z(c))              (the gate, nn/layers/beta_gate.hpp: z = w c + b by default)
//   v    = s sigma(W_v x_in + b_v)    (ValueKind::SigmoidScaled, s = 4; x_in is the raw state for dv = 1)
//        | W_v x_in + b_v             (LinearOnInput: the authors' ddl_v_sigmoid = False, on the same raw input)
//        | W_v c + b_v                (LinearOnC, latest paper)
//        | W_v h + b_v                (FromBranch, v1's "value from the branch")
//        | constant (2)               (Constant)
//   X'   = X + beta k (v^T - k^T X)   (ResidualKind::Delta)
//        | X + beta k v^T             (WriteOnly control)
//        | X + h                      (Additive baseline: no direction, gate or value parameters exist)
//
// Parameters (names under the residual's prefix): [AuxiliaryMlp: direction.fc1.*, direction.fc2.*], gate.*
// (nn/layers/beta_gate.hpp), value.weight (dv, d), value.bias (dv, 1).
// Initialisation (seeded): value weights as torch.nn.Linear (U(+-1/sqrt(fan_in))), value bias 0, the gate
// as its header says (bias logit(beta0/2), docs/spec.md §2), aux MLP as torch.nn.Linear.
// initValueBiasAsLinear(rng) redraws the value bias as torch.nn.Linear's (the authors' start; DeltaLM's
// init "authors").
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddl/core/alias.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/swap_each.hpp"
#include "ddl/core/types.hpp"
#include "ddl/core/view.hpp"
#include "ddl/nn/blocks/delta_residual_options.hpp"
#include "ddl/nn/layers/activation.hpp"
#include "ddl/nn/layers/beta_gate.hpp"
#include "ddl/nn/layers/init.hpp"
#include "ddl/nn/layers/linear.hpp"
#include "ddl/ops/delta_write.hpp"
#include "ddl/ops/direction.hpp"
#include "ddl/ops/gate.hpp"

namespace ddl {

template <class S>
class DeltaResidual {
 public:
  // d >= 1 features, dv >= 1 value channels.
  DeltaResidual(Index d, Index dv, const DeltaResidualOptions& opt)
      : m_d(d), m_dv(dv), m_opt(checked(d, dv, opt)), m_value(d, dv), m_auxFc1(d, auxHiddenOf(d, opt)),
        m_auxFc2(auxHiddenOf(d, opt), d), m_auxAct(opt.auxActivation), m_gate(d, opt.gateOptions()) {}

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
    typename BetaGate<S>::Tensors gate;  // logits z and beta (1, N), the gate's own
    MatX<S> pool, auxPre, auxHid;  // (d, N), (ha, N), (ha, N): aux MLP input, pre-activation, hidden
    RowX<S> kNorm;    // (1, N) n (SqrtEps) or |k~| (AddEps)
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
    if (hasGate()) m_gate.visitParams(joinName(prefix, "gate"), f);
    if (hasValueParams()) m_value.visitParams(joinName(prefix, "value"), f);
  }

  // Whether backward reads the branch output H of forward (the value head on h, ValueKind::FromBranch);
  // otherwise H is dead once forward returns (k-Map keeps the unit directions it needs).
  bool readsBranchOutput() const { return hasValueParams() && m_opt.value == ValueKind::FromBranch; }

  // Exchanges backward's scratch and the layers' product workspaces with other's, a residual of the same
  // shape and options (docs/decisions.md, "Scratch shared between blocks"); what forward keeps stays.
  void swapScratch(DeltaResidual& other) noexcept {
    swapEach(scratch(), other.scratch());
  }

  // Diagnostics of the last forward or forwardInference (empty for the additive baseline).
  const RowX<S>& beta() const { return last().gate.beta; }  // (1, N)
  const MatX<S>& directions() const { return last().K; }  // (d, N)
  const RowX<S>& directionNorms() const { return last().kNorm; }  // (1, N): n (SqrtEps) or |k~| (AddEps)
  const MatX<S>& values() const { return last().V; }      // (dv, N)
  const MatX<S>& discrepancy() const { return last().delta; }  // (dv, N): v - X^T k, Delta kind only
  const DeltaResidualOptions& options() const { return m_opt; }

  // The evaluation intervention beta <- min(beta, c) (nn/layers/beta_gate.hpp); +inf removes it. Throws
  // ValueError for the additive baseline, which has no gate.
  void setBetaClamp(double c) {
    require(hasGate(), "ddl::DeltaResidual::setBetaClamp", "the additive residual has no gate to clamp");
    m_gate.setClamp(c);
  }
  double betaClamp() const { return hasGate() ? m_gate.clamp() : std::numeric_limits<double>::infinity(); }

 private:
  const Tensors& last() const { return m_lastInference ? m_inference.t : m_train.t; }
  auto scratch() {  // backward's buffers and the sub-modules' (swapScratch)
    return std::tie(m_dK, m_dKt, m_dV, m_dTmp, m_dAuxHid, m_dPool, m_dBeta, m_gate, m_value, m_auxFc1, m_auxFc2);
  }

  // The forward of both modes, written once (fn names the public caller in errors). Self is the
  // residual itself in Train mode, which runs the sub-layers' forward and keeps what backward reads in
  // ws; a const residual runs Inference: the sub-layers' const forwardInference into ws.
  template <class Self>
  static void run(Self& self, const char* fn, const Eigen::Ref<const MatX<S>>& X, const Eigen::Ref<const MatX<S>>& Xin,
                  const Eigen::Ref<const MatX<S>>& C, const Eigen::Ref<const MatX<S>>& H, MatX<S>& Y, Workspace& ws);

  static Index auxHiddenOf(Index d, const DeltaResidualOptions& opt);
  static const DeltaResidualOptions& checked(Index d, Index dv, const DeltaResidualOptions& opt) {
    const char* fn = "ddl::DeltaResidual";
    require(d >= 1, fn, "d must be >= 1, got ", d);
    require(dv >= 1, fn, "dv must be >= 1, got ", dv);
    opt.validate(fn);
    return opt;
  }
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
  BetaGate<S> m_gate;
  // forward caches; m_inference holds what forwardInference computes (diagnostics only)
  ConstView<S> m_X, m_C;  // the state and c of the last forward, owned by the caller
  Workspace m_train, m_inference;
  bool m_lastInference = false;
  // backward workspaces
  MatX<S> m_dK, m_dKt, m_dV, m_dTmp, m_dAuxHid, m_dPool;
  RowX<S> m_dBeta;
};

template <class S>
void DeltaResidual<S>::init(Rng& rng) {
  if (usesAuxMlp()) {
    m_auxFc1.init(rng);
    m_auxFc2.init(rng);
  }
  if (hasGate()) m_gate.init(rng);
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
    deltaWriteBackward(t.K, t.gate.beta, m_X.map(), t.delta, dY, dX, m_dK, m_dBeta, m_dV);
  else
    writeOnlyBackward(t.K, t.gate.beta, t.V, dY, dX, m_dK, m_dBeta, m_dV);
  m_gate.backward(m_C.map(), t.gate, m_dBeta, dC);  // gate -> dC
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
  self.m_gate.forward(C, t.gate);
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
    deltaWrite(t.K, t.gate.beta, t.V, X, Y, t.delta);
  else
    writeOnly(t.K, t.gate.beta, t.V, X, Y);
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
