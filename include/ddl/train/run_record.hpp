#pragma once
// ddl/train/run_record.hpp: what a training loop's checkpoint records besides the tensors, and how
// a resume checks it (train/training_loop.hpp):
//   train_options   the loop's options (LoopOptions) and the settings its parts report: the optimizer's
//                   (train/optimizer.hpp), the task's and the batch source's (train/run_settings.hpp);
//                   a resume refuses any key that differs, except those the caller lets change (a
//                   program's "epochs" or "lr" given on the command line);
//   train_position  where the run stands inside the current epoch: batches done and the running
//                   sums of their loss and accuracy (EpochPosition), checked against the training set.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "ddl/core/requires_json.hpp"  // before nlohmann: a clear error without it
#include <nlohmann/json.hpp>

#include "ddl/core/error.hpp"
#include "ddl/core/json_text.hpp"
#include "ddl/core/parse.hpp"
#include "ddl/core/types.hpp"
#include "ddl/io/checkpoint.hpp"
#include "ddl/train/loop_options.hpp"
#include "ddl/train/run_settings.hpp"

namespace ddl {

// Where training stands inside the current epoch, and the running sums of its batches so far.
struct EpochPosition {
  Index batch = 0;
  double lossSum = 0.0;  // sum over samples of the per-sample loss
  Index correct = 0, seen = 0;
};

// The train_position metadata text of pos.
inline std::string positionJson(const EpochPosition& pos) {
  return nlohmann::json{{"batch", pos.batch}, {"loss_sum", pos.lossSum}, {"correct", pos.correct}, {"seen", pos.seen}}
      .dump();
}

// The settings of the loop's parts as one JSON object: the optimizer's (optimizerOptionsJson), then
// the task's and the source's reports. Two parts that report one key are an error naming it.
template <class Task, class Source>
nlohmann::json partSettingsJson(const nlohmann::json& optimizer, const Task& task, const Source& source) {
  nlohmann::json j = optimizer;
  const auto put = [&j](const char* key, const auto& value) {
    require(!j.contains(key), "ddl::partSettingsJson", "two parts of the training loop report the setting '", key, "'");
    j[key] = value;
  };
  reportSettingsOf(task, put);
  reportSettingsOf(source, put);
  return j;
}

// The train_options metadata: the loop's options with its parts' settings (partSettingsJson).
inline nlohmann::json runOptionsJson(const LoopOptions& o, const nlohmann::json& parts) {
  nlohmann::json j = o.toJson();
  j.update(parts);
  return j;
}

// Throws (naming fn and path) when the checkpoint's train_options differ from now's in a key that is
// not in mayChange; the message names every such key with both values.
inline void requireSameRunOptions(const char* fn, const std::string& path, const CheckpointMeta& head,
                                  const LoopOptions& now, const nlohmann::json& parts,
                                  const std::vector<std::string>& mayChange) {
  const auto it = head.extra.find("train_options");
  if (it == head.extra.end()) throw IoError(message(fn, path, ": no train_options metadata (not a Trainer checkpoint)"));
  // A malformed text parses to "discarded", which has no keys: it must not pass as "same options".
  const nlohmann::json savedJson = nlohmann::json::parse(it->second, nullptr, false);
  if (!savedJson.is_object())
    throw IoError(message(fn, path, ": the train_options metadata is not a JSON object: ", excerpt(it->second)));
  LoopOptions saved = now;
  saved.updateFromJson(savedJson);  // checks the types and ranges of the loop's keys
  nlohmann::json savedAll = runOptionsJson(saved, parts);
  for (const auto& kv : parts.items())
    if (savedJson.contains(kv.key())) savedAll[kv.key()] = savedJson.at(kv.key());
  const nlohmann::json current = runOptionsJson(now, parts);
  std::string differing;
  for (const auto& kv : current.items()) {
    const bool same = savedAll.contains(kv.key()) && savedAll.at(kv.key()) == kv.value();
    if (same || std::find(mayChange.begin(), mayChange.end(), kv.key()) != mayChange.end()) continue;
    differing += (differing.empty() ? "" : ", ") + kv.key() + " (saved " +
                 (savedAll.contains(kv.key()) ? jsonExcerpt(savedAll.at(kv.key())) : std::string("none")) + ", now " +
                 jsonExcerpt(kv.value()) + ")";
  }
  if (!differing.empty())
    throw ValueError(message(fn, path, ": the training options differ from the saved run: ", differing,
                             "\n  saved: ", jsonExcerpt(savedAll, 16 * kExcerptBytes), "\n  now:   ", current.dump()));
}

// The train_position metadata of head (absent = the start of the epoch), checked against a training
// set of `batches` batches of batchSize, where samplesIn(b) samples make the first b batches;
// finished: the saved epoch is the run's last, so no batch of it may remain. IoError names fn, path.
inline EpochPosition readEpochPosition(const char* fn, const std::string& path, const CheckpointMeta& head,
                                       Index batches, Index batchSize, const std::function<Index(Index)>& samplesIn,
                                       bool finished) {
  EpochPosition pos;
  const auto it = head.extra.find("train_position");
  if (it == head.extra.end()) return pos;
  const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, false);
  try {
    if (!j.is_object()) throw ValueError("it is not a JSON object: " + excerpt(it->second));
    pos.batch = detail::jsonInteger<Index>("batch", j.at("batch"), 0, finished ? 0 : batches);
    const Index seen = samplesIn(pos.batch);
    pos.seen = detail::jsonInteger<Index>("seen", j.at("seen"), seen, seen);
    pos.correct = detail::jsonInteger<Index>("correct", j.at("correct"), 0, seen);
    if (!j.at("loss_sum").is_number()) throw ValueError("loss_sum is not a number");
    pos.lossSum = numberInRange("loss_sum", j.at("loss_sum").get<double>(), 0.0);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(message(fn, path, ": bad train_position metadata: ", e.what()));
  } catch (const ValueError& e) {
    throw IoError(message(fn, path, ": bad train_position metadata (", batches, " batches of ", batchSize,
                          " per epoch here): ", e.what()));
  }
  return pos;
}

}  // namespace ddl
