#pragma once
// ddl/train/epoch_metrics.hpp: what the training loop reports (train/training_loop.hpp): progress
// after every batch (onBatch) and the results of every epoch (onEpoch, run()).
#include <cstdint>
#include <string>
#include <vector>

#include "ddl/core/types.hpp"
#include "ddl/train/task_step.hpp"

namespace ddl {

// Reported after every training batch (running means over the epoch so far).
struct BatchProgress {
  int epoch = 0;        // 0-based
  int epochs = 0;
  Index batch = 0;      // batches done in this epoch
  Index batches = 0;    // batches per epoch
  double loss = 0.0;
  double accuracy = 0.0;
  double samplesPerSec = 0.0;
};

// One epoch's results; a data set that was not given has count == 0.
struct EpochMetrics {
  int epoch = 0;  // 1-based: epochs completed
  std::int64_t step = 0;
  double lr = 0.0;  // learning rate of the epoch's last step
  double trainLoss = 0.0, trainAccuracy = 0.0;
  EvalResult validation, test;
  double seconds = 0.0;        // wall time of the epoch incl. evaluation
  double samplesPerSec = 0.0;  // training throughput
  std::vector<std::string> extra;  // the cells of the columns added with addColumns, in their order
};

}  // namespace ddl
