#pragma once
// ddl/train/loop_options.hpp: the options the training loop itself reads (train/training_loop.hpp):
// epochs, batch size, the learning-rate schedule, clipping, seed, threads, evaluation batch, output
// folder, the NaN/Inf guard and extra checkpoint metadata. The parts the loop is given report their own
// settings into the checkpoint's train_options (train/run_record.hpp); ddl::Trainer's extra options
// are in train/trainer_options.hpp.
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <type_traits>

#include "ddl/core/requires_json.hpp"  // before nlohmann: a clear error without it
#include <nlohmann/json.hpp>

#include "ddl/core/error.hpp"
#include "ddl/core/json_text.hpp"
#include "ddl/core/parse.hpp"
#include "ddl/core/types.hpp"
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
  throw ValueError(what + " expects an integer, got " + jsonExcerpt(v));
}

// Reads the keys of an options object that are present into their fields (missing keys keep the
// current values); integers are range-checked before any conversion.
struct OptionsJsonReader {
  const nlohmann::json& j;
  template <class T>
  void get(const char* key, T& field) const {
    if (j.contains(key)) field = j.at(key).get<T>();
  }
  template <class Int, class Lo, class Hi>
  void getInt(const char* key, Int& field, Lo lo, Hi hi) const {
    if (j.contains(key))
      field = jsonInteger<Int>(std::string("key '") + key + "'", j.at(key), static_cast<Int>(lo), static_cast<Int>(hi));
  }
};

// Runs read(OptionsJsonReader) and turns every failure into an IoError naming fn.
template <class F>
void readOptionsJson(const char* fn, const nlohmann::json& j, F&& read) {
  try {
    read(OptionsJsonReader{j});
  } catch (const nlohmann::json::exception& e) {
    throw IoError(message(fn, "bad training options JSON: ", e.what()));
  } catch (const ValueError& e) {
    throw IoError(message(fn, "bad training options JSON: ", e.what()));
  }
}
}  // namespace detail

struct LoopOptions {
  int epochs = 10;
  Index batchSize = 128;
  LrScheduleKind schedule = LrScheduleKind::Cosine;   // peak rate: the optimizer's lr() when given to the loop
  std::int64_t warmupSteps = 0;
  double minLrFactor = 0.0;                           // cosine floor = minLrFactor * lr
  std::int64_t stepEvery = 0;                         // Step schedule: decay period in steps (0 = epochs/3)
  double stepGamma = 0.1;                             // Step schedule: factor per decay
  double clipNorm = 0.0;                              // 0 = no gradient clipping
  std::uint64_t seed = 1;                             // batch order (and augmentation)
  int threads = 0;                                    // 0 = OMP_NUM_THREADS if set, else the usable CPUs
  Index evalBatch = 1000;
  std::string outDir;                                 // metrics.csv + checkpoint.safetensors; empty = none
  bool checkFinite = true;                            // stop at a NaN/Inf loss or gradient (one pass per step)
  std::map<std::string, std::string> extraMeta;       // stored verbatim in every checkpoint

  // Throws ValueError naming fn and the first option outside its domain.
  void validate(const char* fn = "ddl::LoopOptions") const {
    require(epochs >= 1, fn, "epochs must be >= 1, got ", epochs);
    require(batchSize >= 1, fn, "batchSize must be >= 1, got ", batchSize);
    require(warmupSteps >= 0, fn, "warmupSteps must be >= 0, got ", warmupSteps);
    require(minLrFactor >= 0 && minLrFactor <= 1, fn, "minLrFactor must be in [0, 1], got ", minLrFactor);
    require(stepEvery >= 0, fn, "stepEvery must be >= 0, got ", stepEvery);
    require(clipNorm >= 0, fn, "clipNorm must be >= 0 (0 = off), got ", clipNorm);
    require(threads >= 0, fn, "threads must be >= 0 (0 = automatic), got ", threads);
    require(evalBatch >= 1, fn, "evalBatch must be >= 1, got ", evalBatch);
  }

  // The options that decide the trajectory, as JSON (stored in checkpoints, compared on resume).
  nlohmann::json toJson() const {
    return nlohmann::json{{"epochs", epochs},
                          {"batch", batchSize},
                          {"schedule", toString(schedule)},
                          {"warmup_steps", warmupSteps},
                          {"min_lr_factor", minLrFactor},
                          {"step_every", stepEvery},
                          {"step_gamma", stepGamma},
                          {"clip_norm", clipNorm},
                          {"seed", seed}};
  }
  // Inverse of toJson (missing keys keep their current values). IoError naming fn on a wrong type, a
  // fractional or out-of-range integer (checked before any conversion) or an unknown schedule.
  void updateFromJson(const nlohmann::json& j, const char* fn = "ddl::LoopOptions::updateFromJson") {
    detail::readOptionsJson(fn, j, [this](const detail::OptionsJsonReader& r) { read(r); });
  }

 protected:
  void read(const detail::OptionsJsonReader& r) {
    std::string sched = toString(schedule);
    r.getInt("epochs", epochs, 1, std::numeric_limits<int>::max());
    r.getInt("batch", batchSize, 1, std::numeric_limits<Index>::max());
    r.get("schedule", sched);
    r.getInt("warmup_steps", warmupSteps, 0, std::numeric_limits<std::int64_t>::max());
    r.get("min_lr_factor", minLrFactor);
    r.getInt("step_every", stepEvery, 0, std::numeric_limits<std::int64_t>::max());
    r.get("step_gamma", stepGamma);
    r.get("clip_norm", clipNorm);
    r.getInt("seed", seed, 0, std::numeric_limits<std::uint64_t>::max());
    schedule = parseLrScheduleKind(sched);
  }
};

}  // namespace ddl
