#pragma once
// ddl/train/optimizer_state.hpp: what Sgd and AdamW share besides their update rule: the per-parameter
// state (built in walk order) with the step count, and the check every optimizer runs before a step, that
// this state still matches the model's parameter walk. State is never keyed by address.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"

namespace ddl {
namespace detail {

// Throws, naming fn, the parameter and the shapes, unless the walk has exactly slots.size() parameters
// with the slots' names in order and value-shaped gradients; checkTensors(name, p, slot) then checks the
// optimizer's own state tensors. Allocates nothing unless it throws (beyond the walk itself: a module's
// walk builds its dotted names, a ParamList's does not).
template <class S, class Model, class Slot, class CheckTensors>
void verifyOptimizerState(Model& model, const std::vector<Slot>& slots, const char* fn, CheckTensors&& checkTensors) {
  std::size_t i = 0;
  model.visitParams("", [&](const std::string& name, Param<S>& p) {
    if (i >= slots.size())
      throw ValueError(message(fn, "parameter '", name, "' (#", i, ") has no optimizer state: the state was built for ",
                               slots.size(), " parameters"));
    const Slot& s = slots[i];
    if (s.name != name)
      throw ValueError(message(fn, "parameter #", i, " is '", name, "' but the optimizer state belongs to '", s.name,
                               "'"));
    if (p.grad.rows() != p.value.rows() || p.grad.cols() != p.value.cols())
      throw ShapeError(message(fn, "parameter '", name, "' has value shape ", shapeOf(p.value), " but grad shape ",
                               shapeOf(p.grad)));
    checkTensors(name, p, s);
    ++i;
  });
  if (i != slots.size())
    throw ValueError(message(fn, "the model has ", i, " parameters but the optimizer state has ", slots.size(),
                             " (first missing: '", slots[i].name, "')"));
}

// Throws ShapeError unless the state tensor called what has the parameter's shape.
template <class S, class Derived>
void checkStateShape(const char* fn, const std::string& name, const Param<S>& p, const char* what,
                     const Eigen::EigenBase<Derived>& state) {
  if (state.rows() != p.value.rows() || state.cols() != p.value.cols())
    throw ShapeError(message(fn, "parameter '", name, "' has shape ", shapeOf(p.value), " but its optimizer state ",
                             what, " has shape ", shapeOf(state)));
}

// The options, the state slots (one per parameter in walk order, each with its parameter's name), whether
// they are built, the step count, and the accessors the training loop and checkpoints use
// (train/optimizer.hpp). CRTP: Derived (Sgd, AdamW) has initState(model), which builds the slots and calls
// setSlots, and visitSlot(slot, f), which calls f(name, tensor) for the slot's state tensors. label
// ("AdamW") starts the errors.
template <class Derived, class Options, class Slot>
class OptimizerBookkeeping {
 public:
  bool hasState() const { return m_hasState; }

  // Calls f(const std::string& name, MatX<S>& tensor) for every state tensor in visit order (see
  // Derived::visitSlot); nothing before initState or the first step.
  template <class F>
  void visitState(F&& f) {
    for (Slot& s : m_slots) static_cast<Derived&>(*this).visitSlot(s, f);
  }
  template <class F>
  void visitState(F&& f) const {
    for (const Slot& s : m_slots) static_cast<const Derived&>(*this).visitSlot(s, f);
  }

  std::int64_t stepCount() const { return m_step; }
  void setStepCount(std::int64_t steps) {
    check(steps >= 0, "setStepCount", "step count = ", steps, " must be >= 0");
    m_step = steps;
  }

  double lr() const { return m_opt.lr; }
  void setLr(double lr) {
    check(std::isfinite(lr) && lr >= 0, "setLr", "lr = ", lr, " must be finite and >= 0");
    m_opt.lr = lr;
  }
  const Options& options() const { return m_opt; }

 protected:
  OptimizerBookkeeping(const char* label, const Options& options) : m_label(label), m_opt(options) {}

  // Builds the state on the first step (lazily, keeping a step count set before it).
  template <class Model>
  void buildStateOnce(Model& model) {
    if (m_hasState) return;
    const std::int64_t steps = m_step;
    static_cast<Derived&>(*this).initState(model);
    m_step = steps;
  }
  // Installs freshly built slots; the step count restarts at 0.
  void setSlots(std::vector<Slot>&& slots) {
    m_slots = std::move(slots);
    m_hasState = true;
    m_step = 0;
  }

  // Throws ValueError "<label>::<member>: parts" unless cond holds.
  template <class... Parts>
  void check(bool cond, const char* member, const Parts&... parts) const {
    if (!cond) throw ValueError(message((std::string(m_label) + "::" + member).c_str(), parts...));
  }

  const char* m_label;
  Options m_opt;
  std::vector<Slot> m_slots;
  bool m_hasState = false;
  std::int64_t m_step = 0;
};

}  // namespace detail
}  // namespace ddl
