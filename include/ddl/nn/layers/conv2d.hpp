#pragma once
// ddl/nn/layers/conv2d.hpp: 2-D convolution on pixels as columns (docs/architecture.md principle 1), by GEMMs.
//
//   X: (in, B*H*W), column (b*H + y)*W + x  ->  Y: (out, B*Ho*Wo), geometry in nn/layers/window2d.hpp
//   Y(o, (b, oy, ox)) = bias(o) + Σ_{c,i,j} Wt[o, c, i, j] X(c, (b, oy*sh - ph + i, ox*sw - pw + j))
//   (zero outside the image; dilation 1, groups 1). weight: [out, in, kh, kw] as torch.nn.Conv2d,
//   held as (out, in*kh*kw) with column (c*kh + i)*kw + j; bias: [out], no weight decay.
// The products use the weight permuted to tap-major order, Wp: (out, K), K = kh*kw*in, column
// (i*kw + j)*in + c (rebuilt each forward, tiny); Wp_t = Wp.middleCols(t*in, in) is tap t = i*kw + j.
//
// Two algorithms (ConvAlgorithm: shifted products, patches), described in nn/layers/conv_algorithm.hpp; under
// the bf16 policy with a native bf16 convolution installed, a float layer runs each pass in one call of it
// instead (nn/layers/conv_native.hpp).
//
// Memory: the layer keeps a view of its input X (in × N, owned by the caller), never a padded copy or
// P (kh*kw times larger: 150 MB for 64 channels, 3×3, batch 64 at 32×32 in float); its per-thread
// scratch is in nn/layers/conv_scratch.hpp.
//
// Threads (OpenMP, above kConvParallelMin multiply-adds): forward splits the bands (or the output
// columns) evenly over the threads; backward splits the images (images share no pixels, so the dX
// writes have no races) and each thread sums its own dW and db, added up in thread order afterwards.
// With B smaller than the thread count, backward uses B threads.
#include <algorithm>
#include <string>
#include <vector>

#include "ddl/core/alias.hpp"
#include "ddl/core/bf16_copy.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/reduce.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/core/view.hpp"
#include "ddl/nn/layers/conv_algorithm.hpp"
#include "ddl/nn/layers/conv_native.hpp"
#include "ddl/nn/layers/conv_patches.hpp"
#include "ddl/nn/layers/conv_scratch.hpp"
#include "ddl/nn/layers/forward_mode.hpp"
#include "ddl/nn/layers/init.hpp"
#include "ddl/nn/layers/weight_and_bias.hpp"
#include "ddl/nn/layers/window2d.hpp"

namespace ddl {

namespace detail {
// Multiply-adds below which a convolution stays on one thread.
inline constexpr Index kConvParallelMin = Index(1) << 20;
// Default scratch per thread (a patch chunk, or a band's padded input, output and input gradient):
// with the packed operands it stays in a 1 MiB L2.
inline constexpr Index kConvScratchBytes = Index(192) << 10;
}  // namespace detail

// Parameters (WeightAndBias): "weight" [out, in, kh, kw], then "bias" [out] when present. init with
// InitScheme::pytorchDefault() is torch.nn.Conv2d's default, weight and bias ~ U(±1/√fan_in) with
// fan_in = in*kh*kw; it draws the (out, in*kh*kw) weight matrix column by column, then the bias.
template <class S>
class Conv2d : public WeightAndBias<S> {
  using Base = WeightAndBias<S>;
  using Base::m_hasBias;
  using Base::m_W;
  using Base::m_b;

 public:
  // in, out >= 1; a square kernel with the same stride and zero padding on both axes
  // (kernel 3, stride 1, padding 1 keeps H and W).
  Conv2d(Index in, Index out, Index kernel, Index stride = 1, Index padding = 0, bool bias = true)
      : Conv2d(in, out, Window2d::square(kernel, stride, padding), bias) {}

  // Any window: Window2d::make(kh, kw, sh, sw, ph, pw).
  Conv2d(Index in, Index out, const Window2d& window, bool bias = true)
      : Base("ddl::Conv2d", bias), m_in(in), m_out(out),
        m_win(Window2d::make(window.kernelH, window.kernelW, window.strideH, window.strideW, window.padH, window.padW)),
        m_tasks(in, out, m_win.taps() * in) {
    require(in >= 1 && out >= 1, "ddl::Conv2d", "in and out channels must be >= 1, got in = ", in, ", out = ", out);
    m_W = Param<S>(std::vector<Index>{out, in, m_win.kernelH, m_win.kernelW}, /*withDecay=*/true);
    if (bias) m_b = Param<S>(std::vector<Index>{out}, /*withDecay=*/false);
    m_K = m_win.taps() * in;
    setScratchBytes(detail::kConvScratchBytes);
  }

