#pragma once
// ddl/train/trainer_options.hpp: the options of a ddl::Trainer run (train/trainer.hpp): the loop's own
// (LoopOptions, train/loop_options.hpp) and the settings of the parts the Trainer builds from them:
// AdamW (adam; adam.lr is the peak rate), ClassificationTask (labelSmoothing) and DatasetBatches
// (augment). Each part reports its own settings into the checkpoint (train/run_record.hpp); toJson
// gives them all under the same keys, for a program's printout and its saved options.
#include <cstdint>

#include "ddl/core/requires_json.hpp"  // before nlohmann: a clear error without it
#include <nlohmann/json.hpp>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/dataset.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/loop_options.hpp"

namespace ddl {

struct TrainerOptions : LoopOptions {
  AdamWOptions adam;        // adam.lr is the peak learning rate
  double labelSmoothing = 0.0;
  AugmentOptions augment;   // random crop / flip of training batches (seeded by seed)

  // Throws ValueError naming the first option outside its domain.
  void validate() const {
    const char* fn = "ddl::TrainerOptions";
    LoopOptions::validate(fn);
    require(labelSmoothing >= 0 && labelSmoothing < 1, fn, "labelSmoothing must be in [0, 1), got ", labelSmoothing);
    require(augment.pad >= 0 && augment.pad <= (1 << 16), fn, "augment.pad must be in [0, 65536], got ", augment.pad);
    validateAdamWOptions(adam);
  }

  // The loop's keys and the parts' (the keys their reports write into a checkpoint).
  nlohmann::json toJson() const {
    nlohmann::json j = LoopOptions::toJson();
    j.update(nlohmann::json{{"lr", adam.lr},
                            {"beta1", adam.beta1},
                            {"beta2", adam.beta2},
                            {"adam_eps", adam.eps},
                            {"weight_decay", adam.weightDecay},
                            {"label_smoothing", labelSmoothing},
                            {"augment", augment.enabled},
                            {"augment_pad", augment.pad},
                            {"augment_flip", augment.flip}});
    return j;
  }
  // Inverse of toJson, with LoopOptions::updateFromJson's checks; errors name ddl::TrainerOptions::updateFromJson.
  void updateFromJson(const nlohmann::json& j) {
    detail::readOptionsJson("ddl::TrainerOptions::updateFromJson", j, [this](const detail::OptionsJsonReader& r) {
      constexpr Index kMaxPad = 1 << 16;  // 2 * pad + 1 draws must not overflow
      read(r);
      r.get("lr", adam.lr);
      r.get("beta1", adam.beta1);
      r.get("beta2", adam.beta2);
      r.get("adam_eps", adam.eps);
      r.get("weight_decay", adam.weightDecay);
      r.get("label_smoothing", labelSmoothing);
      r.get("augment", augment.enabled);
      r.getInt("augment_pad", augment.pad, 0, kMaxPad);
      r.get("augment_flip", augment.flip);
    });
  }
};

}  // namespace ddl
