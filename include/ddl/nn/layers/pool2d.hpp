#pragma once
// ddl/nn/layers/pool2d.hpp: 2-D max and average pooling per channel, on pixels as columns.
//
//   X: (C, B*H*W), column (b*H + y)*W + x  ->  Y: (C, B*Ho*Wo), geometry in nn/layers/window2d.hpp
//   MaxPool2d: Y(c, o) = max over the window's input pixels (padding never wins, as in PyTorch)
//              backward: dX(c, argmax(c, o)) += dY(c, o)
//   AvgPool2d: Y(c, o) = Σ_window X(c, p) / divisor(o)
//              backward: dX(c, p) += dY(c, o) / divisor(o) for every input pixel p of window o
//              divisor = kh*kw (countIncludePad, PyTorch's default: padding counts as zeros) or the
//              number of input pixels inside the window (countIncludePad = false)
// As in PyTorch, padding is at most half the kernel on each axis, so every window holds at least one
// input pixel; windows are floor-sized (ceil_mode = false).
// Ties in max pooling: the first maximum in window order (row i, then column j) wins, so the gradient
// goes to one pixel, deterministically. A NaN in a window wins over numbers (it propagates, as in PyTorch).
// Threads (OpenMP, above kPoolParallelMin element visits): split over images, which share no pixels.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/layers/window2d.hpp"

namespace ddl {

namespace detail {
// Element visits below which pooling stays on one thread.
inline constexpr Index kPoolParallelMin = Index(1) << 17;

// Checks a pooling window (padding <= kernel / 2) and returns it.
inline Window2d checkPoolWindow(const char* fn, const Window2d& w) {
  const Window2d v = Window2d::make(w.kernelH, w.kernelW, w.strideH, w.strideW, w.padH, w.padW);
  require(2 * v.padH <= v.kernelH && 2 * v.padW <= v.kernelW, fn,
          "padding must be at most half the kernel on each axis, got ", toString(v));
  return v;
}

// Checks X against layout and the window; returns the output layout.
template <class S>
TokenLayout poolOutputLayout(const char* fn, const Window2d& w, const Eigen::Ref<const MatX<S>>& X,
                             const TokenLayout& layout) {
  if (X.cols() != layout.tokens())
    throw ShapeError(message(fn, "X has shape ", shapeOf(X), ", expected (C, ", layout.tokens(), ") for the layout ",
                             toString(layout)));
  return w.outputLayout(layout, fn);
}

// Calls f(o, b, y0, x0) for the output columns o of images [b0, b1): window origin (y0, x0) in input pixels.
template <class F>
void forEachWindow(const Window2d& w, const TokenLayout& outL, Index b0, Index b1, F&& f) {
  for (Index b = b0; b < b1; ++b)
    for (Index oy = 0; oy < outL.height; ++oy)
      for (Index ox = 0; ox < outL.width; ++ox)
        f((b * outL.height + oy) * outL.width + ox, b, oy * w.strideH - w.padH, ox * w.strideW - w.padW);
}

// What both pools keep: the checked window, and the shapes of the last forward, which backward
// checks dY against. name ("ddl::MaxPool2d") starts the errors.
class Pool2dBase {
 public:
  TokenLayout outputLayout(const TokenLayout& in) const { return m_win.outputLayout(in, m_name); }

  template <class F>
  void visitParams(const std::string&, F&&) {}  // no parameters

  const Window2d& window() const { return m_win; }

 protected:
  Pool2dBase(const char* name, const Window2d& window) : m_name(name), m_win(checkPoolWindow(name, window)) {}

  // Keeps the shapes of a forward: channels C, input and output layouts.
  void rememberForward(Index channels, const TokenLayout& in, const TokenLayout& out) {
    m_inLayout = in;
    m_outLayout = out;
    m_channels = channels;
    m_hasForward = true;
  }
  // Throws, naming fn, unless a forward ran and dY is (C, its output tokens).
  template <class S>
  void checkBackward(const char* fn, const Eigen::Ref<const MatX<S>>& dY) const {
    if (!m_hasForward) throw Error(message(fn, "called before forward"));
    checkShape(fn, "dY", dY, m_channels, m_outLayout.tokens());
  }

  const char* m_name;
  Window2d m_win;
  bool m_hasForward = false;
  Index m_channels = 0;
  TokenLayout m_inLayout, m_outLayout;
};
}  // namespace detail

template <class S>
class MaxPool2d : public detail::Pool2dBase {
 public:
  // kernel x kernel windows with stride = kernel (PyTorch's default), no padding.
  explicit MaxPool2d(Index kernel) : MaxPool2d(Window2d::square(kernel, kernel, 0)) {}
  MaxPool2d(Index kernel, Index stride, Index padding = 0) : MaxPool2d(Window2d::square(kernel, stride, padding)) {}
  explicit MaxPool2d(const Window2d& window) : Pool2dBase("ddl::MaxPool2d", window) {}

