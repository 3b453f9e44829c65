#pragma once
// ddl/train/batch_source.hpp: where the training loop's batches come from (train/training_loop.hpp),
// and the source of the examples: a labelled Dataset walked by a Batcher with augmentation.
//
// A batch source has
//   using Scalar = S;  using Input = ...;  using Target = ...;     Target = the task's Target
//   Index batchesPerEpoch() const;
//   void startEpoch(std::uint64_t epoch);     // to batch 0 of epoch
//   void seek(Index batch);                   // to batch `batch` of the current epoch, 0..batchesPerEpoch()
//   bool next(Input& X, Target& target);      // the next batch, false at the end of the epoch
//   Index samplesIn(Index batches) const;     // the task's count summed over the first `batches` batches
//   void checkModel(const Model&, const char* fn) const;  // throws ddl::Error naming fn when the
//                                             // model cannot take these batches (may do nothing)
// Batch b of epoch e must be a function of (seed, e, b) alone, so that startEpoch(e) + seek(b)
// resumes a run bit-identically, also mid-epoch (the checkpoint stores e and b). next() should not
// allocate once X and target have their size (a steady-state step allocates nothing). A source of
// random text windows fits the same calls: window starts drawn from Rng(mix(seed, e, b)), Input the
// B*T ids, Target the B*T ids one position later, samplesIn(b) = b * B * T.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/dataset.hpp"

namespace ddl {

// A Dataset's images (one column per sample) and labels in batches: a fresh seeded order every epoch,
// augmentation per BatchOptions (see Batcher). The dataset must outlive the source.
template <class S>
class DatasetBatches {
 public:
  using Scalar = S;
  using Input = MatX<S>;
  using Target = std::vector<int>;

  DatasetBatches(const Dataset<S>& data, const BatchOptions& options, std::uint64_t seed)
      : m_data(&data), m_batcher(data, options, seed) {}
  DatasetBatches(Dataset<S>&&, const BatchOptions&, std::uint64_t) = delete;  // a temporary would dangle

  Index batchesPerEpoch() const { return m_batcher.numBatches(); }
  void startEpoch(std::uint64_t epoch) { m_batcher.startEpoch(epoch); }
  void seek(Index batch) { m_batcher.seek(batch); }
  bool next(Input& X, Target& labels) { return m_batcher.next(X, labels); }
  Index samplesIn(Index batches) const {
    const Index B = m_batcher.options().batchSize;
    const Index full = m_batcher.options().dropLast ? (m_data->size() / B) * B : m_data->size();
    return std::min(batches * B, full);  // batches <= batchesPerEpoch(): no overflow
  }

  // The model's inputDim must be the images' features and its classes cover the labels.
  template <class Model>
  void checkModel(const Model& model, const char* fn) const {
    require(m_data->features() == model.inputDim(), fn, "training images have ", m_data->features(),
            " features but the model expects inputDim = ", model.inputDim());
    require(m_data->numClasses <= model.classes(), fn, "the training set has ", m_data->numClasses,
            " classes but the model has ", model.classes(), " outputs");
  }

  const Dataset<S>& data() const { return *m_data; }
  const Batcher<S>& batcher() const { return m_batcher; }

  // train/run_settings.hpp: the augmentation decides the batches.
  template <class Put>
  void reportSettings(Put&& put) const {
    const AugmentOptions& a = m_batcher.options().augment;
    put("augment", a.enabled);
    put("augment_pad", a.pad);
    put("augment_flip", a.flip);
  }

 private:
  const Dataset<S>* m_data;
  Batcher<S> m_batcher;
};

}  // namespace ddl
