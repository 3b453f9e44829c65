#pragma once
// ddl/train/train_step.hpp: the smallest training API, for users who write their own loop.
//
//   ddl::DeltaNet<float> net(cfg, seed);
//   ddl::SoftmaxCrossEntropy<float> loss;
//   ddl::AdamW<float> opt;
//   ddl::StepBuffers<float> buf;                      // logits (then their gradient), reused every step
//   while (batches.next(X, y)) {
//     opt.setLr(schedule.lrAt(opt.stepCount()));
//     ddl::StepStats s = ddl::trainStep(net, loss, opt, X, y, buf, {/*clipNorm=*/1.0});
//   }
//   ddl::EvalResult r = ddl::evaluate(net, loss, test, 1000);
//
// trainStep = forward, loss, zeroGrad, backward, optional global-norm clipping, optimizer step.
// The buffers keep the model's parameter list (ParamList: names and addresses, taken from the
// model's walk once), and zeroGrad, clipping and the optimizer walk that list instead of the model.
// Once the buffers and the model's caches have their size (the first step at a batch size), a
// step allocates nothing at all, neither Eigen memory nor strings (tests/test_alloc.cpp counts
// operator new; tests/test_train_loop.cpp checks Eigen with EIGEN_RUNTIME_NO_MALLOC).
// The model is anything with forward(X, logits), backward(dLogits) and visitParams; the
// optimizer anything with step(params) for a ParamList (AdamW, Sgd: any walkable model).
// trainStep is taskStep (train/task_step.hpp, any task) with the classification loss given as a layer.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/param_list.hpp"
#include "ddl/core/types.hpp"
#include "ddl/data/dataset.hpp"
#include "ddl/nn/layers/cross_entropy.hpp"
#include "ddl/train/task_step.hpp"

