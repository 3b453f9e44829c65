#pragma once
// ddl/core/param_list.hpp: a model's parameter walk taken once, as a list of (dotted name, Param*).
//
//   ddl::ParamList<float> params(net);     // walks net.visitParams once (builds the names: allocates)
//   ddl::zeroGrad(params);                 // every walker accepts the list: it has visitParams too,
//   opt.step(params);                      // and its walk hands out the stored names (no allocation)
//
// A module's own walk rebuilds every dotted name ("blocks.3.mlp.fc1.weight") with string
// concatenations, i.e. dozens of heap allocations per walk; a training step walks several times.
// The list keeps the names and the parameter addresses, so walking it allocates nothing and the
// walkers (optimizers, zeroGrad, clipGradNorm, FiniteGuard) see the same names in the same order.
//
// The list points into the model: it is valid while the model object lives and its parameters are
// not replaced. refresh(model) is the cheap guard for caches (StepBuffers): it rebuilds the list
// when it was built from another object, or when a parameter's storage or shape is no longer the
// one recorded (a checkpoint load moves new storage in; a reassigned model moves every tensor).
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddl/core/param.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

template <class S>
class ParamList {
 public:
  struct Entry {
    std::string name;  // dotted name of the model's walk
    Param<S>* param;
  };

  ParamList() = default;
  template <class Model, class = std::enable_if_t<!std::is_same<std::decay_t<Model>, ParamList>::value>>
  explicit ParamList(Model& model) {
    build(model);
  }

  // (Re)builds the list from model's walk (allocates: the names are built once here).
  template <class Model>
  void build(Model& model) {
    std::vector<Entry> entries;
    std::vector<Storage> storage;
    model.visitParams("", [&](const std::string& name, Param<S>& p) {
      entries.push_back(Entry{name, &p});
      storage.push_back(storageOf(p));
    });
    m_entries = std::move(entries);
    m_storage = std::move(storage);
    m_model = &model;
  }

  // Rebuilds unless the list was built from this object and every parameter still has the storage
  // and shape recorded then. Allocates nothing when the list is current; returns true if it rebuilt.
  // The check reads the recorded parameters in walk order: after a model object was reassigned,
  // its first parameters (members of the object itself) already show new storage.
  template <class Model>
  bool refresh(Model& model) {
    if (m_model == static_cast<const void*>(&model) && unchanged()) return false;
    build(model);
    return true;
  }

  // Every recorded parameter still has its recorded value and grad storage and shape.
  bool unchanged() const {
    for (std::size_t i = 0; i < m_entries.size(); ++i)
      if (!(storageOf(*m_entries[i].param) == m_storage[i])) return false;
    return true;
  }

  // f(const std::string& name, Param<S>& p) for every parameter in the model's walk order. The
  // names are the stored ones when prefix is empty (no allocation), joinName(prefix, name) otherwise.
  template <class F>
  void visitParams(const std::string& prefix, F&& f) const {
    for (const Entry& e : m_entries) {
      if (prefix.empty())
        f(e.name, *e.param);
      else
        f(joinName(prefix, e.name), *e.param);
    }
  }

  std::size_t size() const { return m_entries.size(); }
  bool empty() const { return m_entries.empty(); }
  const Entry& operator[](std::size_t i) const { return m_entries[i]; }
  typename std::vector<Entry>::const_iterator begin() const { return m_entries.begin(); }
  typename std::vector<Entry>::const_iterator end() const { return m_entries.end(); }
  // The object the list was built from (nullptr before build), for identity checks only.
  const void* model() const { return m_model; }

 private:
  struct Storage {
    const S* value;
    const S* grad;
    Index rows, cols, gradRows, gradCols;
    bool operator==(const Storage& o) const {
      return value == o.value && grad == o.grad && rows == o.rows && cols == o.cols && gradRows == o.gradRows &&
             gradCols == o.gradCols;
    }
  };
  static Storage storageOf(const Param<S>& p) {
    return Storage{p.value.data(), p.grad.data(), p.value.rows(), p.value.cols(), p.grad.rows(), p.grad.cols()};
  }

  std::vector<Entry> m_entries;
  std::vector<Storage> m_storage;
  const void* m_model = nullptr;
};

}  // namespace ddl
