#pragma once
// ddl/core/param.hpp: a trainable tensor and the one walk over parameters (docs/architecture.md principle 5).
//
// Every module exposes   template <class F> void visitParams(const std::string& prefix, F&& f)
// which calls f(dottedName, Param<S>&) for each parameter in a fixed order, recursing into children
// with joinName(prefix, "blocks.3") and so on. Optimizers, checkpoints, the gradient checker,
// numParams and zeroGrad all use this walk and never include a layer header.
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

// What a parameter is for, declared by the module that creates it: a model's initialisation reads
// roles, never names, so renaming a parameter (for a checkpoint format) cannot change how it starts.
enum class ParamRole {
  Default,         // a hidden matrix (rank >= 2) or a gain / bias vector: the model's generic rule
  Embedding,       // a token embedding table
  ResidualOutput,  // a branch's last projection (attention's o, the MLP's fc2): GPT-2 scales its start by depth
  KeepsStart,      // keeps the structural start its module gave it (EC's expansion: a copy of the token)
};

// A parameter is held as a (rows, cols) matrix for the math; `shape` is its logical (PyTorch) shape,
// the one checkpoints store: {rows, cols} by default, {n} for a vector held as (n, 1), {out, in, kh, kw}
// for a conv weight held as (out, in*kh*kw). shape[0] == rows and the product of the remaining extents
// == cols, so the row-major order of `value` is the row-major order of `shape`.
template <class S>
struct Param {
  MatX<S> value;      // (rows, cols)
  MatX<S> grad;       // same shape; backward accumulates into it with +=
  bool decay = true;  // AdamW applies weight decay only to params with decay == true
  ParamRole role = ParamRole::Default;
  std::vector<Index> shape;  // logical shape, see above

  Param() = default;
  Param(Index rows, Index cols, bool withDecay = true)
      : value(MatX<S>::Zero(rows, cols)), grad(MatX<S>::Zero(rows, cols)), decay(withDecay), shape{rows, cols} {}
  // shape = {n} -> (n, 1); {a, b, c, ...} -> (a, b*c*...). Every extent >= 1.
  explicit Param(const std::vector<Index>& logicalShape, bool withDecay = true)
      : Param(rowsOf(logicalShape), colsOf(logicalShape), withDecay) {
    shape = logicalShape;
  }

 private:
  static Index rowsOf(const std::vector<Index>& s) {
    require(!s.empty(), "ddl::Param", "a parameter needs a shape of rank >= 1");
    for (Index e : s) require(e >= 1, "ddl::Param", "every extent must be >= 1, got ", e);
    return s[0];
  }
  static Index colsOf(const std::vector<Index>& s) {
    Index c = 1;
    for (std::size_t i = 1; i < s.size(); ++i) c *= s[i];
    return c;
  }
};

// joinName("blocks.3", "gate.weight") == "blocks.3.gate.weight"; joinName("", "w") == "w".
inline std::string joinName(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  if (name.empty()) return prefix;
  return prefix + "." + name;
}

// Clears every parameter gradient of a module (any type with visitParams; a ParamList walks without
// allocating).
template <class Module>
void zeroGrad(Module& m) {
  m.visitParams("", [](const std::string&, auto& p) { p.grad.setZero(); });
}

// Copies every parameter value and gradient of src into dst, two modules of the same structure
// (same walk: names and shapes are checked, ddl::ShapeError otherwise).
template <class Module>
void assignParams(Module& dst, Module& src) {
  std::vector<std::string> names;
  std::vector<void*> params;
  src.visitParams("", [&](const std::string& name, auto& p) {
    names.push_back(name);
    params.push_back(&p);
  });
  std::size_t i = 0;
  dst.visitParams("", [&](const std::string& name, auto& p) {
    using P = std::decay_t<decltype(p)>;
    if (i >= params.size() || names[i] != name)
      throw ShapeError(message("ddl::assignParams", "parameter ", i, " is \"", name, "\" in the destination but \"",
                               i < names.size() ? names[i] : std::string("(none)"), "\" in the source"));
    const P& q = *static_cast<const P*>(params[i]);
    checkShape("ddl::assignParams", name.c_str(), q.value, p.value.rows(), p.value.cols());
    p.value = q.value;
    p.grad = q.grad;
    ++i;
  });
  if (i != params.size())
    throw ShapeError(message("ddl::assignParams", "the source has ", params.size(), " parameters, the destination ", i));
}

// Re-initialises every parameter of model exactly as a new model of its configuration and seed has it
// (the parameters no draw touches, such as RMSNorm gains, included) and clears the gradients: builds
// Model(model.config(), seed) and copies its parameters in. What every model's init(seed) does.
template <class Model>
void reinitialize(Model& model, std::uint64_t seed) {
  Model fresh(model.config(), seed);
  assignParams(model, fresh);
}

// Total number of scalar parameters of a module.
template <class Module>
Index numParams(Module& m) {
  Index n = 0;
  m.visitParams("", [&n](const std::string&, auto& p) { n += p.value.size(); });
  return n;
}

}  // namespace ddl
