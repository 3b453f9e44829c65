#pragma once
// ddl/train/eval_columns.hpp: columns a program adds to the training loop's metrics.csv, filled
// from each epoch's evaluation (train/training_loop.hpp, addColumns).
//
//   ddl::GateColumns gates;                        // train/gate_columns.hpp: beta_mean, beta_min, ...
//   loop.addColumns(gates.columns<ddl::DeltaLM<float>>());
//
// Per epoch the loop calls start() before it evaluates the observed set (the test set when it has
// one, else the validation set), observe(model) after every batch of that set, evaluated with the
// caching forward so the model's layers hold what that batch computed, and cells() once the set is
// done: one cell per name, "" for none. Rank 0 alone evaluates, so only its columns see batches.
// The loop knows the columns by these four members only, never the model's layers.
#include <functional>
#include <string>
#include <vector>

namespace ddl {

template <class Model>
struct EvalColumns {
  std::vector<std::string> names;                   // header cells, after the loop's own columns
  std::function<void()> start;                      // before the observed set of an epoch
  std::function<void(const Model&)> observe;        // after every batch of it
  std::function<std::vector<std::string>()> cells;  // the epoch's values, one per name
};

}  // namespace ddl
