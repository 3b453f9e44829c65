#pragma once
// ddl/nn/layers/cross_entropy.hpp: fused softmax + cross-entropy with optional label smoothing.
//
// Per column b of the logits Z: (C, B) with label y_b:
//   lse_b = m_b + log Σ_i exp(Z(i,b) − m_b),  m_b = max_i Z(i,b)        (never overflows)
//   P(:,b) = exp(Z(:,b) − lse_b)                                         (softmax, cached)
//   q = (1 − ε) e_y + ε/C                                               (smoothed one-hot)
//   loss_b = −Σ_i q_i log P(i,b) = (lse_b − Z(y,b)) + ε (Z(y,b) − mean_i Z(i,b))
//   lse_b − Z(y,b) = (m_b − Z(y,b)) + log1p(Σ_{i≠j} exp(Z(i,b) − m_b)), j = argmax: a sum of
//   non-negative terms in double, so a confident correct column keeps its tiny loss (computing
//   lse − z_y in float cancels: logits (120, 100, 104) gave 0 instead of 1.1e-7).
//   loss = mean_b loss_b,   dZ = (P − Q) / B
#include <cmath>
#include <string>
#include <vector>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

namespace detail {
// Throws unless labels has B entries, each in [0, C).
inline void checkLabels(const char* fn, const int* labels, Index count, Index C, Index B) {
  if (count != B)
    throw ShapeError(message(fn, "got ", count, " labels for ", B, " columns of logits (one label per column)"));
  for (Index b = 0; b < count; ++b)
    if (labels[b] < 0 || labels[b] >= C)
      throw ValueError(message(fn, "label at index ", b, " is ", labels[b], ", expected a class in [0, ", C, ")"));
}
}  // namespace detail

template <class S>
class SoftmaxCrossEntropy {
 public:
  // labelSmoothing ε in [0, 1).
  explicit SoftmaxCrossEntropy(double labelSmoothing = 0.0) : m_eps(labelSmoothing) {
    require(labelSmoothing >= 0.0 && labelSmoothing < 1.0, "ddl::SoftmaxCrossEntropy",
            "labelSmoothing must be in [0, 1), got ", labelSmoothing);
  }

  // logits: (C, B), labels: B class indices in [0, C) -> mean loss. Caches the softmax and labels.
  S forward(const Eigen::Ref<const MatX<S>>& logits, const std::vector<int>& labels) {
    return forwardImpl(logits, labels.data(), static_cast<Index>(labels.size()));
  }
  S forward(const Eigen::Ref<const MatX<S>>& logits, const Eigen::Ref<const Eigen::VectorXi>& labels) {
    return forwardImpl(logits, labels.data(), labels.size());
  }

  // The same loss, with the softmax written over the logits instead of a (C, B) matrix of the layer's
  // own (one a forward left is freed): logits hold P until backward, which may write the gradient there
  // too, backward(logits). The training step does so (train/train_step.hpp): the 124M language model's
  // loss then needs no buffer beyond its logits (docs/results.md). The same bits as forward.
  S forwardInPlace(MatX<S>& logits, const std::vector<int>& labels) {
    m_P.resize(0, 0);
    return forwardImpl(logits, labels.data(), static_cast<Index>(labels.size()), &logits);
  }

  // -> dLogits: (C, B) overwritten with dLoss · (P − Q)/B, the gradient of dLoss · loss.
  void backward(MatX<S>& dLogits, S dLoss = S(1)) const;

  // (C, B) softmax of the last forward (after forwardInPlace: its logits, until they change).
  const MatX<S>& probabilities() const { return m_inPlace ? *m_inPlace : m_P; }
  double labelSmoothing() const { return m_eps; }

 private:
  // The one forward: the softmax into *inPlace (Z's own storage) or, without it, into m_P.
  S forwardImpl(const Eigen::Ref<const MatX<S>>& Z, const int* labels, Index count, MatX<S>* inPlace = nullptr);

  double m_eps;
  bool m_hasForward = false;
  MatX<S> m_P;                // (C, B), unless the last forward was in place
  const MatX<S>* m_inPlace = nullptr;  // the logits holding P after forwardInPlace
  Eigen::VectorXi m_labels;   // (B)
};

