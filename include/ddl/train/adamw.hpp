#pragma once
// ddl/train/adamw.hpp: AdamW (decoupled weight decay, Loshchilov & Hutter) with PyTorch's semantics.
//
// The optimizer sees a model only through its parameter walk model.visitParams(prefix, f) with
// f(const std::string& name, Param<S>& p). Per step, for every parameter (t counts steps, not tensors):
//   p      -= lr * weightDecay * p                       only if p.decay (decoupled decay)
//   m       = beta1 m + (1 - beta1) g                    "exp_avg"
//   v       = beta2 v + (1 - beta2) g^2                  "exp_avg_sq"
//   p      -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)     eps outside the sqrt
// State is a list in visit order, checked by name and shape on every step (never keyed by address,
// so moving or reallocating a model is harmless and a different model is an error, not silent
// corruption). step(model) walks the model, whose walk builds the dotted names (string
// allocations); step(params) with a ParamList (core/param_list.hpp) walks the stored names and,
// after the first step, performs no heap allocation at all (tests/test_alloc.cpp). Both check the
// names and shapes in full on every step: comparing stored strings costs nothing measurable.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/types.hpp"
#include "ddl/train/optimizer_state.hpp"

namespace ddl {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.01;
};

// Throws ValueError naming the first option outside its domain and its value.
inline void validateAdamWOptions(const AdamWOptions& o) {
  const char* fn = "AdamW";
  require(std::isfinite(o.lr) && o.lr >= 0, fn, "option lr = ", o.lr, " must be finite and >= 0");
  require(o.beta1 >= 0 && o.beta1 < 1, fn, "option beta1 = ", o.beta1, " must be in [0, 1)");
  require(o.beta2 >= 0 && o.beta2 < 1, fn, "option beta2 = ", o.beta2, " must be in [0, 1)");
  require(std::isfinite(o.eps) && o.eps > 0, fn, "option eps = ", o.eps, " must be finite and > 0");
  require(std::isfinite(o.weightDecay) && o.weightDecay >= 0, fn, "option weightDecay = ", o.weightDecay,
          " must be finite and >= 0");
}

namespace detail {
template <class S>
struct AdamWSlot {
  std::string name;
  MatX<S> expAvg;    // same shape as the parameter
  MatX<S> expAvgSq;  // same shape as the parameter
};
}  // namespace detail

template <class S>
class AdamW : public detail::OptimizerBookkeeping<AdamW<S>, AdamWOptions, detail::AdamWSlot<S>> {
  using Base = detail::OptimizerBookkeeping<AdamW<S>, AdamWOptions, detail::AdamWSlot<S>>;
  friend Base;

 public:
  using Scalar = S;
  using Options = AdamWOptions;
  static constexpr const char* kName = "adamw";

  explicit AdamW(const AdamWOptions& options = AdamWOptions()) : Base("AdamW", options) {
    validateAdamWOptions(m_opt);
  }

