#pragma once
// ddl/train/run_settings.hpp: how a part given to the training loop (task, batch source) states the
// settings that decide the run's trajectory. A part that has any defines
//   template <class Put> void reportSettings(Put&& put) const;   // put(key, value) per setting
// with value a bool, an integer, a double or a string; ClassificationTask reports label_smoothing,
// DatasetBatches augment, augment_pad and augment_flip. The loop stores them with its own options and
// the optimizer's in a checkpoint's train_options, and a resume under other values is refused
// (train/run_record.hpp). A part without settings defines nothing.
#include <type_traits>
#include <utility>

#include "ddl/core/detects.hpp"

namespace ddl {

namespace detail {
struct IgnoreSetting {
  template <class V>
  void operator()(const char*, const V&) const {}
};
template <class Part>
using ReportSettingsProbe = decltype(std::declval<const Part&>().reportSettings(IgnoreSetting{}));
template <class Part>
using HasReportSettings = Detects<ReportSettingsProbe, Part>;
}  // namespace detail

// part.reportSettings(put) if the part has settings; nothing otherwise.
template <class Part, class Put>
void reportSettingsOf(const Part& part, Put&& put) {
  if constexpr (detail::HasReportSettings<Part>::value) part.reportSettings(std::forward<Put>(put));
}

}  // namespace ddl
