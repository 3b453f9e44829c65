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
// Two algorithms (ConvAlgorithm), the same function up to rounding:
//
// Shifted products (stride 1; the default on narrow layers). A band of R output rows of one image is computed
// from a zero-padded copy of the R + kh - 1 input rows it reads, Xpad: (in, (R + kh - 1) * Wp),
// Wp = W + 2 pw. In the band's extended columns e = r*Wp + ox (r < R, ox < Wp; only ox < Wo are
// outputs, the others are discarded) tap (i, j) reads column e + i*Wp + j, so a tap is one product
// on a shifted column range of Xpad, with no patch matrix at all:
//   forward:  Yext = Σ_t Wp_t Xpad[:, off_t : off_t + L],  off_t = i*Wp + j,  L = (R-1)*Wp + Wo
//   backward: dYext = dY in extended columns (zero in the discarded ones)
//             dWp_t += dYext Xpad[:, off_t : off_t + L]ᵀ,   dXpad[:, off_t : off_t + L] += Wp_tᵀ dYext
//             dX(:, image rows of the band) += the interior of dXpad (bands of an image overlap by kh-1 rows)
// The copies per band are Xpad, Yext and dXpad, about 1× the band's pixels each, where patches copy
// kh*kw× (at 16 channels the patch copies cost as much as the products: bench/RESULTS.md).
//
// Patches (any stride). P: (K, n) holds for each output pixel its kh*kw input pixels' channel vectors
// one after the other (row (i*kw + j)*in + c), so building P copies whole channel columns:
//   forward:  Y = Wp P + b 1ᵀ
//   backward: dWp += dY Pᵀ,  db += dY 1,  dP = Wpᵀ dY,  dX = col2im(dP)  (scatter-add into pixels)
//
// Memory: the layer keeps a view of its input X (in × N, owned by the caller), never a padded copy or
// P (kh*kw times larger: 150 MB for 64 channels, 3×3, batch 64 at 32×32 in float). Both algorithms
// work in cache-sized pieces (bands, or chunks of output columns) in a per-thread scratch of about
// scratchBytes(), built once in forward and again in backward. Every product goes through a
// GemmWorkspace (core/gemm.hpp) reserved before any parallel region, so a steady-state step allocates
// nothing and parallel regions neither allocate nor throw.
//
// Threads (OpenMP, above kConvParallelMin multiply-adds): forward splits the bands (or the output
// columns) evenly over the threads; backward splits the images (images share no pixels, so the dX
// writes have no races) and each thread sums its own dW and db, added up in thread order afterwards.
// With B smaller than the thread count, backward uses B threads.
#include <algorithm>
#include <string>
#include <vector>

#include "ddl/core/alias.hpp"
#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/gemm.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/reduce.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/core/view.hpp"
#include "ddl/nn/layers/init.hpp"
#include "ddl/nn/layers/window2d.hpp"

