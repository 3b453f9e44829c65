#pragma once
// ddl/train/task.hpp: how a batch turns into a loss, its gradient and metrics (the task of the
// training loop, train/training_loop.hpp), and the classification task of the examples.
//
// A task has
//   using Scalar = S;  using Target = ...;  using EvalData = ...;
//   StepStats lossAndGradient(const MatX<S>& out, const Target& target, MatX<S>& dOut);
//       out: the model's output for the batch. Returns the mean loss over the batch's count
//       positions, the number of them predicted correctly and count; writes the gradient of the
//       mean loss into dOut (out's shape). Throws ddl::Error for a target that does not fit out.
//       dOut may be out itself (the training step passes one buffer): read out before writing dOut.
//   EvalResult evaluate(Model&, const EvalData&, Index batchSize, MatX<S>& scratch[, onBatch]);
//       mean loss and accuracy over the data, without changing a parameter; with onBatch, the
//       caching forward runs and onBatch() follows every batch (the gate audit reads the caches).
//       Optionally also with a last argument const EvalStop& (train/task_step.hpp), in both forms:
//       asked after every batch, true ends the evaluation early (EvalResult::stopped); the loop
//       then lets Ctrl-C stop a long evaluation. A task without it evaluates to the end.
//   void checkEvalData(const Model&, const EvalData&, const char* fn) const;
//       throws ddl::Error, naming fn, when the data cannot be evaluated by the model (may do nothing).
// The loop owns nothing of a task: it calls lossAndGradient once per step, evaluate after every epoch.
// A next-token task fits the same calls: out (vocabulary, B*T), Target the B*T next ids, count B*T.
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/dataset.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/train/train_step.hpp"

namespace ddl {

// Softmax cross-entropy over classes, optionally label-smoothed; accuracy counts the samples whose
// largest logit is the label. Batches are (inputDim, B) columns with B labels; evaluation data is a
// Dataset (images (inputDim, n), labels n).
template <class S>
class ClassificationTask {
 public:
  using Scalar = S;
  using Target = std::vector<int>;
  using EvalData = Dataset<S>;

  explicit ClassificationTask(double labelSmoothing = 0.0) : m_loss(labelSmoothing) {}

  StepStats lossAndGradient(const MatX<S>& logits, const Target& labels, MatX<S>& dLogits) {
    return detail::classificationLoss(m_loss, logits, labels, dLogits);
  }

  template <class Model>
  EvalResult evaluate(Model& model, const EvalData& data, Index batchSize, MatX<S>& logits,
                      const EvalStop& stop = {}) {
    return ddl::evaluate(model, m_loss, data, batchSize, logits, stop);
  }
  template <class Model, class OnBatch, class = detail::NotEvalStop<OnBatch>>
  EvalResult evaluate(Model& model, const EvalData& data, Index batchSize, MatX<S>& logits, OnBatch&& onBatch,
                      const EvalStop& stop = {}) {
    return ddl::evaluate(model, m_loss, data, batchSize, logits, onBatch, stop);
  }

  template <class Model>
  void checkEvalData(const Model& model, const EvalData& data, const char* fn) const {
    checkShape(fn, "evaluation images", data.images, model.inputDim(), static_cast<Index>(data.labels.size()));
  }

  SoftmaxCrossEntropy<S>& loss() { return m_loss; }

  // train/run_settings.hpp
  template <class Put>
  void reportSettings(Put&& put) const {
    put("label_smoothing", m_loss.labelSmoothing());
  }

 private:
  SoftmaxCrossEntropy<S> m_loss;
};

}  // namespace ddl