  // X: (C, layout.tokens()) -> Y: (C, outputLayout(layout).tokens()); returns the output layout.
  // Caches the argmax of every output. Y must not alias X.
  TokenLayout forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y);

  // Same output as forward, caches nothing.
  TokenLayout forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) const;

  // dY: (C, Ho*Wo*B) of the last forward -> dX: (C, B*H*W) overwritten. dX must not alias dY.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) const;

 private:
  // Y = max pool of X; arg (C, No) column-major receives the input column of each maximum when non-null.
  void run(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& inL, const TokenLayout& outL, MatX<S>& Y,
           int* arg) const;

  Eigen::Matrix<int, Eigen::Dynamic, Eigen::Dynamic> m_arg;  // (C, No) input column of each maximum
};

template <class S>
TokenLayout MaxPool2d<S>::forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
  const char* fn = "ddl::MaxPool2d::forward";
  const TokenLayout outL = detail::poolOutputLayout<S>(fn, m_win, X, layout);
  require(layout.tokens() <= INT_MAX, fn, "at most ", INT_MAX, " input pixels, got ", layout.tokens());
  m_arg.resize(X.rows(), outL.tokens());
  rememberForward(X.rows(), layout, outL);
  run(X, layout, outL, Y, m_arg.data());
  return outL;
}

template <class S>
TokenLayout MaxPool2d<S>::forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout,
                                           MatX<S>& Y) const {
  const TokenLayout outL = detail::poolOutputLayout<S>("ddl::MaxPool2d::forwardInference", m_win, X, layout);
  run(X, layout, outL, Y, nullptr);
  return outL;
}

template <class S>
void MaxPool2d<S>::backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) const {
  const char* fn = "ddl::MaxPool2d::backward";
  checkBackward<S>(fn, dY);
  const Index C = m_channels, perIn = m_inLayout.tokensPerSample(), perOut = m_outLayout.tokensPerSample();
  dX.resize(C, m_inLayout.tokens());
  const Index B = m_inLayout.batch;
  const int tasks = detail::windowThreads(C * m_outLayout.tokens(), detail::kPoolParallelMin, B);
  detail::runWindowTasks(tasks, [&](int t) {
    const Index b0 = detail::windowPartBegin(B, t, tasks), b1 = detail::windowPartBegin(B, t + 1, tasks);
    dX.middleCols(b0 * perIn, (b1 - b0) * perIn).setZero();
    for (Index o = b0 * perOut; o < b1 * perOut; ++o) {
      const int* arg = m_arg.data() + o * C;
      for (Index c = 0; c < C; ++c) dX(c, arg[c]) += dY(c, o);
    }
  });
}

template <class S>
void MaxPool2d<S>::run(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& inL, const TokenLayout& outL, MatX<S>& Y,
                       int* arg) const {
  const Index C = X.rows(), H = inL.height, W = inL.width, B = inL.batch;
  Y.resize(C, outL.tokens());
  const int tasks = detail::windowThreads(C * outL.tokens() * m_win.taps(), detail::kPoolParallelMin, B);
  detail::runWindowTasks(tasks, [&](int t) {
    const Index b0 = detail::windowPartBegin(B, t, tasks), b1 = detail::windowPartBegin(B, t + 1, tasks);
    detail::forEachWindow(m_win, outL, b0, b1, [&](Index o, Index b, Index y0, Index x0) {
      S* y = Y.col(o).data();
      int* a = arg ? arg + o * C : nullptr;
      bool first = true;
      for (Index yy = std::max<Index>(y0, 0); yy < std::min(y0 + m_win.kernelH, H); ++yy)
        for (Index xx = std::max<Index>(x0, 0); xx < std::min(x0 + m_win.kernelW, W); ++xx) {
          const Index p = (b * H + yy) * W + xx;
          const S* x = X.col(p).data();
          if (first) {
            for (Index c = 0; c < C; ++c) y[c] = x[c];
            if (a)
              for (Index c = 0; c < C; ++c) a[c] = static_cast<int>(p);
            first = false;
            continue;
          }
          for (Index c = 0; c < C; ++c) {
            const S v = x[c];
            // strict >: the first maximum stays; a NaN replaces a number, never another NaN
            if (v > y[c] || (std::isnan(v) && !std::isnan(y[c]))) {
              y[c] = v;
              if (a) a[c] = static_cast<int>(p);
            }
          }
        }
    });
  });
}

