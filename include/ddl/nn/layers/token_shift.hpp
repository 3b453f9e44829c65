#pragma once
// ddl/nn/layers/token_shift.hpp: the per-head token shift of the authors' ShiftLinear (kv_shift.py,
// kv_shift_torch.py), the mix that follows its two projections.
//
//   Z: (H*d_h, N) the projection W c, N = B*T, column b*T + t; alpha: (H, N) = σ(W_s c) one weight per
//   head and token; head h owns rows h*d_h .. h*d_h + d_h - 1
//   Y(h, t) = alpha(h, t) Z(h, t−1) + (1 − alpha(h, t)) Z(h, t),   Z(h, −1) = 0 (or `prev` when decoding)
// Backward, with dY the gradient of Y:
//   dZ(h, t)     = (1 − alpha(h, t)) dY(h, t) + alpha(h, t+1) dY(h, t+1)      (the second term for t+1 < T)
//   dalpha(h, t) = Σ_i dY(i, t) (Z(i, t−1) − Z(i, t)),   dlogit = dalpha alpha (1 − alpha)
// The authors' ShiftLinear skips the (1 − alpha) of a one-token call without a shift state (T = 1 returns
// Z itself); the formula above is the one of every longer sequence, at every length, and the one that
// lets cached decoding equal the full forward.
#include <Eigen/Core>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

// Y = the shift of Z (see the header comment) over sequences of length T; prev (H*d_h) stands for
// Z(−1) of column 0 when given (decoding one sequence after cached positions), else zero. Y resized;
// Y must not alias Z.
template <class S>
void tokenShift(const Eigen::Ref<const MatX<S>>& Z, const MatX<S>& alpha, Index T, const VecX<S>* prev, MatX<S>& Y) {
  const Index N = Z.cols(), H = alpha.rows(), dh = H > 0 ? Z.rows() / H : 0;
  require(T >= 1 && N % T == 0 && alpha.cols() == N && H * dh == Z.rows(), "ddl::tokenShift", "Z has shape ",
          shapeOf(Z), " and alpha ", shapeOf(alpha), ", expected (H*d_h, N) and (H, N) with N a multiple of T = ", T);
  Y.resize(Z.rows(), N);
  for (Index n = 0; n < N; ++n) {
    const bool first = n % T == 0;
    for (Index h = 0; h < H; ++h) {
      const S a = alpha(h, n), b = S(1) - a;
      auto y = Y.col(n).segment(h * dh, dh);
      const auto z = Z.col(n).segment(h * dh, dh);
      if (!first)
        y.array() = a * Z.col(n - 1).segment(h * dh, dh).array() + b * z.array();
      else if (prev)
        y.array() = a * prev->segment(h * dh, dh).array() + b * z.array();
      else
        y.array() = b * z.array();
    }
  }
}

// dY (H*d_h, N) of the shift over sequences of length T without prev -> dZ (H*d_h, N) and dLogit (H, N),
// the gradient of alpha's logits; both overwritten (resized). Neither may alias dY.
template <class S>
void tokenShiftBackward(const Eigen::Ref<const MatX<S>>& Z, const MatX<S>& alpha, Index T,
                        const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dZ, MatX<S>& dLogit) {
  const Index N = Z.cols(), H = alpha.rows(), dh = H > 0 ? Z.rows() / H : 0;
  require(T >= 1 && N % T == 0 && alpha.cols() == N && H * dh == Z.rows() && dY.rows() == Z.rows() &&
              dY.cols() == N,
          "ddl::tokenShiftBackward", "Z has shape ", shapeOf(Z), ", alpha ", shapeOf(alpha), " and dY ", shapeOf(dY),
          ", expected (H*d_h, N), (H, N), (H*d_h, N) with N a multiple of T = ", T);
  dZ.resize(Z.rows(), N);
  dLogit.resize(H, N);
  for (Index n = 0; n < N; ++n) {
    const Index t = n % T;
    for (Index h = 0; h < H; ++h) {
      const S a = alpha(h, n);
      const auto dy = dY.col(n).segment(h * dh, dh);
      auto dz = dZ.col(n).segment(h * dh, dh);
      dz = (S(1) - a) * dy;
      if (t + 1 < T) dz += alpha(h, n + 1) * dY.col(n + 1).segment(h * dh, dh);
      S da = -dy.dot(Z.col(n).segment(h * dh, dh));
      if (t > 0) da += dy.dot(Z.col(n - 1).segment(h * dh, dh));
      dLogit(h, n) = da * a * (S(1) - a);
    }
  }
}

}  // namespace ddl