  // One optimizer step over every parameter of model (visit order), using p.grad as the gradient.
  // Builds zeroed state on the first call (initState); later calls verify names and shapes first
  // and update nothing if the model no longer matches the state.
  template <class Model>
  void step(Model& model) {
    this->buildStateOnce(model);
    verify(model, "AdamW::step");
    ++m_step;
    const double t = static_cast<double>(m_step);
    const double bc1 = 1.0 - std::pow(m_opt.beta1, t);
    const double bc2 = 1.0 - std::pow(m_opt.beta2, t);
    const S stepSize = static_cast<S>(m_opt.lr / bc1);
    const S sqrtBc2 = static_cast<S>(std::sqrt(bc2));
    const S decayFactor = static_cast<S>(1.0 - m_opt.lr * m_opt.weightDecay);
    const S b1 = static_cast<S>(m_opt.beta1), c1 = static_cast<S>(1.0 - m_opt.beta1);
    const S b2 = static_cast<S>(m_opt.beta2), c2 = static_cast<S>(1.0 - m_opt.beta2);
    const S eps = static_cast<S>(m_opt.eps);
    const bool decayOn = m_opt.weightDecay != 0.0;
    std::size_t i = 0;
    model.visitParams("", [&](const std::string&, Param<S>& p) {
      Slot& s = m_slots[i++];
      const Index n = p.value.size();
      const bool decay = p.decay && decayOn;
      S* const pv = p.value.data();
      const S* const pg = p.grad.data();
      S* const pm = s.expAvg.data();
      S* const ps = s.expAvgSq.data();
      // One pass per L1-sized chunk instead of four passes over the tensor: the step is memory-bound
      // (7 floats of traffic per parameter when fused), and large tensors are split over the threads.
      // Chunks are independent, so the result does not depend on the thread count.
      const Index chunks = (n + kChunk - 1) / kChunk;
      const bool par = n >= kParallelMin;
      (void)par;
      DDL_OMP(parallel for schedule(static) if (par))
      for (Index c = 0; c < chunks; ++c) {
        const Index i0 = c * kChunk, len = std::min(kChunk, n - i0);
        ArrayMap value(pv + i0, len), m(pm + i0, len), v(ps + i0, len);
        const ConstArrayMap g(pg + i0, len);
        if (decay) value *= decayFactor;
        m = b1 * m + c1 * g;
        v = b2 * v + c2 * g.square();
        value -= stepSize * m / (v.sqrt() / sqrtBc2 + eps);
      }
    });
  }

  // (Re)builds zeroed state (exp_avg, exp_avg_sq) matching model and resets the step counter to 0.
  // step() calls it lazily (keeping a count set earlier); a checkpoint loader calls it on a fresh
  // optimizer, then fills the tensors through visitState and restores the count with setStepCount.
  template <class Model>
  void initState(Model& model) {
    std::vector<Slot> slots;
    model.visitParams("", [&](const std::string& name, Param<S>& p) {
      slots.push_back(Slot{name, MatX<S>::Zero(p.value.rows(), p.value.cols()),
                           MatX<S>::Zero(p.value.rows(), p.value.cols())});
    });
    this->setSlots(std::move(slots));
  }

  // Hyper-parameters for checkpoint metadata (PyTorch's names).
  std::map<std::string, double> hyperParams() const {
    return {{"lr", m_opt.lr},
            {"beta1", m_opt.beta1},
            {"beta2", m_opt.beta2},
            {"eps", m_opt.eps},
            {"weight_decay", m_opt.weightDecay}};
  }

 private:
  using ArrayMap = Eigen::Map<Eigen::Array<S, Eigen::Dynamic, 1>>;
  using ConstArrayMap = Eigen::Map<const Eigen::Array<S, Eigen::Dynamic, 1>>;
  static constexpr Index kChunk = 2048;              // 4 arrays x 8 KiB stay in L1 between the statements
  static constexpr Index kParallelMin = Index(1) << 16;  // below this a fork costs more than it saves

  using Slot = detail::AdamWSlot<S>;
  using Base::m_opt;
  using Base::m_slots;
  using Base::m_step;

  // visitState's tensors of one slot: "<param>.exp_avg" then "<param>.exp_avg_sq". A checkpoint of a
  // fresh optimizer (no slots yet) holds only its step count.
  template <class SlotT, class F>
  void visitSlot(SlotT& s, F& f) const {
    const std::string avgName = s.name + ".exp_avg";
    f(avgName, s.expAvg);
    const std::string avgSqName = s.name + ".exp_avg_sq";
    f(avgSqName, s.expAvgSq);
  }

  // Checks, without allocating unless it throws, that the walk still matches the state:
  // same number of parameters, same names in the same order, same shapes (value, grad, state).
  template <class Model>
  void verify(Model& model, const char* fn) const {
    detail::verifyOptimizerState<S>(model, m_slots, fn, [fn](const std::string& name, const Param<S>& p, const Slot& s) {
      detail::checkStateShape(fn, name, p, "exp_avg", s.expAvg);
      detail::checkStateShape(fn, name, p, "exp_avg_sq", s.expAvgSq);
    });
  }
};

}  // namespace ddl