template <class S>
class AvgPool2d : public detail::Pool2dBase {
 public:
  // kernel x kernel windows with stride = kernel (PyTorch's default), no padding, padding counted.
  explicit AvgPool2d(Index kernel) : AvgPool2d(Window2d::square(kernel, kernel, 0)) {}
  AvgPool2d(Index kernel, Index stride, Index padding = 0, bool countIncludePad = true)
      : AvgPool2d(Window2d::square(kernel, stride, padding), countIncludePad) {}
  explicit AvgPool2d(const Window2d& window, bool countIncludePad = true)
      : Pool2dBase("ddl::AvgPool2d", window), m_countIncludePad(countIncludePad) {}

  // X: (C, layout.tokens()) -> Y: (C, outputLayout(layout).tokens()); returns the output layout.
  // Caches only the layouts. Y must not alias X.
  TokenLayout forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y);

  // Same output as forward, caches nothing.
  TokenLayout forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) const;

  // dY: (C, Ho*Wo*B) of the last forward -> dX: (C, B*H*W) overwritten. dX must not alias dY.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) const;
  bool countIncludePad() const { return m_countIncludePad; }

 private:
  // Divisor of the window with origin (y0, x0) on an H x W image.
  S divisor(Index y0, Index x0, Index H, Index W) const;

  bool m_countIncludePad;
};

template <class S>
TokenLayout AvgPool2d<S>::forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
  const TokenLayout outL = forwardInference(X, layout, Y);
  rememberForward(X.rows(), layout, outL);
  return outL;
}

template <class S>
TokenLayout AvgPool2d<S>::forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout,
                                           MatX<S>& Y) const {
  const TokenLayout outL = detail::poolOutputLayout<S>("ddl::AvgPool2d::forward", m_win, X, layout);
  const Index H = layout.height, W = layout.width, B = layout.batch;
  Y.resize(X.rows(), outL.tokens());
  const int tasks = detail::windowThreads(X.rows() * outL.tokens() * m_win.taps(), detail::kPoolParallelMin, B);
  detail::runWindowTasks(tasks, [&](int t) {
    const Index b0 = detail::windowPartBegin(B, t, tasks), b1 = detail::windowPartBegin(B, t + 1, tasks);
    detail::forEachWindow(m_win, outL, b0, b1, [&](Index o, Index b, Index y0, Index x0) {
      auto y = Y.col(o);
      y.setZero();
      for (Index yy = std::max<Index>(y0, 0); yy < std::min(y0 + m_win.kernelH, H); ++yy)
        for (Index xx = std::max<Index>(x0, 0); xx < std::min(x0 + m_win.kernelW, W); ++xx)
          y += X.col((b * H + yy) * W + xx);
      y *= S(1) / divisor(y0, x0, H, W);
    });
  });
  return outL;
}

template <class S>
void AvgPool2d<S>::backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) const {
  const char* fn = "ddl::AvgPool2d::backward";
  checkBackward<S>(fn, dY);
  const Index H = m_inLayout.height, W = m_inLayout.width, B = m_inLayout.batch, perIn = m_inLayout.tokensPerSample();
  dX.resize(m_channels, m_inLayout.tokens());
  const int tasks =
      detail::windowThreads(m_channels * m_outLayout.tokens() * m_win.taps(), detail::kPoolParallelMin, B);
  detail::runWindowTasks(tasks, [&](int t) {
    const Index b0 = detail::windowPartBegin(B, t, tasks), b1 = detail::windowPartBegin(B, t + 1, tasks);
    dX.middleCols(b0 * perIn, (b1 - b0) * perIn).setZero();
    detail::forEachWindow(m_win, m_outLayout, b0, b1, [&](Index o, Index b, Index y0, Index x0) {
      const S scale = S(1) / divisor(y0, x0, H, W);
      for (Index yy = std::max<Index>(y0, 0); yy < std::min(y0 + m_win.kernelH, H); ++yy)
        for (Index xx = std::max<Index>(x0, 0); xx < std::min(x0 + m_win.kernelW, W); ++xx)
          dX.col((b * H + yy) * W + xx) += scale * dY.col(o);
    });
  });
}

template <class S>
S AvgPool2d<S>::divisor(Index y0, Index x0, Index H, Index W) const {
  if (m_countIncludePad) return static_cast<S>(m_win.taps());
  const Index h = std::min(y0 + m_win.kernelH, H) - std::max<Index>(y0, 0);
  const Index w = std::min(x0 + m_win.kernelW, W) - std::max<Index>(x0, 0);
  return static_cast<S>(h * w);
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class MaxPool2d<float>;
extern template class MaxPool2d<double>;
extern template class AvgPool2d<float>;
extern template class AvgPool2d<double>;
#endif

}  // namespace ddl
