#pragma once
// ddl/train/lr_schedule.hpp: learning-rate schedules as a small value type.
//
// `step` is the 0-based index of the optimizer step about to be taken, so a loop does
//   opt.setLr(schedule.lrAt(opt.stepCount())); opt.step(model);
// Every kind starts with an optional linear warmup (nanoGPT's form, never a zero-lr step):
//   step < warmupSteps:  lr = baseLr * (step + 1) / warmupSteps
// then
//   Constant:  lr = baseLr
//   Cosine:    lr = minLr + (baseLr - minLr) * (1 + cos(pi * (step - warmupSteps) / (totalSteps - warmupSteps))) / 2
//              for step <= totalSteps, and minLr beyond
//   Step:      lr = baseLr * gamma^floor(step / stepSize)   (counted from step 0, like PyTorch's StepLR)
#include <cmath>
#include <cstdint>
#include <string>

#include "ddl/core/enum_names.hpp"
#include "ddl/core/error.hpp"

namespace ddl {

enum class LrScheduleKind { Constant, Cosine, Step };

inline constexpr EnumName<LrScheduleKind> kLrScheduleNames[] = {
    {LrScheduleKind::Constant, "constant"}, {LrScheduleKind::Cosine, "cosine"}, {LrScheduleKind::Step, "step"}};
inline const char* toString(LrScheduleKind kind) { return nameOf(kLrScheduleNames, kind); }

// "constant" | "cosine" | "step" (exact, lower case); anything else throws ValueError.
inline LrScheduleKind parseLrScheduleKind(const std::string& text) {
  return parseEnumName(kLrScheduleNames, text, "parseLrScheduleKind", "schedule");
}

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::Constant;
  double baseLr = 1e-3;
  std::int64_t warmupSteps = 0;  // all kinds: linear warmup length (0 = none)
  std::int64_t totalSteps = 0;   // Cosine: the step at which lr reaches minLr (> warmupSteps)
  double minLr = 0.0;            // Cosine: floor, in [0, baseLr]
  std::int64_t stepSize = 1;     // Step: decay every stepSize steps (>= 1)
  double gamma = 0.1;            // Step: factor per decay (> 0)

  static LrSchedule constant(double baseLr, std::int64_t warmupSteps = 0) {
    return withWarmup(LrScheduleKind::Constant, baseLr, warmupSteps).validated();
  }
  static LrSchedule cosine(double baseLr, std::int64_t warmupSteps, std::int64_t totalSteps, double minLr = 0.0) {
    LrSchedule s = withWarmup(LrScheduleKind::Cosine, baseLr, warmupSteps);
    s.totalSteps = totalSteps;
    s.minLr = minLr;
    return s.validated();
  }
  static LrSchedule stepDecay(double baseLr, std::int64_t stepSize, double gamma, std::int64_t warmupSteps = 0) {
    LrSchedule s = withWarmup(LrScheduleKind::Step, baseLr, warmupSteps);
    s.stepSize = stepSize;
    s.gamma = gamma;
    return s.validated();
  }
  // The fields every kind sets; the factories add their own and validate.
  static LrSchedule withWarmup(LrScheduleKind kind, double baseLr, std::int64_t warmupSteps) {
    LrSchedule s;
    s.kind = kind;
    s.baseLr = baseLr;
    s.warmupSteps = warmupSteps;
    return s;
  }
  LrSchedule validated() const {
    validate();
    return *this;
  }

  // Throws ValueError naming the first field outside its domain and its value.
  void validate() const {
    const char* fn = "LrSchedule";
    require(std::isfinite(baseLr) && baseLr >= 0, fn, "baseLr = ", baseLr, " must be finite and >= 0");
    require(warmupSteps >= 0, fn, "warmupSteps = ", warmupSteps, " must be >= 0");
    if (kind == LrScheduleKind::Cosine) {
      require(totalSteps > warmupSteps, fn, "cosine totalSteps = ", totalSteps, " must be > warmupSteps = ",
              warmupSteps);
      require(minLr >= 0 && minLr <= baseLr, fn, "cosine minLr = ", minLr, " must be in [0, baseLr = ", baseLr,
              "]");
    }
    if (kind == LrScheduleKind::Step) {
      require(stepSize >= 1, fn, "step stepSize = ", stepSize, " must be >= 1");
      require(std::isfinite(gamma) && gamma > 0, fn, "step gamma = ", gamma, " must be finite and > 0");
    }
  }

  // The learning rate for 0-based optimizer step `step` (>= 0).
  double lrAt(std::int64_t step) const {
    validate();
    require(step >= 0, "LrSchedule::lrAt", "step = ", step, " must be >= 0");
    if (step < warmupSteps) return baseLr * static_cast<double>(step + 1) / static_cast<double>(warmupSteps);
    switch (kind) {
      case LrScheduleKind::Constant: return baseLr;
      case LrScheduleKind::Cosine: {
        if (step >= totalSteps) return minLr;
        const double progress =
            static_cast<double>(step - warmupSteps) / static_cast<double>(totalSteps - warmupSteps);
        return minLr + 0.5 * (baseLr - minLr) * (1.0 + std::cos(3.14159265358979323846 * progress));
      }
      case LrScheduleKind::Step:
        return baseLr * std::pow(gamma, static_cast<double>(step / stepSize));
    }
    return baseLr;
  }
};

}  // namespace ddl
