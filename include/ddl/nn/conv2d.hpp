#pragma once
// ddl/nn/conv2d.hpp: 2-D convolution on pixels as columns (DESIGN.md §1), by im2col and GEMM.
//
//   X: (in, B*H*W), column (b*H + y)*W + x  ->  Y: (out, B*Ho*Wo), geometry in nn/window2d.hpp
//   Y(o, (b, oy, ox)) = bias(o) + Σ_{c,i,j} Wt[o, c, i, j] X(c, (b, oy*sh - ph + i, ox*sw - pw + j))
//   (zero outside the image; dilation 1, groups 1). weight: [out, in, kh, kw] as torch.nn.Conv2d,
//   held as (out, in*kh*kw) with column (c*kh + i)*kw + j; bias: [out], no weight decay.
//
// Patches: P: (K, n), K = kh*kw*in, holds for each output pixel its kh*kw input pixels' channel
// vectors one after the other (row (i*kw + j)*in + c), so building P copies whole channel columns.
// The products use the weight permuted to that order, Wp: (out, K) (rebuilt each forward, tiny):
//   forward:  Y = Wp P + b 1ᵀ
//   backward: dWp += dY Pᵀ,  db += dY 1,  dP = Wpᵀ dY,  dX = col2im(dP)  (scatter-add into pixels)
//
// Memory: the layer keeps a view of its input X (in × N, owned by the caller), not P (kh*kw times
// larger: 150 MB for 64 channels, 3×3, batch 64 at 32×32 in float). P is built in chunks of output
// columns that stay in cache, into a per-thread workspace, once in forward and again in backward;
// the rebuild is a copy, small next to the products. Every product goes through a GemmWorkspace
// (core/gemm.hpp) reserved before any parallel region, so a steady-state step allocates nothing and
// parallel regions neither allocate nor throw.
//
// Threads (OpenMP, above kConvParallelMin multiply-adds): forward splits the output columns evenly
// over the threads; backward splits the images (images share no pixels, so the col2im scatter has no
// races) and each thread sums its own dW and db, added up in thread order afterwards. With B smaller
// than the thread count, backward uses B threads.
#include <algorithm>
#include <string>
#include <vector>

#include "ddl/core/alias.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/gemm.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/core/view.hpp"
#include "ddl/nn/init.hpp"
#include "ddl/nn/window2d.hpp"

namespace ddl {

namespace detail {
// Multiply-adds below which a convolution stays on one thread.
inline constexpr Index kConvParallelMin = Index(1) << 20;
// Bytes of one patch chunk P: (K, n): with the packed operands it stays in a 1 MiB L2.
inline constexpr Index kConvChunkBytes = Index(192) << 10;
}  // namespace detail

template <class S>
class Conv2d {
 public:
  // in, out >= 1; a square kernel with the same stride and zero padding on both axes
  // (kernel 3, stride 1, padding 1 keeps H and W).
  Conv2d(Index in, Index out, Index kernel, Index stride = 1, Index padding = 0, bool bias = true)
      : Conv2d(in, out, Window2d::square(kernel, stride, padding), bias) {}

  // Any window: Window2d::make(kh, kw, sh, sw, ph, pw).
  Conv2d(Index in, Index out, const Window2d& window, bool bias = true)
      : m_in(in), m_out(out), m_win(Window2d::make(window.kernelH, window.kernelW, window.strideH, window.strideW,
                                                   window.padH, window.padW)),
        m_hasBias(bias) {
    require(in >= 1 && out >= 1, "ddl::Conv2d", "in and out channels must be >= 1, got in = ", in, ", out = ", out);
    m_W = Param<S>(std::vector<Index>{out, in, m_win.kernelH, m_win.kernelW}, /*withDecay=*/true);
    if (bias) m_b = Param<S>(std::vector<Index>{out}, /*withDecay=*/false);
    m_K = m_win.taps() * in;
    m_chunk = std::clamp<Index>(detail::kConvChunkBytes / (m_K * Index(sizeof(S))), 32, 4096);
  }

  // torch.nn.Conv2d's default with InitScheme::pytorchDefault(): weight and bias ~ U(±1/√fan_in),
  // fan_in = in*kh*kw (see init.hpp for the other schemes). Draw order: the (out, in*kh*kw) weight
  // matrix column by column, then the bias.
  void init(Rng& rng, const InitScheme& scheme = InitScheme::pytorchDefault()) {
    initLinearParams(m_W.value, m_hasBias ? &m_b.value : nullptr, rng, scheme);
  }