namespace ddl {

namespace detail {
// Multiply-adds below which a convolution stays on one thread.
inline constexpr Index kConvParallelMin = Index(1) << 20;
// Default scratch per thread (a patch chunk, or a band's padded input, output and input gradient):
// with the packed operands it stays in a 1 MiB L2.
inline constexpr Index kConvScratchBytes = Index(192) << 10;
// ConvAlgorithm::Automatic takes shifted products for stride 1 up to this many input channels, on
// images whose padded pixels are at most kShiftedMaxPaddedTenths / 10 times the output pixels (the
// extended columns past the row ends are computed and discarded). Measured (bench_conv
// BM_Algorithms_Paired, bench/RESULTS.md): a train step by shifted products takes 0.82× the time by
// patches at 16 channels on 32×32, 0.89–0.93× on 8×8, 0.96× at 24 channels on 16×16, 1.0× at 32,
// and 1.05–1.5× from 48 channels up or on 4×4 images, where the products dominate and the k = in
// products of the taps run below the rate of one k = kh*kw*in product.
inline constexpr Index kShiftedMaxChannels = 32;
inline constexpr Index kShiftedMaxPaddedTenths = 16;
}  // namespace detail

// How Conv2d forms its products (see the top of this file). Automatic: ShiftedProducts for stride 1
// on narrow layers (Conv2d::effectiveAlgorithm), Patches otherwise.
enum class ConvAlgorithm { Automatic, Patches, ShiftedProducts };

inline const char* toString(ConvAlgorithm a) {
  switch (a) {
    case ConvAlgorithm::Automatic: return "automatic";
    case ConvAlgorithm::Patches: return "patches";
    default: return "shifted products";
  }
}

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
    setScratchBytes(detail::kConvScratchBytes);
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
  TokenLayout forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y);

  // Same output as forward, caches nothing (inference); backward still refers to the last forward().
  TokenLayout forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y);

  // dY: (out, Ho*Wo*B) of the last forward -> dX: (in, B*H*W) overwritten; weight and bias
  // gradients accumulate (+=). dX must not alias dY.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX);

  // dY: (out, Ho*Wo*B): weight and bias gradients only (a first layer needs no input gradient).
  void backwardParamsOnly(const Eigen::Ref<const MatX<S>>& dY);

  // Parameters in a fixed order: "weight" [out, in, kh, kw], then "bias" [out] when present.
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    f(joinName(prefix, "weight"), m_W);
    if (m_hasBias) f(joinName(prefix, "bias"), m_b);
  }

  Param<S>& weight() { return m_W; }
  const Param<S>& weight() const { return m_W; }
  Param<S>& bias();
  const Param<S>& bias() const { return const_cast<Conv2d*>(this)->bias(); }
  bool hasBias() const { return m_hasBias; }
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
  // The algorithm forward and backward run on an input layout: algorithm() with Automatic resolved.
  // Automatic takes shifted products where the patch copies outweigh the longer product chain (see
  // kShiftedMaxChannels), patches elsewhere.
  ConvAlgorithm effectiveAlgorithm(const TokenLayout& in) const;
  // Scratch per thread the layer sizes its pieces for (default 192 KiB, about a core's L2 share);
  // bytes >= 1. A piece is at least one output row (shifted products) or 32 columns (patches).
  void setScratchBytes(Index bytes);
  Index scratchBytes() const { return m_scratchBytes; }
  // Layouts of the last forward (what backward expects).
  const TokenLayout& lastInputLayout() const { return m_inLayout; }
  const TokenLayout& lastOutputLayout() const { return m_outLayout; }

 private:
  // Scratch of one thread: a patch chunk and its gradient or a band's padded input, extended output and
  // input gradient, partial parameter gradients and the products' workspaces, [0] for full chunks or
  // bands, [1] for the shorter chunk at the end of the thread's range or the shorter last band.
  struct Task {
    MatX<S> P, dP;       // patches: (K, chunk)
    MatX<S> Xpad, dXpad; // shifted products: (in, (R + kh - 1) * Wp)
    MatX<S> Yext;        // shifted products: (out, L), the band's output or its gradient
    MatX<S> dWp;         // (out, K)
    VecX<SumType<S>> db; // (out) the bias gradient's sum over this task's pixels, in double
    GemmWorkspace<S> forward[2], weight[2], input[2];
  };

  const Window2d& squareOnly(const char* what) const;

  TokenLayout prepareForward(const char* fn, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout,
                             MatX<S>& Y);

  void checkBackward(const Eigen::Ref<const MatX<S>>& dY) const;

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
      reserveGradients(task);
      if (inputProducts && (task.dP.rows() != m_K || task.dP.cols() != m_chunk)) task.dP.resize(m_K, m_chunk);
    }
  }

  void runForward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& inL, const TokenLayout& outL, MatX<S>& Y);

  void runBackward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>* dX);

  // ---- shifted products (stride 1)

  bool unitStride() const { return m_win.strideH == 1 && m_win.strideW == 1; }

  // Bands of one image: `rows` output rows each (the last one `lastRows`), padded row width Wp.
  struct Bands {
    Index Wp = 0, Ho = 0, Wo = 0, rows = 0, lastRows = 0, perImage = 0;
    Index rowsOf(Index band) const { return band + 1 < perImage ? rows : lastRows; }
    Index extended(Index r) const { return (r - 1) * Wp + Wo; }  // L of a band of r rows
    Index padded(Index r, Index kh) const { return (r + kh - 1) * Wp; }  // Xpad columns
  };

  Bands bandsFor(const TokenLayout& inL, const TokenLayout& outL) const;

  static void ensureShape(MatX<S>& M, Index rows, Index cols) {
    if (M.rows() != rows || M.cols() != cols) M.resize(rows, cols);
  }

  // Allocates everything `tasks` threads need for bands of g; called before any parallel region.
  void reserveShifted(int tasks, const Bands& g, bool backward, bool inputGradient);

  // Xpad.leftCols(g.padded(R, kh)) = input rows oy0 - ph .. oy0 + R + kh - 2 - ph of image b with
  // pw zero columns on each side, zero rows above and below the image; src: (in, N), column stride ld.
  void fillPaddedBand(const S* src, Index ld, const TokenLayout& inL, const Bands& g, Index b, Index oy0,
                      Index R, MatX<S>& Xpad) const;

  void runForwardShifted(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& inL, const TokenLayout& outL,
                         MatX<S>& Y);

  void runBackwardShifted(const Eigen::Ref<const MatX<S>>& dY, MatX<S>* dX);

  // ---- shared by both backwards

  void reserveGradients(Task& task) const;

  // A backward task over images [b0, b1): their dX columns zeroed (the task only adds into them), its
  // partial parameter gradients cleared.
  void beginBackwardTask(Index b0, Index b1, Index perIn, MatX<S>* dX, Task& task) const;

  // task.db += the column sum of dYpart (a chunk or a band), accumulated in double (core/reduce.hpp):
  // the rounding error does not grow with B*Ho*Wo.
  template <class Columns>
  void addBiasGradient(const Columns& dYpart, Task& task) const {
    if (m_hasBias) addRowSums(dYpart, task.db);
  }

  // Weight and bias gradients of the tasks, in task order, into the parameters (Wp order -> weight order).
  void addTaskGradients(int tasks);

  // ---- patches (any stride)

  void runForwardPatches(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& inL, const TokenLayout& outL,
                         MatX<S>& Y);

  void runBackwardPatches(const Eigen::Ref<const MatX<S>>& dY, MatX<S>* dX);

  using ConstStrided = Eigen::Map<const MatX<S>, 0, Eigen::OuterStride<>>;
  using Strided = Eigen::Map<MatX<S>, 0, Eigen::OuterStride<>>;

  // P.leftCols(n) = patches of output columns [o, o + n); src: the input (in, N) with column stride ld.
  void buildPatches(const S* src, Index ld, const TokenLayout& inL, const TokenLayout& outL, Index o, Index n,
                    MatX<S>& P) const;

  // dX(:, pixels) += the patch gradients dP.leftCols(n) of output columns [o, o + n); dX: (in, N) contiguous.
  void scatterPatches(const MatX<S>& dP, const TokenLayout& inL, const TokenLayout& outL, Index o, Index n,
                      S* dX) const;

  Index m_in, m_out;
  Window2d m_win;
  bool m_hasBias;
  Index m_K = 0, m_chunk = 0;  // patch rows kh*kw*in, patch columns per chunk
  Index m_scratchBytes = 0;
  ConvAlgorithm m_algorithm = ConvAlgorithm::Automatic;
  bool m_hasForward = false;
  Param<S> m_W, m_b;
  MatX<S> m_Wp;  // (out, K) weight in patch row order
  ConstView<S> m_X;  // (in, N) input of the last forward, owned by the caller
  TokenLayout m_inLayout, m_outLayout;
  std::vector<Task> m_tasks;
  VecX<SumType<S>> m_dbWide;  // (out) the tasks' bias sums added in task order
};

