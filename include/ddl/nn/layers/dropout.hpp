#pragma once
// ddl/nn/layers/dropout.hpp: inverted dropout with a seeded, checkpointable generator.
//
// Training: mask M(i,b) = 1/(1−p) with probability 1−p, else 0; Y = M ⊙ X, dX = M ⊙ dY, so E[Y] = X
// and evaluation is the identity. Each Rng::next() gives two 32-bit uniforms u (low half, then high
// half) for consecutive coefficients in column-major order; a coefficient is dropped when
// u < round(p · 2^32), so p is honoured to 2^-32 at half the generator calls of one draw each
// (for an odd coefficient count the very last half-word is discarded).
// Evaluation (setTraining(false)) or p = 0: Y = X, dX = dY, no draws.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

template <class S>
class Dropout {
 public:
  // p in [0, 1); the same seed gives the same sequence of masks.
  explicit Dropout(double p = 0.0, std::uint64_t seed = 0) : m_p(p), m_rng(seed) {
    require(p >= 0.0 && p < 1.0, "ddl::Dropout", "p must be in [0, 1), got ", p);
  }

  void setTraining(bool training) { m_training = training; }
  bool training() const { return m_training; }
  double p() const { return m_p; }

  // X: (d, B) -> Y: (d, B). Draws a fresh mask in training mode. Y may alias X.
  void forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y);

  // dY: (d, B) of the last forward -> dX: (d, B) overwritten. dX may alias dY.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX);

  // No parameters.
  template <class F>
  void visitParams(const std::string&, F&&) {}

  // The generator, for checkpoints: rng().state() / rng().setState(s) resume the mask sequence.
  Rng& rng() { return m_rng; }
  const Rng& rng() const { return m_rng; }
  // (d, B) mask of the last training forward (entries 0 or 1/(1−p)).
  const MatX<S>& mask() const { return m_mask; }

 private:
  double m_p;
  Rng m_rng;
  bool m_training = true;
  bool m_masked = false;
  bool m_hasForward = false;
  Index m_rows = 0, m_cols = 0;
  MatX<S> m_mask;
};

template <class S>
void Dropout<S>::forward(const Eigen::Ref<const MatX<S>>& X, MatX<S>& Y) {
  m_rows = X.rows();
  m_cols = X.cols();
  m_masked = m_training && m_p > 0.0;
  m_hasForward = true;
  if (!m_masked) {
    if (Y.data() != X.data() || Y.rows() != m_rows || Y.cols() != m_cols) Y = X;
    return;
  }
  const S keep = static_cast<S>(1.0 / (1.0 - m_p));
  // p < 1, but p within 2^-33 of 1 would round to 2^32: clamp so it cannot wrap to 0.
  const auto threshold =
      static_cast<std::uint32_t>(std::min<long long>(std::llround(std::ldexp(m_p, 32)), 0xFFFFFFFFLL));
  m_mask.resize(m_rows, m_cols);
  S* mask = m_mask.data();
  const Index n = m_mask.size();
  // Draw a chunk of words (the generator's serial chain), then threshold them in a loop the
  // compiler vectorises: 4x faster than drawing and selecting per coefficient.
  constexpr Index kChunk = 256;
  std::uint32_t u[kChunk];
  Rng rng = m_rng;  // a local copy keeps the state in registers
  for (Index i0 = 0; i0 < n; i0 += kChunk) {
    const Index len = std::min(kChunk, n - i0);
    for (Index k = 0; k < len; k += 2) {
      const std::uint64_t r = rng.next();
      u[k] = static_cast<std::uint32_t>(r);
      u[k + 1] = static_cast<std::uint32_t>(r >> 32);  // unused past the end: len may be odd
    }
    for (Index k = 0; k < len; ++k) mask[i0 + k] = u[k] >= threshold ? keep : S(0);
  }
  m_rng = rng;
  Y.resize(m_rows, m_cols);
  Y.array() = X.array() * m_mask.array();
}

template <class S>
void Dropout<S>::backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) {
  const char* fn = "ddl::Dropout::backward";
  if (!m_hasForward) throw Error(message(fn, "called before forward"));
  checkShape(fn, "dY", dY, m_rows, m_cols);
  if (!m_masked) {
    if (dX.data() != dY.data() || dX.rows() != m_rows || dX.cols() != m_cols) dX = dY;
    return;
  }
  dX.resize(m_rows, m_cols);
  dX.array() = dY.array() * m_mask.array();
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class Dropout<float>;
extern template class Dropout<double>;
#endif

}  // namespace ddl