  // Layout of the output for an input image layout (ShapeError when the kernel does not fit).
  TokenLayout outputLayout(const TokenLayout& in) const { return m_win.outputLayout(in, "ddl::Conv2d"); }

  // X: (in, layout.tokens()) -> Y: (out, outputLayout(layout).tokens()); returns the output layout.
  // Keeps a view of X for backward (X must stay alive and unchanged until then). Y must not alias X.
  TokenLayout forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
    return run("ddl::Conv2d::forward", X, layout, Y, ForwardMode::Train);
  }

  // Same output as forward, caches nothing (inference); backward still refers to the last forward().
  TokenLayout forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
    return run("ddl::Conv2d::forwardInference", X, layout, Y, ForwardMode::Inference);
  }

  // dY: (out, Ho*Wo*B) of the last forward -> dX: (in, B*H*W) overwritten; weight and bias
  // gradients accumulate (+=). dX must not alias dY.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX);

  // dY: (out, Ho*Wo*B): weight and bias gradients only (a first layer needs no input gradient).
  void backwardParamsOnly(const Eigen::Ref<const MatX<S>>& dY);

  Index inChannels() const { return m_in; }
  Index outChannels() const { return m_out; }
  const Window2d& window() const { return m_win; }
  // Kernel, stride and padding of a square window (Error for a rectangular one: use window()).
  Index kernel() const { return squareOnly("kernel").kernelH; }
  Index stride() const { return squareOnly("stride").strideH; }
  Index padding() const { return squareOnly("padding").padH; }
  // The algorithm of the next forward and backward; ShiftedProducts needs stride 1 on both axes
  // (ValueError otherwise). Both give the same results up to rounding; backward may use another
  // algorithm than its forward did.
  void setAlgorithm(ConvAlgorithm algorithm);
  ConvAlgorithm algorithm() const { return m_algorithm; }
  // The algorithm forward and backward run on an input layout: algorithm() with Automatic resolved
  // (resolveConvAlgorithm).
  ConvAlgorithm effectiveAlgorithm(const TokenLayout& in) const {
    return resolveConvAlgorithm("ddl::Conv2d::effectiveAlgorithm", m_algorithm, m_win, m_in, in);
  }
  // Scratch per thread the layer sizes its pieces for (default 192 KiB, about a core's L2 share);
  // bytes >= 1. A piece is at least one output row (shifted products) or 32 columns (patches).
  void setScratchBytes(Index bytes);
  Index scratchBytes() const { return m_scratchBytes; }
  // Layouts of the last forward (what backward expects).
  const TokenLayout& lastInputLayout() const { return m_inLayout; }
  const TokenLayout& lastOutputLayout() const { return m_outLayout; }

 private:
  using Task = typename detail::ConvScratch<S>::Task;
  using Bands = detail::ConvBands;

  const Window2d& squareOnly(const char* what) const;

  // The forward of both modes (fn names the public caller in errors): checks X, permutes the weight
  // into m_Wp and runs the products; Train also keeps the view of X and the layouts backward reads.
  TokenLayout run(const char* fn, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y,
                  ForwardMode mode);

  void checkBackward(const Eigen::Ref<const MatX<S>>& dY) const;
  void runBackward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>* dX);

  // Both backward algorithms cut the batch's images into backwardTasks(dX) parts, one per thread (dX
  // doubles the products); body(task, b0, b1, wpBits) runs on each task's thread for images [b0, b1) once
  // their dX columns and the task's partial gradients are cleared (wpBits: m_Wp bound to its bf16 copy).
  int backwardTasks(const MatX<S>* dX) const {
    const Index work = m_out * m_K * m_outLayout.tokens() * (dX ? 2 : 1);
    return detail::windowThreads(work, detail::kConvParallelMin, m_inLayout.batch);
  }
  template <class Body>
  void runBackwardTasks(int tasks, MatX<S>* dX, Body&& body) {
    const Index B = m_inLayout.batch, perIn = m_inLayout.tokensPerSample();
    detail::runWindowTasks(tasks, [&](int t) {
      Task& task = m_tasks[t];
      const Index b0 = detail::windowPartBegin(B, t, tasks), b1 = detail::windowPartBegin(B, t + 1, tasks);
      m_tasks.beginBackward(task, b0, b1, perIn, dX);
      body(task, b0, b1, m_tasks.shared(m_Wp, task.weightBits));
    });
  }

  bool unitStride() const { return m_win.strideH == 1 && m_win.strideW == 1; }

  // Shifted products (stride 1) and patches (any stride); dX null: parameter gradients only.
  void runForwardShifted(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& inL, const TokenLayout& outL,
                         MatX<S>& Y);
  void runBackwardShifted(const Eigen::Ref<const MatX<S>>& dY, MatX<S>* dX);

  // task.db += the column sum of dYpart (a chunk or a band), accumulated in double (core/reduce.hpp):
  // the rounding error does not grow with B*Ho*Wo.
  template <class Columns>
  void addBiasGradient(const Columns& dYpart, Task& task) const {
    if (m_hasBias) addRowSums(dYpart, task.db);
  }

  void runForwardPatches(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& inL, const TokenLayout& outL,
                         MatX<S>& Y);
  void runBackwardPatches(const Eigen::Ref<const MatX<S>>& dY, MatX<S>* dX);

  Index m_in, m_out;
  Window2d m_win;
  Index m_K = 0, m_chunk = 0;  // patch rows kh*kw*in, patch columns per chunk
  Index m_scratchBytes = 0;
  ConvAlgorithm m_algorithm = ConvAlgorithm::Automatic;
  bool m_hasForward = false;
  MatX<S> m_Wp;  // (out, K) weight in patch row order
  ConstView<S> m_X;  // (in, N) input of the last forward, owned by the caller
  TokenLayout m_inLayout, m_outLayout;
  detail::ConvScratch<S> m_tasks;  // per-thread scratch of the products
  detail::NativeConv m_native;     // bf16 operands of the native convolution
};