template <class S>
TokenLayout Conv2d<S>::forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
  requireNoAlias("ddl::Conv2d::forward", "X", X, "Y", Y);
  const TokenLayout outL = prepareForward("ddl::Conv2d::forward", X, layout, Y);
  m_X.bind(X);  // a view: X must stay alive and unchanged until backward
  m_inLayout = layout;
  m_outLayout = outL;
  m_hasForward = true;
  runForward(X, layout, outL, Y);
  return outL;
}

template <class S>
TokenLayout Conv2d<S>::forwardInference(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
  requireNoAlias("ddl::Conv2d::forwardInference", "X", X, "Y", Y);
  const TokenLayout outL = prepareForward("ddl::Conv2d::forwardInference", X, layout, Y);
  runForward(X, layout, outL, Y);
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
Param<S>& Conv2d<S>::bias() {
  if (!m_hasBias) throw Error("ddl::Conv2d::bias: this layer was built without a bias");
  return m_b;
}

template <class S>
void Conv2d<S>::setAlgorithm(ConvAlgorithm algorithm) {
  require(algorithm != ConvAlgorithm::ShiftedProducts || unitStride(), "ddl::Conv2d::setAlgorithm",
          "shifted products need stride 1, this layer has ", toString(m_win));
  m_algorithm = algorithm;
}

template <class S>
ConvAlgorithm Conv2d<S>::effectiveAlgorithm(const TokenLayout& in) const {
  if (m_algorithm != ConvAlgorithm::Automatic) return m_algorithm;
  if (!unitStride() || m_in > detail::kShiftedMaxChannels) return ConvAlgorithm::Patches;
  const TokenLayout out = m_win.outputLayout(in, "ddl::Conv2d::effectiveAlgorithm");
  const Index padded = (in.height + 2 * m_win.padH) * (in.width + 2 * m_win.padW);
  return 10 * padded <= detail::kShiftedMaxPaddedTenths * out.tokensPerSample() ? ConvAlgorithm::ShiftedProducts
                                                                                : ConvAlgorithm::Patches;
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
TokenLayout Conv2d<S>::prepareForward(const char* fn, const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout,
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

template <class S>
void Conv2d<S>::checkBackward(const Eigen::Ref<const MatX<S>>& dY) const {
  const char* fn = "ddl::Conv2d::backward";
  if (!m_hasForward) throw Error(message(fn, "called before forward"));
  if (dY.rows() != m_out || dY.cols() != m_outLayout.tokens())
    throw ShapeError(message(fn, "dY has shape ", shapeOf(dY), ", expected (", m_out, ", ", m_outLayout.tokens(),
                             ") for the output layout ", toString(m_outLayout), " of the last forward"));
}

template <class S>
void Conv2d<S>::runForward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& inL, const TokenLayout& outL,
                           MatX<S>& Y) {
  if (effectiveAlgorithm(inL) == ConvAlgorithm::ShiftedProducts)
    runForwardShifted(X, inL, outL, Y);
  else
    runForwardPatches(X, inL, outL, Y);
}

template <class S>
void Conv2d<S>::runBackward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>* dX) {
  if (effectiveAlgorithm(m_inLayout) == ConvAlgorithm::ShiftedProducts)
    runBackwardShifted(dY, dX);
  else
    runBackwardPatches(dY, dX);
}

template <class S>
typename Conv2d<S>::Bands Conv2d<S>::bandsFor(const TokenLayout& inL, const TokenLayout& outL) const {
  Bands g;
  g.Wp = inL.width + 2 * m_win.padW;
  g.Ho = outL.height;
  g.Wo = outL.width;
  // Per output row: Xpad and dXpad (in channels) and Yext (out channels), Wp columns each.
  const Index rowBytes = g.Wp * (2 * m_in + m_out) * Index(sizeof(S));
  g.rows = std::clamp<Index>(m_scratchBytes / rowBytes, 1, std::max<Index>(g.Ho, 1));
  g.perImage = g.Ho == 0 ? 0 : (g.Ho + g.rows - 1) / g.rows;
  g.lastRows = g.Ho - (g.perImage - 1) * g.rows;
  return g;
}

template <class S>
void Conv2d<S>::reserveShifted(int tasks, const Bands& g, bool backward, bool inputGradient) {
  if (m_tasks.size() < static_cast<std::size_t>(tasks)) m_tasks.resize(static_cast<std::size_t>(tasks));
  const Index kh = m_win.kernelH;
  const Index rows[2] = {g.rows, g.lastRows != g.rows ? g.lastRows : 0};
  for (int t = 0; t < tasks; ++t) {
    Task& task = m_tasks[static_cast<std::size_t>(t)];
    ensureShape(task.Xpad, m_in, g.padded(g.rows, kh));
    ensureShape(task.Yext, m_out, g.extended(g.rows));
    for (int s = 0; s < 2; ++s) {
      if (rows[s] == 0) continue;
      const Index L = g.extended(rows[s]);
      if (!backward) {
        task.forward[s].reserve(m_out, L, m_in);
      } else {
        task.weight[s].reserve(m_out, m_in, L);
        if (inputGradient) task.input[s].reserve(m_in, L, m_out);
      }
    }
    if (!backward) continue;
    reserveGradients(task);
    if (inputGradient) ensureShape(task.dXpad, m_in, g.padded(g.rows, kh));
  }
}

template <class S>
void Conv2d<S>::fillPaddedBand(const S* src, Index ld, const TokenLayout& inL, const Bands& g, Index b, Index oy0,
                               Index R, MatX<S>& Xpad) const {
  const Index H = inL.height, W = inL.width, pw = m_win.padW;
  for (Index pr = 0; pr < R + m_win.kernelH - 1; ++pr) {
    auto row = Xpad.middleCols(pr * g.Wp, g.Wp);
    const Index y = oy0 + pr - m_win.padH;
    if (y < 0 || y >= H) {
      row.setZero();
      continue;
    }
    if (pw > 0) {
      row.leftCols(pw).setZero();
      row.rightCols(pw).setZero();
    }
    row.middleCols(pw, W) = ConstStrided(src + (b * H + y) * W * ld, m_in, W, Eigen::OuterStride<>(ld));
  }
}

template <class S>
void Conv2d<S>::runForwardShifted(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& inL, const TokenLayout& outL,
                                  MatX<S>& Y) {
  if (outL.tokens() == 0) return;
  const Bands g = bandsFor(inL, outL);
  const Index units = inL.batch * g.perImage;
  const int tasks = detail::windowThreads(m_out * m_K * outL.tokens(), detail::kConvParallelMin, units);
  reserveShifted(tasks, g, /*backward=*/false, false);
  const Index taps = m_win.taps(), kw = m_win.kernelW;
  detail::runWindowTasks(tasks, [&](int t) {
    Task& task = m_tasks[static_cast<std::size_t>(t)];
    for (Index u = detail::windowPartBegin(units, t, tasks); u < detail::windowPartBegin(units, t + 1, tasks);
         ++u) {
      const Index b = u / g.perImage, band = u % g.perImage, oy0 = band * g.rows, R = g.rowsOf(band);
      const Index L = g.extended(R);
      const int s = R == g.rows ? 0 : 1;
      fillPaddedBand(X.data(), X.outerStride(), inL, g, b, oy0, R, task.Xpad);
      auto Yext = task.Yext.leftCols(L);
      for (Index tap = 0; tap < taps; ++tap) {
        const Index off = (tap / kw) * g.Wp + tap % kw;
        task.forward[s].product(m_Wp.middleCols(tap * m_in, m_in), false, task.Xpad.middleCols(off, L), false,
                                Yext, S(1), /*accumulate=*/tap > 0);
      }
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
  const Bands g = bandsFor(inL, outL);
  const Index B = inL.batch, H = inL.height, W = inL.width, perIn = inL.tokensPerSample();
  const Index taps = m_win.taps(), kh = m_win.kernelH, kw = m_win.kernelW;
  const Index work = m_out * m_K * outL.tokens() * (dX ? 2 : 1);
  const int tasks = detail::windowThreads(work, detail::kConvParallelMin, B);
  reserveShifted(tasks, g, /*backward=*/true, dX != nullptr);
  detail::runWindowTasks(tasks, [&](int t) {
    Task& task = m_tasks[static_cast<std::size_t>(t)];
    const Index b0 = detail::windowPartBegin(B, t, tasks), b1 = detail::windowPartBegin(B, t + 1, tasks);
    beginBackwardTask(b0, b1, perIn, dX, task);
    for (Index b = b0; b < b1; ++b)
      for (Index band = 0; band < g.perImage; ++band) {
        const Index oy0 = band * g.rows, R = g.rowsOf(band), L = g.extended(R);
        const int s = R == g.rows ? 0 : 1;
        const auto dYband = dY.middleCols((b * g.Ho + oy0) * g.Wo, R * g.Wo);
        fillPaddedBand(m_X.data(), m_X.outerStride(), inL, g, b, oy0, R, task.Xpad);
        auto dYext = task.Yext.leftCols(L);
        for (Index r = 0; r < R; ++r) {
          dYext.middleCols(r * g.Wp, g.Wo) = dYband.middleCols(r * g.Wo, g.Wo);
          if (r + 1 < R) dYext.middleCols(r * g.Wp + g.Wo, g.Wp - g.Wo).setZero();  // discarded columns
        }
        addBiasGradient(dYband, task);
        for (Index tap = 0; tap < taps; ++tap) {
          const Index off = (tap / kw) * g.Wp + tap % kw;
          task.weight[s].product(dYext, false, task.Xpad.middleCols(off, L), true,
                                 task.dWp.middleCols(tap * m_in, m_in), S(1), true);
        }
        if (!dX) continue;
        auto dXpad = task.dXpad.leftCols(g.padded(R, kh));
        dXpad.setZero();
        for (Index tap = 0; tap < taps; ++tap) {
          const Index off = (tap / kw) * g.Wp + tap % kw;
          task.input[s].product(m_Wp.middleCols(tap * m_in, m_in), true, dYext, false, dXpad.middleCols(off, L),
                                S(1), true);
        }
        for (Index pr = 0; pr < R + kh - 1; ++pr) {
          const Index y = oy0 + pr - m_win.padH;
          if (y < 0 || y >= H) continue;
          dX->middleCols((b * H + y) * W, W) += dXpad.middleCols(pr * g.Wp + m_win.padW, W);
        }
      }
  });
  addTaskGradients(tasks);
}

template <class S>
void Conv2d<S>::reserveGradients(Task& task) const {
  task.dWp.resize(m_out, m_K);
  task.db.resize(m_out);
}

template <class S>
void Conv2d<S>::beginBackwardTask(Index b0, Index b1, Index perIn, MatX<S>* dX, Task& task) const {
  if (dX) dX->middleCols(b0 * perIn, (b1 - b0) * perIn).setZero();
  task.dWp.setZero();
  task.db.setZero();
}

template <class S>
void Conv2d<S>::addTaskGradients(int tasks) {
  const Index taps = m_win.taps();
  if (m_hasBias) m_dbWide.setZero(m_out);
  for (int t = 0; t < tasks; ++t) {
    const Task& task = m_tasks[static_cast<std::size_t>(t)];
    for (Index c = 0; c < m_in; ++c)
      for (Index k = 0; k < taps; ++k) m_W.grad.col(c * taps + k) += task.dWp.col(k * m_in + c);
    if (m_hasBias) m_dbWide += task.db;
  }
  if (m_hasBias) m_b.grad.col(0) += m_dbWide.template cast<S>();  // one rounding to S
}

template <class S>
void Conv2d<S>::runForwardPatches(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& inL, const TokenLayout& outL,
                                  MatX<S>& Y) {
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

template <class S>
void Conv2d<S>::runBackwardPatches(const Eigen::Ref<const MatX<S>>& dY, MatX<S>* dX) {
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
    beginBackwardTask(b0, b1, perIn, dX, task);
    const Index c1 = b1 * perOut;
    for (Index o = b0 * perOut; o < c1; o += m_chunk) {
      const Index n = std::min(m_chunk, c1 - o);
      const int s = n == m_chunk ? 0 : 1;
      const auto dYc = dY.middleCols(o, n);
      buildPatches(m_X.data(), m_X.outerStride(), inL, outL, o, n, task.P);
      task.weight[s].product(dYc, false, task.P.leftCols(n), true, task.dWp, S(1), true);
      addBiasGradient(dYc, task);
      if (dX) {
        task.input[s].product(m_Wp, true, dYc, false, task.dP.leftCols(n), S(1), false);
        scatterPatches(task.dP, inL, outL, o, n, dX->data());
      }
    }
  });
  addTaskGradients(tasks);
}

template <class S>
void Conv2d<S>::buildPatches(const S* src, Index ld, const TokenLayout& inL, const TokenLayout& outL, Index o, Index n,
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

template <class S>
void Conv2d<S>::scatterPatches(const MatX<S>& dP, const TokenLayout& inL, const TokenLayout& outL, Index o, Index n,
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

#if DDL_EXTERN_LAYERS  // compiled once in the library ddl::compiled (docs/building.md)
extern template class Conv2d<float>;
extern template class Conv2d<double>;
#endif

}  // namespace ddl
