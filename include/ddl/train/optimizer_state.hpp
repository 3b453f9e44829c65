#pragma once
// ddl/train/optimizer_state.hpp: the check every optimizer runs before a step, that its per-parameter
// state (built in walk order) still matches the model's parameter walk. State is never keyed by address.
#include <cstddef>
#include <string>
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

}  // namespace detail
}  // namespace ddl
