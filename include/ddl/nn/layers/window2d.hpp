#pragma once
// ddl/nn/layers/window2d.hpp: the sliding window shared by Conv2d and the 2-D pools, on pixels as columns.
//
//   input layout image(B, H, W), column (b*H + y)*W + x  ->  output image(B, Ho, Wo),
//   Ho = (H + 2 padH - kernelH) / strideH + 1,   Wo = (W + 2 padW - kernelW) / strideW + 1
//   output pixel (oy, ox) reads the input pixels (oy*strideH - padH + i, ox*strideW - padW + j),
//   0 <= i < kernelH, 0 <= j < kernelW; pixels outside the image are padding (dilation 1).
//
// Also the row-segment walk the layers use: a range of output columns split into runs of one output
// row, and for each tap the sub-run whose input pixels lie inside the image, so a layer copies or
// reduces whole blocks of channel columns instead of testing every pixel.
#include <algorithm>
#include <sstream>
#include <string>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

struct Window2d {
  Index kernelH = 1, kernelW = 1;
  Index strideH = 1, strideW = 1;
  Index padH = 0, padW = 0;

  // kernel x kernel, the same stride and padding on both axes.
  static Window2d square(Index kernel, Index stride = 1, Index padding = 0) {
    return make(kernel, kernel, stride, stride, padding, padding);
  }
  // kernel >= 1, stride >= 1, padding >= 0 on each axis.
  static Window2d make(Index kh, Index kw, Index sh, Index sw, Index ph, Index pw) {
    require(kh >= 1 && kw >= 1 && sh >= 1 && sw >= 1 && ph >= 0 && pw >= 0, "ddl::Window2d",
            "need kernel >= 1, stride >= 1, padding >= 0, got kernel (", kh, ", ", kw, "), stride (", sh, ", ", sw,
            "), padding (", ph, ", ", pw, ")");
    return Window2d{kh, kw, sh, sw, ph, pw};
  }

  Index taps() const { return kernelH * kernelW; }
  bool isSquare() const { return kernelH == kernelW && strideH == strideW && padH == padW; }
  bool operator==(const Window2d& o) const {
    return kernelH == o.kernelH && kernelW == o.kernelW && strideH == o.strideH && strideW == o.strideW &&
           padH == o.padH && padW == o.padW;
  }

  // Layout of the output for an image layout; ShapeError (naming fn) for a non-image layout or a
  // kernel larger than the padded image.
  TokenLayout outputLayout(const TokenLayout& in, const char* fn) const {
    if (in.length != 1)
      throw ShapeError(message(fn, "needs an image layout (T = 1), got ", toString(in)));
    const Index h = in.height + 2 * padH - kernelH, w = in.width + 2 * padW - kernelW;
    if (h < 0 || w < 0)
      throw ShapeError(message(fn, "kernel (", kernelH, ", ", kernelW, ") with padding (", padH, ", ", padW,
                               ") does not fit the layout ", toString(in)));
    return TokenLayout::image(in.batch, h / strideH + 1, w / strideW + 1);
  }
};

// "kernel (3, 3), stride (1, 1), padding (1, 1)" for messages.
inline std::string toString(const Window2d& w) {
  std::ostringstream os;
  os << "kernel (" << w.kernelH << ", " << w.kernelW << "), stride (" << w.strideH << ", " << w.strideW
     << "), padding (" << w.padH << ", " << w.padW << ")";
  return os.str();
}

namespace detail {

// Threads a window layer uses for `work` spread over `parts` independent parts: 1 below minWork
// (a fork costs a few microseconds) or inside a parallel region, else up to the OpenMP threads.
inline int windowThreads(Index work, Index minWork, Index parts) {
  int threads = 1;
#if DDL_WITH_OPENMP
  if (work >= minWork && !omp_in_parallel()) threads = omp_get_max_threads();
#else
  (void)work;
  (void)minWork;
#endif
  return static_cast<int>(std::max<Index>(1, std::min<Index>(threads, parts)));
}

// Start of part p when n items are cut into `parts` nearly equal parts.
inline Index windowPartBegin(Index n, int p, int parts) { return n * p / parts; }

// Calls f(task) for task = 0 .. tasks-1, on `tasks` OpenMP threads when tasks > 1.
template <class F>
void runWindowTasks(int tasks, F&& f) {
  if (tasks <= 1) {
    f(0);
    return;
  }
  ParallelErrors errors;  // a throwing task must not terminate the process
  DDL_OMP(parallel for schedule(static) num_threads(tasks))
  for (int t = 0; t < tasks; ++t) errors.guard([&] { f(t); });
  errors.rethrow();
}

// One run of output columns in one output row: columns col .. col+n-1 are pixels (b, oy, ox0 .. ox0+n-1).
struct WindowRun {
  Index col, b, oy, ox0, n;
};

// Calls f(run) for the runs covering output columns [begin, end) of layout `out`, in column order.
template <class F>
void forEachRun(const TokenLayout& out, Index begin, Index end, F&& f) {
  const Index Wo = out.width, Ho = out.height;
  Index col = begin;
  while (col < end) {
    const Index row = col / Wo, ox0 = col - row * Wo;
    const Index n = std::min(Wo - ox0, end - col);
    f(WindowRun{col, row / Ho, row % Ho, ox0, n});
    col += n;
  }
}

// For tap (i, j) and a run: the input row y (may be outside [0, H)) and the sub-run [lo, hi) of
// offsets into the run whose input pixels x = (ox0 + t)*strideW - padW + j lie in [0, W).
struct TapSpan {
  Index y, lo, hi;
  Index x0;  // input column x of offset lo (valid when lo < hi)
};
inline TapSpan tapSpan(const Window2d& w, const TokenLayout& in, const WindowRun& r, Index i, Index j) {
  TapSpan s;
  s.y = r.oy * w.strideH - w.padH + i;
  if (s.y < 0 || s.y >= in.height) {
    s.lo = s.hi = 0;
    s.x0 = 0;
    return s;
  }
  // x(t) = (ox0 + t) s - p + j >= 0  <=>  t >= ceil((p - j)/s) - ox0;  x(t) <= W - 1  <=>  t <= floor((W-1+p-j)/s) - ox0
  const Index a = w.padW - j, bnd = in.width - 1 + w.padW - j;
  const Index oxLo = a <= 0 ? 0 : (a + w.strideW - 1) / w.strideW;
  const Index oxHi = bnd < 0 ? -1 : bnd / w.strideW;  // inclusive
  // Both clamped to [0, n]: a short run (a chunk ending just inside a row) can lie wholly in the padding.
  s.lo = std::min<Index>(r.n, std::max<Index>(0, oxLo - r.ox0));
  s.hi = std::min<Index>(r.n, oxHi - r.ox0 + 1);
  if (s.hi < s.lo) s.hi = s.lo;
  s.x0 = (r.ox0 + s.lo) * w.strideW - w.padW + j;
  return s;
}

}  // namespace detail
}  // namespace ddl