template <class S>
TokenLayout Conv2d<S>::run(const char* fn, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y,
                           ForwardMode mode) {
  requireNoAlias(fn, "X", X, "Y", Y);
  if (X.rows() != m_in || X.cols() != layout.tokens())
    throw ShapeError(message(fn, "X has shape ", shapeOf(X), ", expected (", m_in, ", ", layout.tokens(),
                             ") for the layout ", toString(layout)));
  const TokenLayout outL = m_win.outputLayout(layout, fn);
  Y.resize(m_out, outL.tokens());
  if (mode == ForwardMode::Train) {
    m_X.bind(X);  // a view: X must stay alive and unchanged until backward
    m_inLayout = layout;
    m_outLayout = outL;
    m_hasForward = true;
  }
  // Wp column (i*kw + j)*in + c is weight column (c*kh + i)*kw + j.
  m_Wp.resize(m_out, m_K);
  const Index taps = m_win.taps();
  for (Index c = 0; c < m_in; ++c)
    for (Index t = 0; t < taps; ++t) m_Wp.col(t * m_in + c) = m_W.value.col(c * taps + t);
  if (m_native.forward(detail::convGeometry(m_win, m_in, m_out, layout, outL), X, m_W.value,
                       m_hasBias ? m_b.value.data() : nullptr, Y, mode == ForwardMode::Train))
    return outL;
  if (effectiveAlgorithm(layout) == ConvAlgorithm::ShiftedProducts)
    runForwardShifted(X, layout, outL, Y);
  else
    runForwardPatches(X, layout, outL, Y);
  return outL;
}

template <class S>
void Conv2d<S>::backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) {
  checkBackward(dY);
  requireNoAlias("ddl::Conv2d::backward", "dY", dY, "dX", dX);
  dX.resize(m_in, m_inLayout.tokens());
  runBackward(dY, &dX);
}

template <class S>
void Conv2d<S>::backwardParamsOnly(const Eigen::Ref<const MatX<S>>& dY) {
  checkBackward(dY);
  runBackward(dY, nullptr);
}

template <class S>
void Conv2d<S>::setAlgorithm(ConvAlgorithm algorithm) {
  require(algorithm != ConvAlgorithm::ShiftedProducts || unitStride(), "ddl::Conv2d::setAlgorithm",
          "shifted products need stride 1, this layer has ", toString(m_win));
  m_algorithm = algorithm;
}

template <class S>
void Conv2d<S>::setScratchBytes(Index bytes) {
  require(bytes >= 1, "ddl::Conv2d::setScratchBytes", "need bytes >= 1, got ", bytes);
  m_scratchBytes = bytes;
  m_chunk = std::clamp<Index>(bytes / (m_K * Index(sizeof(S))), 32, 4096);
}

template <class S>
const Window2d& Conv2d<S>::squareOnly(const char* what) const {
  if (!m_win.isSquare())
    throw Error(message("ddl::Conv2d", what, "() needs a square window, this one has ", toString(m_win),
                        "; use window()"));
  return m_win;
}

