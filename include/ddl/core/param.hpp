#pragma once
// ddl/core/param.hpp: a trainable tensor and the one walk over parameters (DESIGN.md principle 5).
//
// Every module exposes   template <class F> void visitParams(const std::string& prefix, F&& f)
// which calls f(dottedName, Param<S>&) for each parameter in a fixed order, recursing into children
// with joinName(prefix, "blocks.3") and so on. Optimizers, checkpoints, the gradient checker,
// numParams and zeroGrad all use this walk and never include a layer header.
#include <string>

#include "ddl/core/types.hpp"

namespace ddl {

template <class S>
struct Param {
  MatX<S> value;      // (rows, cols)
  MatX<S> grad;       // same shape; backward accumulates into it with +=
  bool decay = true;  // AdamW applies weight decay only to params with decay == true

  Param() = default;
  Param(Index rows, Index cols, bool withDecay = true)
      : value(MatX<S>::Zero(rows, cols)), grad(MatX<S>::Zero(rows, cols)), decay(withDecay) {}
};

// joinName("blocks.3", "gate.weight") == "blocks.3.gate.weight"; joinName("", "w") == "w".
inline std::string joinName(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  if (name.empty()) return prefix;
  return prefix + "." + name;
}

// Clears every parameter gradient of a module (any type with visitParams).
template <class Module>
void zeroGrad(Module& m) {
  m.visitParams("", [](const std::string&, auto& p) { p.grad.setZero(); });
}

// Total number of scalar parameters of a module.
template <class Module>
Index numParams(Module& m) {
  Index n = 0;
  m.visitParams("", [&n](const std::string&, auto& p) { n += p.value.size(); });
  return n;
}

}  // namespace ddl
