#pragma once
// ddl/train/trainer.hpp: the epoch loop for a classifier (DeltaNet, ConvDeltaNet), used by the examples.
//
//   ddl::Trainer<float> trainer(net, train, opts, &validation, &test);     // DeltaNet<float>
//   ddl::Trainer<float, ddl::ConvDeltaNet<float>> conv(cnet, train, opts);  // images
//   trainer.onBatch = [&](const ddl::BatchProgress& p) { ... };   // progress display
//   trainer.onEpoch = [&](const ddl::EpochMetrics& m) { ... };
//   if (resume) trainer.resume(trainer.checkpointPath());
//   trainer.run();
//   ddl::Trainer<float> ranks(net, train, opts, &validation, nullptr, &comm);  // data-parallel (MPI)
//
// Trainer is ddl::TrainingLoop (train/training_loop.hpp: steps, schedule, evaluation, checkpoints,
// metrics.csv, guards, stop requests, resume) with the parts it builds itself from the options:
// ClassificationTask (options.labelSmoothing), DatasetBatches over train (options.batchSize, a fresh
// order per epoch, options.augment, options.seed) and AdamW (options.adam; adam.lr is the peak
// rate), and for a net with gates their statistics as columns of metrics.csv (GateColumns,
// gates()). Train another model, task, batch source or optimizer with TrainingLoop itself. With a
// communicator of several ranks, each rank trains on its part of every global batch of
// options.batchSize (ShardedBatches) and the loop averages the gradients (TrainingLoop::distribute).
// The model is anything with forward(X (inputDim, B), logits), backward(dLogits), visitParams,
// inputDim(), classes(), config() (train/model.hpp) and, for the gate audit, blocks().
#include "ddl/data/dataset.hpp"
#include "ddl/nn/models/delta_net.hpp"
#include "ddl/train/adamw.hpp"
#include "ddl/core/collective.hpp"
#include "ddl/train/batch_source.hpp"
#include "ddl/train/gate_columns.hpp"
#include "ddl/train/model_config.hpp"
#include "ddl/train/sharded_batches.hpp"
#include "ddl/train/task.hpp"
#include "ddl/train/trainer_options.hpp"
#include "ddl/train/training_loop.hpp"

namespace ddl {

namespace detail {
// The parts ddl::Trainer owns; a base class so that they exist before the loop that refers to them.
template <class S>
struct ClassifierTrainingParts {
  ClassifierTrainingParts(const Dataset<S>& train, const TrainerOptions& o, const Collective* comm)
      : ownTask(o.labelSmoothing),
        ownSource(train, batchOptions(o), o.seed),
        ownShard(ownSource, comm ? comm->rank() : 0, comm ? comm->size() : 1, o.batchSize),
        ownOptimizer(o.adam) {}

  static BatchOptions batchOptions(const TrainerOptions& o) {
    BatchOptions b;
    b.batchSize = o.batchSize;
    b.shuffle = true;
    b.augment = o.augment;
    return b;
  }

  ClassificationTask<S> ownTask;
  DatasetBatches<S> ownSource;
  ShardedBatches<DatasetBatches<S>> ownShard;  // this rank's part (all of it on one process)
  AdamW<S> ownOptimizer;
  GateColumns ownGates;
};
}  // namespace detail

template <class S, class Model = DeltaNet<S>>
class Trainer : private detail::ClassifierTrainingParts<S>,
                public TrainingLoop<Model, ClassificationTask<S>, ShardedBatches<DatasetBatches<S>>, AdamW<S>> {
  using Parts = detail::ClassifierTrainingParts<S>;
  using Loop = TrainingLoop<Model, ClassificationTask<S>, ShardedBatches<DatasetBatches<S>>, AdamW<S>>;

 public:
  // The model, data sets and communicator must outlive the trainer; validation, test and comm may
  // be null (comm null: one process).
  Trainer(Model& model, const Dataset<S>& train, const TrainerOptions& options,
          const Dataset<S>* validation = nullptr, const Dataset<S>* test = nullptr, Collective* comm = nullptr)
      : Parts(train, validated(options), comm),
        Loop(model, Parts::ownTask, Parts::ownShard, Parts::ownOptimizer, options, validation, test) {
    if constexpr (detail::HasGateBlocks<Model>::value) Loop::addColumns(Parts::ownGates.template columns<Model>());
    if (comm) Loop::distribute(*comm);
  }

  // The gate statistics of the last epoch's evaluation (train/gate_columns.hpp; empty without gates).
  const GateColumns& gates() const { return Parts::ownGates; }
  Trainer(Model&, Dataset<S>&&, const TrainerOptions&, const Dataset<S>* = nullptr, const Dataset<S>* = nullptr,
          Collective* = nullptr) = delete;  // keeps a reference: a temporary would dangle
};

}  // namespace ddl