template <class S>
void Conv2d<S>::checkBackward(const Eigen::Ref<const MatX<S>>& dY) const {
  const char* fn = "ddl::Conv2d::backward";
  if (!m_hasForward) throw Error(message(fn, "called before forward"));
  if (dY.rows() != m_out || dY.cols() != m_outLayout.tokens())
    throw ShapeError(message(fn, "dY has shape ", shapeOf(dY), ", expected (", m_out, ", ", m_outLayout.tokens(),
                             ") for the output layout ", toString(m_outLayout), " of the last forward"));
}

template <class S>
void Conv2d<S>::runBackward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>* dX) {
  if (m_native.backward(detail::convGeometry(m_win, m_in, m_out, m_inLayout, m_outLayout), m_X, m_W.value, dY, dX,
                        m_W.grad, m_hasBias ? &m_b.grad : nullptr))
    return;
  if (effectiveAlgorithm(m_inLayout) == ConvAlgorithm::ShiftedProducts)
    runBackwardShifted(dY, dX);
  else
    runBackwardPatches(dY, dX);
}

template <class S>
void Conv2d<S>::runForwardShifted(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& inL, const TokenLayout& outL,
                                  MatX<S>& Y) {
  if (outL.tokens() == 0) return;
  const Bands g = Bands::make(m_win, inL, outL, m_in, m_out, m_scratchBytes, Index(sizeof(S)));
  const Index units = inL.batch * g.perImage;
  const int tasks = detail::windowThreads(m_out * m_K * outL.tokens(), detail::kConvParallelMin, units);
  m_tasks.reserveBands(tasks, g, m_win.kernelH, /*backward=*/false, false);
  detail::runWindowTasks(tasks, [&](int t) {
    Task& task = m_tasks[t];
    Bf16Copy* wpBits = m_tasks.shared(m_Wp, task.weightBits);
    for (Index u = detail::windowPartBegin(units, t, tasks); u < detail::windowPartBegin(units, t + 1, tasks);
         ++u) {
      const Index b = u / g.perImage, band = u % g.perImage, oy0 = band * g.rows, R = g.rowsOf(band);
      const Index L = g.extended(R);
      const int s = R == g.rows ? 0 : 1;
      detail::fillPaddedBand(m_win, m_in, X.data(), X.outerStride(), inL, g, b, oy0, R, task.Xpad);
      // bf16: the taps' overlapping slices of the band are converted once (core/bf16_copy.hpp).
      const Bf16CopyScope bits(wpBits, m_tasks.shared(task.Xpad.leftCols(g.padded(R, m_win.kernelH)), task.inputBits));
      auto Yext = task.Yext.leftCols(L);
      g.forEachShift(m_win, [&](Index tap, Index off) {
        task.forward[s].product(m_Wp.middleCols(tap * m_in, m_in), false, task.Xpad.middleCols(off, L), false,
                                Yext, S(1), /*accumulate=*/tap > 0);
      });
      for (Index r = 0; r < R; ++r) {
        auto dst = Y.middleCols((b * g.Ho + oy0 + r) * g.Wo, g.Wo);
        dst = Yext.middleCols(r * g.Wp, g.Wo);
        if (m_hasBias) dst.colwise() += m_b.value.col(0);
      }
    }
  });
}

template <class S>
void Conv2d<S>::runBackwardShifted(const Eigen::Ref<const MatX<S>>& dY, MatX<S>* dX) {
  const TokenLayout& inL = m_inLayout;
  const TokenLayout& outL = m_outLayout;
  if (outL.tokens() == 0) return;
  const Bands g = Bands::make(m_win, inL, outL, m_in, m_out, m_scratchBytes, Index(sizeof(S)));
  const Index kh = m_win.kernelH;
  const int tasks = backwardTasks(dX);
  m_tasks.reserveBands(tasks, g, kh, /*backward=*/true, dX != nullptr);
  runBackwardTasks(tasks, dX, [&](Task& task, Index b0, Index b1, Bf16Copy* wpBits) {
    for (Index b = b0; b < b1; ++b)
      for (Index band = 0; band < g.perImage; ++band) {
        const Index oy0 = band * g.rows, R = g.rowsOf(band), L = g.extended(R);
        const int s = R == g.rows ? 0 : 1;
        const auto dYband = dY.middleCols((b * g.Ho + oy0) * g.Wo, R * g.Wo);
        detail::fillPaddedBand(m_win, m_in, m_X.data(), m_X.outerStride(), inL, g, b, oy0, R, task.Xpad);
        auto dYext = task.Yext.leftCols(L);
        for (Index r = 0; r < R; ++r) {
          dYext.middleCols(r * g.Wp, g.Wo) = dYband.middleCols(r * g.Wo, g.Wo);
          if (r + 1 < R) dYext.middleCols(r * g.Wp + g.Wo, g.Wp - g.Wo).setZero();  // discarded columns
        }
        addBiasGradient(dYband, task);
        const Bf16CopyScope bits(wpBits, m_tasks.shared(task.Xpad.leftCols(g.padded(R, kh)), task.inputBits),
                                 m_tasks.shared(dYext, task.outputBits));
        g.forEachShift(m_win, [&](Index tap, Index off) {
          task.weight[s].product(dYext, false, task.Xpad.middleCols(off, L), true,
                                 task.dWp.middleCols(tap * m_in, m_in), S(1), true);
        });
        if (!dX) continue;
        auto dXpad = task.dXpad.leftCols(g.padded(R, kh));
        dXpad.setZero();
        g.forEachShift(m_win, [&](Index tap, Index off) {
          task.input[s].product(m_Wp.middleCols(tap * m_in, m_in), true, dYext, false, dXpad.middleCols(off, L),
                                S(1), true);
        });
        detail::addPaddedBand(m_win, dXpad, inL, g, b, oy0, R, *dX);
      }
  });
  m_tasks.addGradients(tasks, m_win.taps(), m_W.grad, m_hasBias ? &m_b.grad : nullptr);
}