  // Layout of the output for an input image layout (ShapeError when the kernel does not fit).
  TokenLayout outputLayout(const TokenLayout& in) const { return m_win.outputLayout(in, "ddl::Conv2d"); }

  // X: (in, layout.tokens()) -> Y: (out, outputLayout(layout).tokens()); returns the output layout.
  // Keeps a view of X for backward (X must stay alive and unchanged until then). Y must not alias X.
  TokenLayout forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
    requireNoAlias("ddl::Conv2d::forward", "X", X, "Y", Y);
    const TokenLayout outL = prepareForward("ddl::Conv2d::forward", X, layout, Y);
    m_X.bind(X);  // a view: X must stay alive and unchanged until backward
    m_inLayout = layout;
    m_outLayout = outL;
    m_hasForward = true;
    runForward(X, layout, outL, Y);
    return outL;
  }

  // Same output as forward, caches nothing (inference); backward still refers to the last forward().
  TokenLayout forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
    requireNoAlias("ddl::Conv2d::forwardInference", "X", X, "Y", Y);
    const TokenLayout outL = prepareForward("ddl::Conv2d::forwardInference", X, layout, Y);
    runForward(X, layout, outL, Y);
    return outL;
  }

  // dY: (out, Ho*Wo*B) of the last forward -> dX: (in, B*H*W) overwritten; weight and bias
  // gradients accumulate (+=). dX must not alias dY.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) {
    checkBackward(dY);
    requireNoAlias("ddl::Conv2d::backward", "dY", dY, "dX", dX);
    dX.resize(m_in, m_inLayout.tokens());
    runBackward(dY, &dX);
  }

  // dY: (out, Ho*Wo*B): weight and bias gradients only (a first layer needs no input gradient).
  void backwardParamsOnly(const Eigen::Ref<const MatX<S>>& dY) {
    checkBackward(dY);
    runBackward(dY, nullptr);
  }

  // Parameters in a fixed order: "weight" [out, in, kh, kw], then "bias" [out] when present.
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    f(joinName(prefix, "weight"), m_W);
    if (m_hasBias) f(joinName(prefix, "bias"), m_b);
  }

  Param<S>& weight() { return m_W; }
  const Param<S>& weight() const { return m_W; }
  Param<S>& bias() {
    if (!m_hasBias) throw Error("ddl::Conv2d::bias: this layer was built without a bias");
    return m_b;
  }
  const Param<S>& bias() const { return const_cast<Conv2d*>(this)->bias(); }
  bool hasBias() const { return m_hasBias; }
  Index inChannels() const { return m_in; }
  Index outChannels() const { return m_out; }
  const Window2d& window() const { return m_win; }
  // Kernel, stride and padding of a square window (Error for a rectangular one: use window()).
  Index kernel() const { return squareOnly("kernel").kernelH; }
  Index stride() const { return squareOnly("stride").strideH; }
  Index padding() const { return squareOnly("padding").padH; }
  // Layouts of the last forward (what backward expects).
  const TokenLayout& lastInputLayout() const { return m_inLayout; }
  const TokenLayout& lastOutputLayout() const { return m_outLayout; }

 private:
  // Scratch of one thread: a patch chunk, its gradient, partial parameter gradients and the products'
  // workspaces, [0] for full chunks, [1] for the one shorter chunk at the end of the thread's range.
  struct Task {
    MatX<S> P, dP;       // (K, chunk)
    MatX<S> dWp;         // (out, K)
    VecX<S> db, dbRun;   // (out)
    GemmWorkspace<S> forward[2], weight[2], input[2];
  };

  const Window2d& squareOnly(const char* what) const {
    if (!m_win.isSquare())
      throw Error(message("ddl::Conv2d", what, "() needs a square window, this one has ", toString(m_win),
                          "; use window()"));
    return m_win;
  }

  TokenLayout prepareForward(const char* fn, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout,
                             MatX<S>& Y) {
    if (X.rows() != m_in || X.cols() != layout.tokens())
      throw ShapeError(message(fn, "X has shape ", shapeOf(X), ", expected (", m_in, ", ", layout.tokens(),
                               ") for the layout ", toString(layout)));
    const TokenLayout outL = m_win.outputLayout(layout, fn);
    Y.resize(m_out, outL.tokens());
    // Wp column (i*kw + j)*in + c is weight column (c*kh + i)*kw + j.
    m_Wp.resize(m_out, m_K);
    const Index taps = m_win.taps();
    for (Index c = 0; c < m_in; ++c)
      for (Index t = 0; t < taps; ++t) m_Wp.col(t * m_in + c) = m_W.value.col(c * taps + t);
    return outL;
  }

  void checkBackward(const Eigen::Ref<const MatX<S>>& dY) const {
    const char* fn = "ddl::Conv2d::backward";
    if (!m_hasForward) throw Error(message(fn, "called before forward"));
    if (dY.rows() != m_out || dY.cols() != m_outLayout.tokens())
      throw ShapeError(message(fn, "dY has shape ", shapeOf(dY), ", expected (", m_out, ", ", m_outLayout.tokens(),
                               ") for the output layout ", toString(m_outLayout), " of the last forward"));
  }

  // Allocates everything `tasks` threads need for column ranges of the given lengths; called before
  // any parallel region.
  template <class RangeLength>
  void reserveTasks(int tasks, RangeLength&& rangeLength, bool forwardProducts, bool inputProducts) {
    if (m_tasks.size() < static_cast<std::size_t>(tasks)) m_tasks.resize(static_cast<std::size_t>(tasks));
    for (int t = 0; t < tasks; ++t) {
      Task& task = m_tasks[static_cast<std::size_t>(t)];
      const Index len = rangeLength(t);
      const Index sizes[2] = {len >= m_chunk ? m_chunk : 0, len % m_chunk};
      if (task.P.rows() != m_K || task.P.cols() != m_chunk) task.P.resize(m_K, m_chunk);
      for (int s = 0; s < 2; ++s) {
        if (sizes[s] == 0) continue;
        if (forwardProducts) {
          task.forward[s].reserve(m_out, sizes[s], m_K);
        } else {
          task.weight[s].reserve(m_out, m_K, sizes[s]);
          if (inputProducts) task.input[s].reserve(m_K, sizes[s], m_out);
        }
      }
      if (forwardProducts) continue;
      task.dWp.resize(m_out, m_K);
      task.db.resize(m_out);
      task.dbRun.resize(m_out);
      if (inputProducts && (task.dP.rows() != m_K || task.dP.cols() != m_chunk)) task.dP.resize(m_K, m_chunk);
    }
  }

  void runForward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& inL, const TokenLayout& outL, MatX<S>& Y) {
    const Index No = outL.tokens();
    if (No == 0) return;
    const int tasks = detail::windowThreads(m_out * m_K * No, detail::kConvParallelMin, No);
    auto range = [&](int t) { return detail::windowPartBegin(No, t + 1, tasks) - detail::windowPartBegin(No, t, tasks); };
    reserveTasks(tasks, range, /*forwardProducts=*/true, false);
    detail::runWindowTasks(tasks, [&](int t) {
      Task& task = m_tasks[static_cast<std::size_t>(t)];
      const Index c1 = detail::windowPartBegin(No, t + 1, tasks);
      for (Index o = detail::windowPartBegin(No, t, tasks); o < c1; o += m_chunk) {
        const Index n = std::min(m_chunk, c1 - o);
        buildPatches(X.data(), X.outerStride(), inL, outL, o, n, task.P);
        auto Yc = Y.middleCols(o, n);
        task.forward[n == m_chunk ? 0 : 1].product(m_Wp, false, task.P.leftCols(n), false, Yc, S(1), false);
        if (m_hasBias) Yc.colwise() += m_b.value.col(0);
      }
    });
  }

  void runBackward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>* dX) {
    const TokenLayout& inL = m_inLayout;
    const TokenLayout& outL = m_outLayout;
    const Index B = inL.batch, perOut = outL.tokensPerSample(), perIn = inL.tokensPerSample();
    if (outL.tokens() == 0) return;
    const Index work = m_out * m_K * outL.tokens() * (dX ? 2 : 1);
    const int tasks = detail::windowThreads(work, detail::kConvParallelMin, B);
    auto range = [&](int t) {
      return (detail::windowPartBegin(B, t + 1, tasks) - detail::windowPartBegin(B, t, tasks)) * perOut;
    };
    reserveTasks(tasks, range, /*forwardProducts=*/false, dX != nullptr);
    detail::runWindowTasks(tasks, [&](int t) {
      Task& task = m_tasks[static_cast<std::size_t>(t)];
      const Index b0 = detail::windowPartBegin(B, t, tasks), b1 = detail::windowPartBegin(B, t + 1, tasks);
      if (dX) dX->middleCols(b0 * perIn, (b1 - b0) * perIn).setZero();
      task.dWp.setZero();
      task.db.setZero();
      const Index c1 = b1 * perOut;
      for (Index o = b0 * perOut; o < c1; o += m_chunk) {
        const Index n = std::min(m_chunk, c1 - o);
        const int s = n == m_chunk ? 0 : 1;
        const auto dYc = dY.middleCols(o, n);
        buildPatches(m_X.data(), m_X.outerStride(), inL, outL, o, n, task.P);
        task.weight[s].product(dYc, false, task.P.leftCols(n), true, task.dWp, S(1), true);
        if (m_hasBias) {
          // Sum per chunk, then across chunks: the error grows with the chunk, not with B*Ho*Wo.
          task.dbRun.setZero();
          for (Index j = 0; j < n; ++j) task.dbRun += dYc.col(j);
          task.db += task.dbRun;
        }
        if (dX) {
          task.input[s].product(m_Wp, true, dYc, false, task.dP.leftCols(n), S(1), false);
          scatterPatches(task.dP, inL, outL, o, n, dX->data());
        }
      }
    });
    const Index taps = m_win.taps();
    for (int t = 0; t < tasks; ++t) {
      const Task& task = m_tasks[static_cast<std::size_t>(t)];
      for (Index c = 0; c < m_in; ++c)
        for (Index k = 0; k < taps; ++k) m_W.grad.col(c * taps + k) += task.dWp.col(k * m_in + c);
      if (m_hasBias) m_b.grad.col(0) += task.db;
    }
  }

  using ConstStrided = Eigen::Map<const MatX<S>, 0, Eigen::OuterStride<>>;
  using Strided = Eigen::Map<MatX<S>, 0, Eigen::OuterStride<>>;

  // P.leftCols(n) = patches of output columns [o, o + n); src: the input (in, N) with column stride ld.
  void buildPatches(const S* src, Index ld, const TokenLayout& inL, const TokenLayout& outL, Index o, Index n,
                    MatX<S>& P) const {
    const Index C = m_in, H = inL.height, W = inL.width;
    detail::forEachRun(outL, o, o + n, [&](const detail::WindowRun& r) {
      const Index col = r.col - o;
      for (Index i = 0; i < m_win.kernelH; ++i)
        for (Index j = 0; j < m_win.kernelW; ++j) {
          const detail::TapSpan s = detail::tapSpan(m_win, inL, r, i, j);
          auto dst = P.block((i * m_win.kernelW + j) * C, col, C, r.n);
          if (s.lo > 0) dst.leftCols(s.lo).setZero();
          if (s.hi < r.n) dst.rightCols(r.n - s.hi).setZero();
          if (s.hi > s.lo) {
            const Index p0 = (r.b * H + s.y) * W + s.x0;
            dst.middleCols(s.lo, s.hi - s.lo) =
                ConstStrided(src + p0 * ld, C, s.hi - s.lo, Eigen::OuterStride<>(ld * m_win.strideW));
          }
        }
    });
  }

  // dX(:, pixels) += the patch gradients dP.leftCols(n) of output columns [o, o + n); dX: (in, N) contiguous.
  void scatterPatches(const MatX<S>& dP, const TokenLayout& inL, const TokenLayout& outL, Index o, Index n,
                      S* dX) const {
    const Index C = m_in, H = inL.height, W = inL.width;
    detail::forEachRun(outL, o, o + n, [&](const detail::WindowRun& r) {
      const Index col = r.col - o;
      for (Index i = 0; i < m_win.kernelH; ++i)
        for (Index j = 0; j < m_win.kernelW; ++j) {
          const detail::TapSpan s = detail::tapSpan(m_win, inL, r, i, j);
          if (s.hi <= s.lo) continue;
          const Index p0 = (r.b * H + s.y) * W + s.x0;
          Strided(dX + p0 * C, C, s.hi - s.lo, Eigen::OuterStride<>(C * m_win.strideW)) +=
              dP.block((i * m_win.kernelW + j) * C, col + s.lo, C, s.hi - s.lo);
        }
    });
  }

  Index m_in, m_out;
  Window2d m_win;
  bool m_hasBias;
  Index m_K = 0, m_chunk = 0;  // patch rows kh*kw*in, patch columns per chunk
  bool m_hasForward = false;
  Param<S> m_W, m_b;
  MatX<S> m_Wp;  // (out, K) weight in patch row order
  ConstView<S> m_X;  // (in, N) input of the last forward, owned by the caller
  TokenLayout m_inLayout, m_outLayout;
  std::vector<Task> m_tasks;
};

}  // namespace ddl