namespace ddl {

namespace detail {
// Keeps S of an argument out of template deduction (S comes from the loss layer).
template <class T>
struct NonDeduced {
  using type = T;
};

// The classification loss of a step: mean softmax cross-entropy of logits against labels, the count
// of correct samples, and the gradient of the mean loss into dLogits (checks the label range). dLogits
// may be logits: the loss then computes its softmax in their place (forwardInPlace) after counting.
template <class S>
StepStats classificationLoss(SoftmaxCrossEntropy<S>& loss, const MatX<S>& logits, const std::vector<int>& labels,
                             MatX<S>& dLogits) {
  StepStats s;
  s.correct = countCorrect(logits, labels);
  s.count = logits.cols();
  // One buffer (the training step's): the softmax, then the gradient, take the logits' place.
  s.loss = static_cast<double>(&dLogits == &logits ? loss.forwardInPlace(dLogits, labels) : loss.forward(logits, labels));
  loss.backward(dLogits);
  return s;
}

// trainStep's view of a caller's loss layer as a task (see train/task.hpp for the contract).
template <class S>
struct LossLayerTask {
  using Scalar = S;
  using Target = std::vector<int>;
  SoftmaxCrossEntropy<S>& loss;
  StepStats lossAndGradient(const MatX<S>& logits, const Target& labels, MatX<S>& dLogits) {
    return classificationLoss(loss, logits, labels, dLogits);
  }
};
}  // namespace detail

// X: (inputDim, B) one column per sample, labels: B classes in [0, classes).
// One optimizer step on the mean loss of the batch. Throws ShapeError when labels.size() != B or
// the model rejects X's width, ValueError for a label out of range; parameters are unchanged then.
// beforeUpdate(const StepStats&) runs after backward, before clipping and the optimizer step (the
// gradients are complete, nothing is updated yet); if it throws, the parameters are unchanged too.
template <class S, class Model, class Opt, class BeforeUpdate>
StepStats trainStep(Model& model, SoftmaxCrossEntropy<S>& loss, Opt& optimizer,
                    const Eigen::Ref<const MatX<typename detail::NonDeduced<S>::type>>& X,
                    const std::vector<int>& labels, StepBuffers<S>& buf, const TrainStepOptions& options,
                    BeforeUpdate&& beforeUpdate) {
  if (static_cast<Index>(labels.size()) != X.cols())
    throw ShapeError(message("ddl::trainStep", "got ", labels.size(), " labels for X of shape ", shapeOf(X),
                             " (one label per column)"));
  detail::LossLayerTask<S> task{loss};
  return taskStep(model, task, optimizer, X, labels, buf, options,
                  [&beforeUpdate](const StepStats& s) { beforeUpdate(s); });  // read-only here, as always
}

template <class S, class Model, class Opt>
StepStats trainStep(Model& model, SoftmaxCrossEntropy<S>& loss, Opt& optimizer,
                    const Eigen::Ref<const MatX<typename detail::NonDeduced<S>::type>>& X,
                    const std::vector<int>& labels, StepBuffers<S>& buf, const TrainStepOptions& options = {}) {
  return trainStep(model, loss, optimizer, X, labels, buf, options, [](const StepStats&) {});
}

namespace detail {
// The batches of evaluate(); Observed runs the training forward and calls onBatch() after each batch.
template <bool Observed, class S, class Model, class OnBatch>
EvalResult evaluateBatches(Model& model, SoftmaxCrossEntropy<S>& loss, const Dataset<S>& data, Index batchSize,
                           MatX<S>& logits, OnBatch&& onBatch, const EvalStop& stop) {
  const char* fn = "ddl::evaluate";
  require(batchSize > 0, fn, "batchSize must be > 0, got ", batchSize);
  require(data.size() > 0, fn, "the data set is empty");
  checkShape(fn, "data.images", data.images, -1, static_cast<Index>(data.labels.size()));
  EvalResult r;
  double lossSum = 0.0;
  Index correct = 0;
  for (Index start = 0; start < data.size(); start += batchSize) {
    const Index b = std::min(batchSize, data.size() - start);
    const Eigen::Map<const Eigen::VectorXi> y(data.labels.data() + start, b);
    if constexpr (!Observed && HasForwardInference<Model, S>::value)
      model.forwardInference(data.images.middleCols(start, b), logits);
    else
      model.forward(data.images.middleCols(start, b), logits);
    lossSum += static_cast<double>(loss.forward(logits, y)) * static_cast<double>(b);
    correct += countCorrect(logits, y);
    r.count += b;
    if constexpr (Observed) onBatch();
    if (r.count < data.size() && stop.now()) {
      r.stopped = true;
      break;
    }
  }
  r.loss = lossSum / static_cast<double>(r.count);
  r.accuracy = static_cast<double>(correct) / static_cast<double>(r.count);
  return r;
}

template <class F>
using NotEvalStop = std::enable_if_t<!std::is_same_v<std::decay_t<F>, EvalStop>>;
}  // namespace detail

// Mean loss and accuracy of model on data, in batches of batchSize columns (no parameter change).
// Uses the model's forwardInference when it has one (same logits, no training caches written), else
// forward. logits is reused scratch: pass the same matrix to avoid reallocating it.
template <class S, class Model>
EvalResult evaluate(Model& model, SoftmaxCrossEntropy<S>& loss, const Dataset<S>& data, Index batchSize,
                    MatX<S>& logits, const EvalStop& stop = {}) {
  return detail::evaluateBatches<false>(model, loss, data, batchSize, logits, [] {}, stop);
}

// The same through the model's training forward, with onBatch() called after each batch: the layers
// then hold what they computed for that batch, which is what an observer reads (the gate audit reads
// the residuals' caches and the net's block inputs and outputs). The training caches are overwritten.
template <class S, class Model, class OnBatch, class = detail::NotEvalStop<OnBatch>>
EvalResult evaluate(Model& model, SoftmaxCrossEntropy<S>& loss, const Dataset<S>& data, Index batchSize,
                    MatX<S>& logits, OnBatch&& onBatch, const EvalStop& stop = {}) {
  return detail::evaluateBatches<true>(model, loss, data, batchSize, logits, onBatch, stop);
}

template <class S, class Model>
EvalResult evaluate(Model& model, SoftmaxCrossEntropy<S>& loss, const Dataset<S>& data, Index batchSize = 1000) {
  MatX<S> logits;
  return evaluate(model, loss, data, batchSize, logits);
}

}  // namespace ddl