template <class S>
void Conv2d<S>::runForwardPatches(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& inL, const TokenLayout& outL,
                                  MatX<S>& Y) {
  const Index No = outL.tokens();
  if (No == 0) return;
  const int tasks = detail::windowThreads(m_out * m_K * No, detail::kConvParallelMin, No);
  auto range = [&](int t) { return detail::windowPartBegin(No, t + 1, tasks) - detail::windowPartBegin(No, t, tasks); };
  m_tasks.reservePatches(tasks, m_chunk, range, /*forwardProducts=*/true, false);
  detail::runWindowTasks(tasks, [&](int t) {
    Task& task = m_tasks[t];
    const Bf16CopyScope bits(m_tasks.shared(m_Wp, task.weightBits));
    const Index c1 = detail::windowPartBegin(No, t + 1, tasks);
    for (Index o = detail::windowPartBegin(No, t, tasks); o < c1; o += m_chunk) {
      const Index n = std::min(m_chunk, c1 - o);
      detail::buildPatches(m_win, m_in, X.data(), X.outerStride(), inL, outL, o, n, task.P);
      auto Yc = Y.middleCols(o, n);
      task.forward[n == m_chunk ? 0 : 1].product(m_Wp, false, task.P.leftCols(n), false, Yc, S(1), false);
      if (m_hasBias) Yc.colwise() += m_b.value.col(0);
    }
  });
}

template <class S>
void Conv2d<S>::runBackwardPatches(const Eigen::Ref<const MatX<S>>& dY, MatX<S>* dX) {
  const TokenLayout& inL = m_inLayout;
  const TokenLayout& outL = m_outLayout;
  const Index B = inL.batch, perOut = outL.tokensPerSample();
  if (outL.tokens() == 0) return;
  const int tasks = backwardTasks(dX);
  auto range = [&](int t) {
    return (detail::windowPartBegin(B, t + 1, tasks) - detail::windowPartBegin(B, t, tasks)) * perOut;
  };
  m_tasks.reservePatches(tasks, m_chunk, range, /*forwardProducts=*/false, dX != nullptr);
  runBackwardTasks(tasks, dX, [&](Task& task, Index b0, Index b1, Bf16Copy* wpBits) {
    const Index c1 = b1 * perOut;
    for (Index o = b0 * perOut; o < c1; o += m_chunk) {
      const Index n = std::min(m_chunk, c1 - o);
      const int s = n == m_chunk ? 0 : 1;
      const auto dYc = dY.middleCols(o, n);
      detail::buildPatches(m_win, m_in, m_X.data(), m_X.outerStride(), inL, outL, o, n, task.P);
      const Bf16CopyScope bits(wpBits, dX ? m_tasks.shared(dYc, task.outputBits) : nullptr);
      task.weight[s].product(dYc, false, task.P.leftCols(n), true, task.dWp, S(1), true);
      addBiasGradient(dYc, task);
      if (dX) {
        task.input[s].product(m_Wp, true, dYc, false, task.dP.leftCols(n), S(1), false);
        detail::scatterPatches(m_win, m_in, task.dP, inL, outL, o, n, dX->data());
      }
    }
  });
  m_tasks.addGradients(tasks, m_win.taps(), m_W.grad, m_hasBias ? &m_b.grad : nullptr);
}

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class Conv2d<float>;
extern template class Conv2d<double>;
#endif

}  // namespace ddl
