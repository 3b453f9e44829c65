#pragma once
// ddl/train/trainer_options.hpp: the options of a training run (TrainerOptions) and how they are
// stored in a checkpoint's train_options metadata and compared on resume (train/training_loop.hpp).
// The loop reads epochs, batchSize, the schedule, clipNorm, seed, threads, evalBatch, outDir,
// checkFinite and extraMeta; adam, labelSmoothing and augment configure the default parts that
// ddl::Trainer builds (AdamW, ClassificationTask, DatasetBatches).
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <type_traits>

#include "ddl/core/requires_json.hpp"  // before nlohmann: a clear error without it
#include <nlohmann/json.hpp>

#include "ddl/core/error.hpp"
#include "ddl/core/parse.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/dataset.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/train/lr_schedule.hpp"

namespace ddl {

namespace detail {
// A JSON value that must be an integer in [lo, hi] (an integral float such as 3.0 is accepted;
// 2.7, 1e300 and 2^64 are not). Throws ValueError naming `what`.
template <class Int>
Int jsonInteger(const std::string& what, const nlohmann::json& v, Int lo, Int hi) {
  if (v.is_number_unsigned()) return integerInRange<Int>(what, v.get<std::uint64_t>(), lo, hi);
  if (v.is_number_integer()) return integerInRange<Int>(what, v.get<std::int64_t>(), lo, hi);
  if (v.is_number_float()) return integerFromDouble<Int>(what, v.get<double>(), lo, hi);
  throw ValueError(what + " expects an integer, got " + v.dump());
}
}  // namespace detail

struct TrainerOptions {
  int epochs = 10;
  Index batchSize = 128;
  AdamWOptions adam;                                  // adam.lr is the peak learning rate
  LrScheduleKind schedule = LrScheduleKind::Cosine;
  std::int64_t warmupSteps = 0;
  double minLrFactor = 0.0;                           // cosine floor = minLrFactor * lr
  std::int64_t stepEvery = 0;                         // Step schedule: decay period in steps (0 = epochs/3)
  double stepGamma = 0.1;                             // Step schedule: factor per decay
  double clipNorm = 0.0;                              // 0 = no gradient clipping
  double labelSmoothing = 0.0;
  AugmentOptions augment;                             // random crop / flip of training batches
  std::uint64_t seed = 1;                             // batch order and augmentation
  int threads = 0;                                    // 0 = OMP_NUM_THREADS if set, else the usable CPUs
  Index evalBatch = 1000;
  std::string outDir;                                 // metrics.csv + checkpoint.safetensors; empty = none
  bool checkFinite = true;                            // stop at a NaN/Inf loss or gradient (one pass per step)
  std::map<std::string, std::string> extraMeta;       // stored verbatim in every checkpoint

  // Throws ValueError naming the first option outside its domain.
  void validate() const {
    const char* fn = "ddl::TrainerOptions";
    require(epochs >= 1, fn, "epochs must be >= 1, got ", epochs);
    require(batchSize >= 1, fn, "batchSize must be >= 1, got ", batchSize);
    require(warmupSteps >= 0, fn, "warmupSteps must be >= 0, got ", warmupSteps);
    require(minLrFactor >= 0 && minLrFactor <= 1, fn, "minLrFactor must be in [0, 1], got ", minLrFactor);
    require(stepEvery >= 0, fn, "stepEvery must be >= 0, got ", stepEvery);
    require(clipNorm >= 0, fn, "clipNorm must be >= 0 (0 = off), got ", clipNorm);
    require(labelSmoothing >= 0 && labelSmoothing < 1, fn, "labelSmoothing must be in [0, 1), got ", labelSmoothing);
    require(threads >= 0, fn, "threads must be >= 0 (0 = automatic), got ", threads);
    require(evalBatch >= 1, fn, "evalBatch must be >= 1, got ", evalBatch);
    require(augment.pad >= 0 && augment.pad <= (1 << 16), fn, "augment.pad must be in [0, 65536], got ", augment.pad);
    validateAdamWOptions(adam);
  }

  // The options that decide the trajectory, as JSON (stored in checkpoints, compared on resume).
  nlohmann::json toJson() const {
    return nlohmann::json{{"epochs", epochs},
                          {"batch", batchSize},
                          {"lr", adam.lr},
                          {"beta1", adam.beta1},
                          {"beta2", adam.beta2},
                          {"adam_eps", adam.eps},
                          {"weight_decay", adam.weightDecay},
                          {"schedule", toString(schedule)},
                          {"warmup_steps", warmupSteps},
                          {"min_lr_factor", minLrFactor},
                          {"step_every", stepEvery},
                          {"step_gamma", stepGamma},
                          {"clip_norm", clipNorm},
                          {"label_smoothing", labelSmoothing},
                          {"augment", augment.enabled},
                          {"augment_pad", augment.pad},
                          {"augment_flip", augment.flip},
                          {"seed", seed}};
  }
  // Inverse of toJson (missing keys keep their current values). IoError on a wrong type, a
  // fractional or out-of-range integer (checked before any conversion) or an unknown schedule.
  void updateFromJson(const nlohmann::json& j) {
    const char* fn = "ddl::TrainerOptions::updateFromJson";
    try {
      auto get = [&j](const char* key, auto& field) {
        if (j.contains(key)) field = j.at(key).get<std::decay_t<decltype(field)>>();
      };
      auto getInt = [&j](const char* key, auto& field, auto lo, auto hi) {
        using Int = std::decay_t<decltype(field)>;
        if (j.contains(key))
          field = detail::jsonInteger<Int>(std::string("key '") + key + "'", j.at(key), static_cast<Int>(lo),
                                           static_cast<Int>(hi));
      };
      constexpr Index kMaxPad = 1 << 16;  // 2 * pad + 1 draws must not overflow
      std::string sched = toString(schedule);
      getInt("epochs", epochs, 1, std::numeric_limits<int>::max());
      getInt("batch", batchSize, 1, std::numeric_limits<Index>::max());
      get("lr", adam.lr);
      get("beta1", adam.beta1);
      get("beta2", adam.beta2);
      get("adam_eps", adam.eps);
      get("weight_decay", adam.weightDecay);
      get("schedule", sched);
      getInt("warmup_steps", warmupSteps, 0, std::numeric_limits<std::int64_t>::max());
      get("min_lr_factor", minLrFactor);
      getInt("step_every", stepEvery, 0, std::numeric_limits<std::int64_t>::max());
      get("step_gamma", stepGamma);
      get("clip_norm", clipNorm);
      get("label_smoothing", labelSmoothing);
      get("augment", augment.enabled);
      getInt("augment_pad", augment.pad, 0, kMaxPad);
      get("augment_flip", augment.flip);
      getInt("seed", seed, 0, std::numeric_limits<std::uint64_t>::max());
      schedule = parseLrScheduleKind(sched);
    } catch (const nlohmann::json::exception& e) {
      throw IoError(message(fn, "bad training options JSON: ", e.what()));
    } catch (const ValueError& e) {
      throw IoError(message(fn, "bad training options JSON: ", e.what()));
    }
  }
};

}  // namespace ddl
