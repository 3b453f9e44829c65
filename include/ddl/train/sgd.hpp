#pragma once
// ddl/train/sgd.hpp: stochastic gradient descent with momentum / Nesterov, PyTorch's semantics.
//
// The optimizer sees a model only through model.visitParams(prefix, f), f(name, Param<S>&). Per step:
//   g    = grad + weightDecay * p                    L2 added to the gradient (only if p.decay)
//   buf  = g                                         on the first step (PyTorch clones g, no dampening)
//   buf  = momentum buf + (1 - dampening) g          afterwards            "momentum_buffer"
//   g    = g + momentum buf  (Nesterov)  or  buf     when momentum != 0
//   p   -= lr g
// Honouring p.decay equals PyTorch with biases/gains in a param group with weight_decay = 0.
// State is a list in visit order checked by name and shape on every step (never keyed by address).
// With momentum == 0 there are no buffers and visitState visits nothing. With a ParamList as the
// model (core/param_list.hpp), no heap allocation after the first step; a module's own walk
// allocates its dotted names.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/types.hpp"
#include "ddl/train/optimizer_state.hpp"

namespace ddl {

struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weightDecay = 0.0;
  bool nesterov = false;
};

// Throws ValueError naming the first option outside its domain and its value.
inline void validateSgdOptions(const SgdOptions& o) {
  const char* fn = "Sgd";
  require(std::isfinite(o.lr) && o.lr >= 0, fn, "option lr = ", o.lr, " must be finite and >= 0");
  require(std::isfinite(o.momentum) && o.momentum >= 0, fn, "option momentum = ", o.momentum,
          " must be finite and >= 0");
  require(o.dampening >= 0 && o.dampening <= 1, fn, "option dampening = ", o.dampening, " must be in [0, 1]");
  require(std::isfinite(o.weightDecay) && o.weightDecay >= 0, fn, "option weightDecay = ", o.weightDecay,
          " must be finite and >= 0");
  require(!o.nesterov || (o.momentum > 0 && o.dampening == 0), fn,
          "option nesterov = true needs momentum > 0 and dampening = 0 (momentum = ", o.momentum,
          ", dampening = ", o.dampening, ")");
}

namespace detail {
template <class S>
struct SgdSlot {
  std::string name;
  MatX<S> buf;  // momentum buffer, same shape as the parameter; empty when momentum == 0
};
}  // namespace detail

template <class S>
class Sgd : public detail::OptimizerBookkeeping<Sgd<S>, SgdOptions, detail::SgdSlot<S>> {
  using Base = detail::OptimizerBookkeeping<Sgd<S>, SgdOptions, detail::SgdSlot<S>>;
  friend Base;

 public:
  using Scalar = S;
  using Options = SgdOptions;
  static constexpr const char* kName = "sgd";

  explicit Sgd(const SgdOptions& options = SgdOptions()) : Base("Sgd", options) { validateSgdOptions(m_opt); }

  // One optimizer step over every parameter of model (visit order), using p.grad as the gradient.
  // Builds state on the first call; later calls verify names and shapes first and update nothing
  // if the model no longer matches the state.
  template <class Model>
  void step(Model& model) {
    this->buildStateOnce(model);
    verify(model, "Sgd::step");
    const bool firstStep = m_step == 0;
    ++m_step;
    const S lr = static_cast<S>(m_opt.lr);
    const S mu = static_cast<S>(m_opt.momentum);
    const S keep = static_cast<S>(1.0 - m_opt.dampening);
    const S wdAll = static_cast<S>(m_opt.weightDecay);
    const bool useMomentum = m_opt.momentum != 0.0;
    const bool nesterov = m_opt.nesterov;
    std::size_t i = 0;
    model.visitParams("", [&](const std::string&, Param<S>& p) {
      Slot& s = m_slots[i++];
      const S wd = p.decay ? wdAll : S(0);
      // Coefficient-wise expressions evaluate in place (p on both sides is safe): no allocation.
      if (!useMomentum) {
        p.value.array() -= lr * (p.grad.array() + wd * p.value.array());
        return;
      }
      if (firstStep)
        s.buf.array() = p.grad.array() + wd * p.value.array();
      else
        s.buf.array() = mu * s.buf.array() + keep * (p.grad.array() + wd * p.value.array());
      if (nesterov)
        p.value.array() -= lr * (p.grad.array() + wd * p.value.array() + mu * s.buf.array());
      else
        p.value.array() -= lr * s.buf.array();
    });
  }

  // (Re)builds zeroed state matching model (momentum buffers only when momentum != 0) and resets
  // the step counter to 0. step() calls it lazily (keeping a count set earlier); a checkpoint
  // loader calls it on a fresh optimizer, fills the buffers through visitState and restores the
  // count with setStepCount (a count > 0 makes the next step use the loaded buffers).
  template <class Model>
  void initState(Model& model) {
    std::vector<Slot> slots;
    const bool useMomentum = m_opt.momentum != 0.0;
    model.visitParams("", [&](const std::string& name, Param<S>& p) {
      slots.push_back(Slot{name, useMomentum ? MatX<S>::Zero(p.value.rows(), p.value.cols()) : MatX<S>()});
    });
    this->setSlots(std::move(slots));
  }

  // Hyper-parameters for checkpoint metadata (PyTorch's names; nesterov as 0 or 1).
  std::map<std::string, double> hyperParams() const {
    return {{"lr", m_opt.lr},
            {"momentum", m_opt.momentum},
            {"dampening", m_opt.dampening},
            {"weight_decay", m_opt.weightDecay},
            {"nesterov", m_opt.nesterov ? 1.0 : 0.0}};
  }

 private:
  using Slot = detail::SgdSlot<S>;
  using Base::m_opt;
  using Base::m_slots;
  using Base::m_step;

  // visitState's tensors of one slot: "<param>.momentum_buffer" (none when momentum == 0).
  template <class SlotT, class F>
  void visitSlot(SlotT& s, F& f) const {
    if (m_opt.momentum == 0.0) return;
    const std::string bufName = s.name + ".momentum_buffer";
    f(bufName, s.buf);
  }

  // Checks, without allocating unless it throws, that the walk still matches the state:
  // same number of parameters, same names in the same order, same shapes (value, grad, buffer).
  template <class Model>
  void verify(Model& model, const char* fn) const {
    const bool useMomentum = m_opt.momentum != 0.0;
    detail::verifyOptimizerState<S>(model, m_slots, fn, [&](const std::string& name, const Param<S>& p, const Slot& s) {
      if (useMomentum) detail::checkStateShape(fn, name, p, "momentum_buffer", s.buf);
    });
  }
};

}  // namespace ddl
