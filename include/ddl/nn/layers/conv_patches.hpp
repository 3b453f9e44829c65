#pragma once
// ddl/nn/layers/conv_patches.hpp: the input copies a convolution's products read (nn/layers/conv2d.hpp), for
// pixels as columns, X: (C, B*H*W), column (b*H + y)*W + x; geometry in nn/layers/window2d.hpp.
//
// Patches (any stride). P: (K, n), K = kh*kw*C, holds for each output pixel its kh*kw input pixels'
// channel vectors one after the other (row (i*kw + j)*C + c, zero outside the image), so building P
// copies whole channel columns; scatterPatches is its adjoint (col2im: scatter-add into pixels).
//
// Padded bands (stride 1). A band of R output rows of one image is computed from a zero-padded copy of
// the R + kh - 1 input rows it reads, Xpad: (C, (R + kh - 1) * Wp), Wp = W + 2 pw. In the band's
// extended columns e = r*Wp + ox (r < R, ox < Wp; only ox < Wo are outputs, the others are discarded)
// tap t = (i, j) reads column e + off_t, off_t = i*Wp + j, so a tap is one product on the shifted
// column range Xpad[:, off_t : off_t + L], L = (R-1)*Wp + Wo, with no patch matrix at all.
#include <algorithm>

#include "ddl/core/config.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/window2d.hpp"

namespace ddl {
namespace detail {

// Calls f(tap, col, n, span, p0) for each run of the output columns [o, o + n) and each tap (i, j),
// tap = i*kw + j: col is the run's first column relative to o, n its length, span the offsets of the
// run that read inside the image and p0 the input pixel of offset span.lo (valid when span.lo < span.hi).
template <class F>
void forEachTapSpan(const Window2d& w, const TokenLayout& inL, const TokenLayout& outL, Index o, Index n, F&& f) {
  forEachRun(outL, o, o + n, [&](const WindowRun& r) {
    for (Index i = 0; i < w.kernelH; ++i)
      for (Index j = 0; j < w.kernelW; ++j) {
        const TapSpan s = tapSpan(w, inL, r, i, j);
        f(i * w.kernelW + j, r.col - o, r.n, s, (r.b * inL.height + s.y) * inL.width + s.x0);
      }
  });
}

// P.leftCols(n) = patches of output columns [o, o + n); src: the input (C, N) with column stride ld.
template <class S>
void buildPatches(const Window2d& w, Index C, const S* src, Index ld, const TokenLayout& inL, const TokenLayout& outL,
                  Index o, Index n, MatX<S>& P) {
  using ConstStrided = Eigen::Map<const MatX<S>, 0, Eigen::OuterStride<>>;
  forEachTapSpan(w, inL, outL, o, n, [&](Index tap, Index col, Index rn, const TapSpan& s, Index p0) {
    auto dst = P.block(tap * C, col, C, rn);
    if (s.lo > 0) dst.leftCols(s.lo).setZero();
    if (s.hi < rn) dst.rightCols(rn - s.hi).setZero();
    if (s.hi > s.lo)
      dst.middleCols(s.lo, s.hi - s.lo) = ConstStrided(src + p0 * ld, C, s.hi - s.lo, Eigen::OuterStride<>(ld * w.strideW));
  });
}

// dX(:, pixels) += the patch gradients dP.leftCols(n) of output columns [o, o + n); dX: (C, N) contiguous.
template <class S>
void scatterPatches(const Window2d& w, Index C, const MatX<S>& dP, const TokenLayout& inL, const TokenLayout& outL,
                    Index o, Index n, S* dX) {
  using Strided = Eigen::Map<MatX<S>, 0, Eigen::OuterStride<>>;
  forEachTapSpan(w, inL, outL, o, n, [&](Index tap, Index col, Index, const TapSpan& s, Index p0) {
    if (s.hi > s.lo)
      Strided(dX + p0 * C, C, s.hi - s.lo, Eigen::OuterStride<>(C * w.strideW)) +=
          dP.block(tap * C, col + s.lo, C, s.hi - s.lo);
  });
}

// Bands of one image: `rows` output rows each (the last one `lastRows`), padded row width Wp.
struct ConvBands {
  Index Wp = 0, Ho = 0, Wo = 0, rows = 0, lastRows = 0, perImage = 0;
  Index rowsOf(Index band) const { return band + 1 < perImage ? rows : lastRows; }
  Index extended(Index r) const { return (r - 1) * Wp + Wo; }          // L of a band of r rows
  Index padded(Index r, Index kh) const { return (r + kh - 1) * Wp; }  // Xpad columns

  // Bands as tall as fit `bytes` of scratch: per output row Xpad and dXpad (in channels) and the
  // extended output (out channels), Wp columns each, S of `scalarBytes` bytes.
  static ConvBands make(const Window2d& w, const TokenLayout& inL, const TokenLayout& outL, Index in, Index out,
                        Index bytes, Index scalarBytes) {
    ConvBands g;
    g.Wp = inL.width + 2 * w.padW;
    g.Ho = outL.height;
    g.Wo = outL.width;
    g.rows = std::clamp<Index>(bytes / (g.Wp * (2 * in + out) * scalarBytes), 1, std::max<Index>(g.Ho, 1));
    g.perImage = g.Ho == 0 ? 0 : (g.Ho + g.rows - 1) / g.rows;
    g.lastRows = g.Ho - (g.perImage - 1) * g.rows;
    return g;
  }

  // Calls f(tap, off_t) for the taps of window w in order.
  template <class F>
  void forEachShift(const Window2d& w, F&& f) const {
    for (Index tap = 0; tap < w.taps(); ++tap) f(tap, (tap / w.kernelW) * Wp + tap % w.kernelW);
  }
};

// Xpad.leftCols(g.padded(R, kh)) = input rows oy0 - ph .. oy0 + R + kh - 2 - ph of image b with pw
// zero columns on each side, zero rows above and below the image; src: (C, N), column stride ld.
template <class S>
void fillPaddedBand(const Window2d& w, Index C, const S* src, Index ld, const TokenLayout& inL, const ConvBands& g,
                    Index b, Index oy0, Index R, MatX<S>& Xpad) {
  using ConstStrided = Eigen::Map<const MatX<S>, 0, Eigen::OuterStride<>>;
  const Index H = inL.height, W = inL.width, pw = w.padW;
  for (Index pr = 0; pr < R + w.kernelH - 1; ++pr) {
    auto row = Xpad.middleCols(pr * g.Wp, g.Wp);
    const Index y = oy0 + pr - w.padH;
    if (y < 0 || y >= H) {
      row.setZero();
      continue;
    }
    if (pw > 0) {
      row.leftCols(pw).setZero();
      row.rightCols(pw).setZero();
    }
    row.middleCols(pw, W) = ConstStrided(src + (b * H + y) * W * ld, C, W, Eigen::OuterStride<>(ld));
  }
}

// The adjoint of fillPaddedBand: dX(:, image rows of the band) += the interior of dXpad; dX: (C, N).
template <class S, class Band>
void addPaddedBand(const Window2d& w, const Band& dXpad, const TokenLayout& inL, const ConvBands& g, Index b,
                   Index oy0, Index R, MatX<S>& dX) {
  const Index H = inL.height, W = inL.width;
  for (Index pr = 0; pr < R + w.kernelH - 1; ++pr) {
    const Index y = oy0 + pr - w.padH;
    if (y >= 0 && y < H) dX.middleCols((b * H + y) * W, W) += dXpad.middleCols(pr * g.Wp + w.padW, W);
  }
}

}  // namespace detail
}  // namespace ddl
