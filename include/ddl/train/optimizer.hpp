#pragma once
// ddl/train/optimizer.hpp: what the training loop (train/training_loop.hpp) needs of an optimizer,
// and how an optimizer's settings enter a checkpoint's train_options metadata.
//
// An optimizer (AdamW, Sgd) has
//   static constexpr const char* kName;            // "adamw", "sgd"
//   void step(ParamList<S>& params);               // one update from p.grad; no allocation after the first
//   double lr() const;  void setLr(double);        // the loop sets the schedule's rate before every step
//   std::int64_t stepCount() const;  void setStepCount(std::int64_t);
//   template <class Model> void initState(Model&); template <class F> void visitState(F&&);
//   std::map<std::string, double> hyperParams() const;
// The caller owns it and passes it to the loop; its lr() at that moment is the peak rate of the
// schedule. A checkpoint holds its state tensors ("optim." + name), its step count and, in
// train_options, optimizerOptionsJson (a resume under other settings is refused).
#include <map>
#include <string>

#include "ddl/core/requires_json.hpp"  // before nlohmann: a clear error without it
#include <nlohmann/json.hpp>

#include "ddl/train/adamw.hpp"

namespace ddl {

// AdamW's settings under the train_options keys that ddl::Trainer has always written (lr, beta1,
// beta2, adam_eps, weight_decay), so checkpoints of earlier versions resume.
template <class S>
nlohmann::json optimizerOptionsJson(const AdamW<S>& optimizer) {
  const AdamWOptions& o = optimizer.options();
  return nlohmann::json{
      {"lr", o.lr}, {"beta1", o.beta1}, {"beta2", o.beta2}, {"adam_eps", o.eps}, {"weight_decay", o.weightDecay}};
}

// Any other optimizer: its name under "optimizer", its rate under "lr" and every other
// hyper-parameter under "<name>_<key>" (Sgd: sgd_momentum, sgd_dampening, sgd_weight_decay, sgd_nesterov).
template <class Optimizer>
nlohmann::json optimizerOptionsJson(const Optimizer& optimizer) {
  nlohmann::json j{{"optimizer", Optimizer::kName}, {"lr", optimizer.lr()}};
  for (const auto& kv : optimizer.hyperParams())
    if (kv.first != "lr") j[std::string(Optimizer::kName) + "_" + kv.first] = kv.second;
  return j;
}

}  // namespace ddl
