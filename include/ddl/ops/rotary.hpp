#pragma once
// ddl/ops/rotary.hpp: rotary position embedding (RoPE) with half-split pairs, as rotate_half of
// PyTorch's LLaMA code.
//
//   X: (H * d_h, N) tokens as columns, N = B * T, column b*T + t at position t of its sequence
//   in each head (rows h*d_h ..), feature i < d_h/2 pairs with i + d_h/2, and with a = t * base^(-2i/d_h)
//     x1' = x1 cos a − x2 sin a,   x2' = x2 cos a + x1 sin a
//   the backward is the transposed rotation (by −a): the same call with inverse = true.
// Position 0 is the identity. The angles are computed in double and rounded once into the table.
#include <cmath>

#include <Eigen/Core>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

// cos and sin of t * base^(-2i/d_h) for i < d_h/2 and t < positions(): (d_h/2, T) each.
template <class S>
class RotaryTable {
 public:
  // headDim even and >= 2, base finite and > 0.
  RotaryTable(Index headDim, double base) : m_dh(headDim), m_base(base) {
    require(headDim >= 2 && headDim % 2 == 0, "ddl::RotaryTable", "the head size must be even and >= 2, got ",
            headDim);
    require(std::isfinite(base) && base > 0, "ddl::RotaryTable", "base must be finite and > 0, got ", base);
  }

  // Makes positions() >= T. A position's angle does not depend on T, so the table only grows and a
  // steady state allocates nothing.
  void reserve(Index T) {
    if (m_cos.cols() >= T) return;
    const Index half = m_dh / 2;
    m_cos.resize(half, T);
    m_sin.resize(half, T);
    for (Index t = 0; t < T; ++t)
      for (Index i = 0; i < half; ++i) {
        const double a = static_cast<double>(t) *
                         std::pow(m_base, -2.0 * static_cast<double>(i) / static_cast<double>(m_dh));
        m_cos(i, t) = static_cast<S>(std::cos(a));
        m_sin(i, t) = static_cast<S>(std::sin(a));
      }
  }

  Index headDim() const { return m_dh; }
  Index positions() const { return m_cos.cols(); }
  const MatX<S>& cosines() const { return m_cos; }  // (d_h/2, positions())
  const MatX<S>& sines() const { return m_sin; }

 private:
  Index m_dh;
  double m_base;
  MatX<S> m_cos, m_sin;
};

namespace detail {
// Column n of X at position first + n % T, rotated by its angle (sign -1: the inverse rotation); heads
// of `stride` rows (0: the table's size) of which the first table.headDim() turn.
template <class S, class Derived>
void rotate(const char* fn, Eigen::MatrixBase<Derived>& X, Index T, Index first, const RotaryTable<S>& table, S sign,
            Index stride) {
  const Index rd = table.headDim(), half = rd / 2, N = X.cols(), dh = stride > 0 ? stride : rd;
  require(T >= 1 && N % T == 0, fn, "X has ", N, " columns, not a whole number of sequences of length T = ", T);
  require(dh >= rd, fn, "the heads have ", dh, " rows, fewer than the ", rd, " the table turns");
  require(X.rows() % dh == 0, fn, "X has ", X.rows(), " rows, not a whole number of heads of size ", dh);
  require(first >= 0 && table.positions() >= first + T, fn, "the table covers ", table.positions(),
          " positions, the columns reach position ", first + T - 1);
  const Index heads = X.rows() / dh;
  const MatX<S>& cosT = table.cosines();
  const MatX<S>& sinT = table.sines();
  DDL_OMP(parallel for schedule(static) if (X.rows() * N >= detail::kParallelMinWork))
  for (Index n = 0; n < N; ++n) {
    const Index t = first + n % T;
    for (Index h = 0; h < heads; ++h) {
      const Index r = h * dh;
      for (Index i = 0; i < half; ++i) {
        const S c = cosT(i, t), s = sign * sinT(i, t);
        const S x1 = X(r + i, n), x2 = X(r + half + i, n);
        X(r + i, n) = x1 * c - x2 * s;
        X(r + half + i, n) = x2 * c + x1 * s;
      }
    }
  }
}
}  // namespace detail

// X: (H * d_h, B * T) rotated in place, every column by its position t = column % T (inverse: by −t).
// The table must cover T positions. Columns are independent: split over OpenMP threads when large.
// headStride: the rows d_h of a head when only its first r = table.headDim() features turn (partial
// RoPE, the authors' rope_ratio < 1: pairs (i, i + r/2), angles t * base^(-2i/r)); 0 means d_h = r.
template <class S, class Derived>
void applyRotary(Eigen::MatrixBase<Derived>& X, Index T, const RotaryTable<S>& table, bool inverse = false,
                 Index headStride = 0) {
  detail::rotate("ddl::applyRotary", X, T, 0, table, inverse ? S(-1) : S(1), headStride);
}

// X: (H * d_h, n), the positions first .. first+n-1 of one sequence (decoding after `first` cached
// positions), rotated in place with the same operations as applyRotary. The table must cover first + n.
template <class S, class Derived>
void applyRotaryFrom(Eigen::MatrixBase<Derived>& X, Index first, const RotaryTable<S>& table, Index headStride = 0) {
  detail::rotate("ddl::applyRotaryFrom", X, X.cols() > 0 ? X.cols() : 1, first, table, S(1), headStride);
}

}  // namespace ddl