template <class S>
void SoftmaxCrossEntropy<S>::backward(MatX<S>& dLogits, S dLoss) const {
  if (!m_hasForward) throw Error("ddl::SoftmaxCrossEntropy::backward: called before forward");
  const MatX<S>& P = probabilities();
  const Index C = P.rows(), B = P.cols();
  const S scale = dLoss / static_cast<S>(B);
  const S off = static_cast<S>(m_eps / static_cast<double>(C));
  const S on = static_cast<S>(1.0 - m_eps);
  dLogits.resize(C, B);
  for (Index b = 0; b < B; ++b) {
    dLogits.col(b).array() = (P.col(b).array() - off) * scale;  // in place when dLogits holds P
    dLogits(m_labels(b), b) -= on * scale;
  }
}

template <class S>
S SoftmaxCrossEntropy<S>::forwardImpl(const Eigen::Ref<const MatX<S>>& Z, const int* labels, Index count,
                                        MatX<S>* inPlace) {
  const char* fn = "ddl::SoftmaxCrossEntropy::forward";
  const Index C = Z.rows(), B = Z.cols();
  if (C < 1 || B < 1) throw ShapeError(message(fn, "logits has shape ", shapeOf(Z), ", expected (C >= 1, B >= 1)"));
  detail::checkLabels(fn, labels, count, C, B);
  m_hasForward = false;
  m_inPlace = inPlace;
  MatX<S>& P = inPlace ? *inPlace : m_P;
  P.resize(C, B);  // a no-op in place
  m_labels.resize(B);
  double total = 0.0;  // summed in double: B terms of similar size
  for (Index b = 0; b < B; ++b) {
    const auto z = Z.col(b).array();  // in place, P's column: everything read of z is read before it is written
    Index j = 0;
    const S m = z.maxCoeff(&j);
    const int y = labels[b];
    m_labels(b) = y;
    const double zy = static_cast<double>(z(y));
    const double zMean = m_eps > 0.0 ? static_cast<double>(z.template cast<double>().mean()) : 0.0;
    P.col(b).array() = (z - m).exp();
    double rest = 0.0;  // Σ_{i≠j} exp(z_i − m), each term in (0, 1]
    for (Index i = 0; i < C; ++i)
      if (i != j) rest += static_cast<double>(P(i, b));
    const S sum = P.col(b).sum();
    P.col(b) *= S(1) / sum;
    double lossB = (static_cast<double>(m) - zy) + std::log1p(rest);
    if (m_eps > 0.0) lossB += m_eps * (zy - zMean);
    total += lossB;
  }
  m_hasForward = true;
  return static_cast<S>(total / static_cast<double>(B));
}

// logits: (C, B) -> out: (B) index of the largest logit per column (the first on ties).
template <class D>
void argmax(const Eigen::MatrixBase<D>& logits, Eigen::VectorXi& out) {
  out.resize(logits.cols());
  for (Index b = 0; b < logits.cols(); ++b) {
    Index i = 0;
    logits.col(b).maxCoeff(&i);
    out(b) = static_cast<int>(i);
  }
}

// logits: (C, B), labels: B classes -> how many columns have their largest logit at the label.
template <class D>
Index countCorrect(const Eigen::MatrixBase<D>& logits, const int* labels, Index count) {
  const char* fn = "ddl::countCorrect";
  detail::checkLabels(fn, labels, count, logits.rows(), logits.cols());
  Index correct = 0;
  for (Index b = 0; b < logits.cols(); ++b) {
    Index i = 0;
    logits.col(b).maxCoeff(&i);
    correct += (i == labels[b]);
  }
  return correct;
}
template <class D>
Index countCorrect(const Eigen::MatrixBase<D>& logits, const std::vector<int>& labels) {
  return countCorrect(logits, labels.data(), static_cast<Index>(labels.size()));
}
template <class D>
Index countCorrect(const Eigen::MatrixBase<D>& logits, const Eigen::Ref<const Eigen::VectorXi>& labels) {
  return countCorrect(logits, labels.data(), labels.size());
}

// Fraction of correct columns in [0, 1]; logits: (C, B) with B >= 1.
template <class D, class Labels>
double accuracy(const Eigen::MatrixBase<D>& logits, const Labels& labels) {
  require(logits.cols() >= 1, "ddl::accuracy", "logits has no columns, shape ", shapeOf(logits));
  return static_cast<double>(countCorrect(logits, labels)) / static_cast<double>(logits.cols());
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class SoftmaxCrossEntropy<float>;
extern template class SoftmaxCrossEntropy<double>;
#endif

}  // namespace ddl
