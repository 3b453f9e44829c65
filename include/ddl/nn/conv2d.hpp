#pragma once
// ddl/nn/conv2d.hpp: 2-D convolution on pixels-as-columns (DESIGN.md §1), by im2col and one GEMM.
//
//   X: (in, B*H*W), column (b*H + y)*W + x  ->  Y: (out, B*H'*W'),  H' = (H + 2p - k)/s + 1 (same for W')
//   Y(o, (b, y', x')) = bias(o) + sum_{c, ky, kx} Wt[o, c, ky, kx] X(c, (b, y' s + ky - p, x' s + kx - p))
//   (zero outside the image). weight: [out, in, k, k] as PyTorch's Conv2d (held as (out, in*k*k),
//   row-major in that order), bias: [out], no decay.
// The patch matrix P: (k*k*in, B*H'*W') holds, for each output pixel, the k*k input pixels' channel
// vectors one after the other (row (ky*k + kx)*in + c), so building it copies contiguous columns.
// The GEMM uses the weight permuted to that row order (Wp: (out, k*k*in), rebuilt each forward, tiny).
//   forward:  Y = Wp P + b 1ᵀ               backward: dWp = dY Pᵀ, db = dY 1, dP = Wpᵀ dY, dX = col2im(dP)
// P is the one cache (backward needs it for dW). Threads: the images are cut into one range per
// OpenMP thread and each thread builds its patches, runs single-threaded GEMMs on its columns
// (core/gemm.hpp workspaces, as nn/linear.hpp does: Eigen's own threaded GEMM spins at shared panels
// and stalls when another process holds a core) and scatters its images' gradient (images never
// share pixels, so col2im has no races); dW is summed from per-thread parts in thread order.
#include <algorithm>
#include <string>
#include <vector>

#include "ddl/core/config.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/gemm.hpp"
#include "ddl/core/param.hpp"
#include "ddl/core/rng.hpp"
#include "ddl/core/threading.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/nn/init.hpp"

namespace ddl {

template <class S>
class Conv2d {
 public:
  // in, out, kernel, stride >= 1; padding >= 0 (kernel 3, padding 1, stride 1 keeps H and W).
  Conv2d(Index in, Index out, Index kernel, Index stride = 1, Index padding = 0, bool bias = true)
      : m_in(in), m_out(out), m_k(kernel), m_stride(stride), m_pad(padding), m_hasBias(bias) {
    const char* fn = "ddl::Conv2d";
    require(in >= 1 && out >= 1, fn, "in and out channels must be >= 1, got in = ", in, ", out = ", out);
    require(kernel >= 1 && stride >= 1 && padding >= 0, fn, "need kernel >= 1, stride >= 1, padding >= 0, got kernel = ",
            kernel, ", stride = ", stride, ", padding = ", padding);
    m_W = Param<S>(std::vector<Index>{out, in, kernel, kernel}, /*withDecay=*/true);
    if (bias) m_b = Param<S>(std::vector<Index>{out}, /*withDecay=*/false);
  }

  // torch.nn.Conv2d's default: weight and bias ~ U(+-1/sqrt(in*k*k)). Draw order: weight, bias.
  void init(Rng& rng, const InitScheme& scheme = InitScheme::pytorchDefault()) {
    initLinearParams(m_W.value, m_hasBias ? &m_b.value : nullptr, rng, scheme);
  }

  // Layout of the output for an input layout (ShapeError when the kernel does not fit).
  TokenLayout outputLayout(const TokenLayout& in) const {
    const Index h = (in.height + 2 * m_pad - m_k), w = (in.width + 2 * m_pad - m_k);
    if (h < 0 || w < 0 || in.length != 1)
      throw ShapeError(message("ddl::Conv2d", "kernel ", m_k, " with padding ", m_pad, " does not fit the layout ",
                               toString(in)));
    return TokenLayout::image(in.batch, h / m_stride + 1, w / m_stride + 1);
  }

  // X: (in, layout.tokens()) -> Y: (out, outputLayout(layout).tokens()). Caches the patches.
  void forward(const Eigen::Ref<const MatX<S>>& X, const TokenLayout& layout, MatX<S>& Y) {
    const char* fn = "ddl::Conv2d::forward";
    if (X.rows() != m_in || X.cols() != layout.tokens())
      throw ShapeError(message(fn, "X has shape ", shapeOf(X), ", expected (", m_in, ", ", layout.tokens(),
                               ") for the layout ", toString(layout)));
    m_inLayout = layout;
    m_outLayout = outputLayout(layout);
    permuteWeight();
    const Index B = layout.batch, per = m_outLayout.tokensPerSample();
    m_P.resize(m_k * m_k * m_in, m_outLayout.tokens());
    Y.resize(m_out, m_outLayout.tokens());
    forImageRanges([&](int t, Index b0, Index nb) {
      buildPatches(X, b0, nb);
      auto Yt = Y.middleCols(b0 * per, nb * per);
      m_gemmForward[static_cast<std::size_t>(t)].product(m_Wp, false, m_P.middleCols(b0 * per, nb * per), false, Yt,
                                                         S(1), false);
      if (m_hasBias) Yt.colwise() += m_b.value.col(0);
    }, B);
    m_hasForward = true;
  }

  // dY: (out, N') of the last forward -> dX: (in, N) overwritten; weight and bias gradients accumulate.
  void backward(const Eigen::Ref<const MatX<S>>& dY, MatX<S>& dX) { backwardImpl(dY, &dX); }

  // dY: (out, N'): weight and bias gradients only (a first layer needs no input gradient).
  void backwardParamsOnly(const Eigen::Ref<const MatX<S>>& dY) { backwardImpl(dY, nullptr); }

  // "weight" [out, in, k, k], then "bias" [out] when present.
  template <class F>
  void visitParams(const std::string& prefix, F&& f) {
    f(joinName(prefix, "weight"), m_W);
    if (m_hasBias) f(joinName(prefix, "bias"), m_b);
  }

  Param<S>& weight() { return m_W; }
  Param<S>& bias() {
    if (!m_hasBias) throw Error("ddl::Conv2d::bias: this layer was built without a bias");
    return m_b;
  }
  Index inChannels() const { return m_in; }
  Index outChannels() const { return m_out; }
  Index kernel() const { return m_k; }
  Index stride() const { return m_stride; }
  Index padding() const { return m_pad; }

 private:
  void permuteWeight() {
    const Index kk = m_k * m_k;
    m_Wp.resize(m_out, kk * m_in);
    for (Index c = 0; c < m_in; ++c)
      for (Index t = 0; t < kk; ++t) m_Wp.col(t * m_in + c) = m_W.value.col(c * kk + t);
  }

  void backwardImpl(const Eigen::Ref<const MatX<S>>& dY, MatX<S>* dX) {
    const char* fn = "ddl::Conv2d::backward";
    if (!m_hasForward) throw Error(message(fn, "called before forward"));
    checkShape(fn, "dY", dY, m_out, m_P.cols());
    const Index per = m_outLayout.tokensPerSample();
    if (dX) {
      dX->setZero(m_in, m_inLayout.tokens());
      m_dP.resize(m_P.rows(), m_P.cols());
    }
    const int used = forImageRanges([&](int t, Index b0, Index nb) {
      const auto cols = [&](const auto& M) { return M.middleCols(b0 * per, nb * per); };
      MatX<S>& part = m_dWpPart[static_cast<std::size_t>(t)];
      part.resize(m_out, m_P.rows());
      m_gemmWeight[static_cast<std::size_t>(t)].product(cols(dY), false, cols(m_P), true, part, S(1), false);
      if (dX) {
        auto dPt = m_dP.middleCols(b0 * per, nb * per);
        m_gemmInput[static_cast<std::size_t>(t)].product(m_Wp, true, cols(dY), false, dPt, S(1), false);
        scatterPatches(*dX, b0, nb);
      }
    }, m_inLayout.batch);
    // dWp column (ky*k + kx)*in + c is weight column (c*k + ky)*k + kx
    const Index kk = m_k * m_k;
    for (int t = 0; t < used; ++t) {
      const MatX<S>& part = m_dWpPart[static_cast<std::size_t>(t)];
      for (Index c = 0; c < m_in; ++c)
        for (Index q = 0; q < kk; ++q) m_W.grad.col(c * kk + q) += part.col(q * m_in + c);
    }
    if (m_hasBias) {
      auto db = m_b.grad.col(0);
      for (Index j = 0; j < dY.cols(); ++j) db += dY.col(j);
    }
  }

  // Cuts the B images into one contiguous range per thread and calls f(thread, firstImage, count) for
  // each non-empty range, in parallel when the product is large enough to repay a fork. Returns the
  // number of ranges (threads used); workspaces for them exist before the parallel region starts.
  template <class F>
  int forImageRanges(F&& f, Index B) {
    int threads = 1;
#if DDL_WITH_OPENMP
    const Index work = m_out * m_P.rows() * m_P.cols();
    if (work >= (Index(1) << 20) && !omp_in_parallel()) threads = omp_get_max_threads();
#endif
    threads = static_cast<int>(std::max<Index>(1, std::min<Index>(threads, B)));
    if (m_gemmForward.size() < static_cast<std::size_t>(threads)) {
      m_gemmForward.resize(static_cast<std::size_t>(threads));
      m_gemmWeight.resize(static_cast<std::size_t>(threads));
      m_gemmInput.resize(static_cast<std::size_t>(threads));
      m_dWpPart.resize(static_cast<std::size_t>(threads));
    }
    if (threads == 1) {
      f(0, Index(0), B);
      return 1;
    }
    DDL_OMP(parallel for schedule(static) num_threads(threads))
    for (int t = 0; t < threads; ++t) {
      const Index b0 = B * t / threads, b1 = B * (t + 1) / threads;
      f(t, b0, b1 - b0);
    }
    return threads;
  }

  // Patch columns of images [b0, b0 + nb).
  void buildPatches(const Eigen::Ref<const MatX<S>>& X, Index b0, Index nb) {
    const Index H = m_inLayout.height, W = m_inLayout.width, Ho = m_outLayout.height, Wo = m_outLayout.width;
    const Index C = m_in, k = m_k;
    for (Index b = b0; b < b0 + nb; ++b)
      for (Index oy = 0; oy < Ho; ++oy)
        for (Index ox = 0; ox < Wo; ++ox) {
          auto col = m_P.col((b * Ho + oy) * Wo + ox);
          for (Index ky = 0; ky < k; ++ky) {
            const Index y = oy * m_stride + ky - m_pad;
            for (Index kx = 0; kx < k; ++kx) {
              const Index x = ox * m_stride + kx - m_pad;
              auto seg = col.segment((ky * k + kx) * C, C);
              if (y < 0 || y >= H || x < 0 || x >= W)
                seg.setZero();
              else
                seg = X.col((b * H + y) * W + x);
            }
          }
        }
  }

  // dX += col2im(dP) for images [b0, b0 + nb).
  void scatterPatches(MatX<S>& dX, Index b0, Index nb) const {
    const Index H = m_inLayout.height, W = m_inLayout.width, Ho = m_outLayout.height, Wo = m_outLayout.width;
    const Index C = m_in, k = m_k;
    for (Index b = b0; b < b0 + nb; ++b)
      for (Index oy = 0; oy < Ho; ++oy)
        for (Index ox = 0; ox < Wo; ++ox) {
          const auto col = m_dP.col((b * Ho + oy) * Wo + ox);
          for (Index ky = 0; ky < k; ++ky) {
            const Index y = oy * m_stride + ky - m_pad;
            if (y < 0 || y >= H) continue;
            for (Index kx = 0; kx < k; ++kx) {
              const Index x = ox * m_stride + kx - m_pad;
              if (x < 0 || x >= W) continue;
              dX.col((b * H + y) * W + x) += col.segment((ky * k + kx) * C, C);
            }
          }
        }
  }

  Index m_in, m_out, m_k, m_stride, m_pad;
  bool m_hasBias;
  bool m_hasForward = false;
  Param<S> m_W, m_b;
  TokenLayout m_inLayout, m_outLayout;
  MatX<S> m_Wp;        // weight in patch row order (out, k*k*in)
  MatX<S> m_P, m_dP;   // patches of the last forward (k*k*in, N') and their gradient
  std::vector<MatX<S>> m_dWpPart;  // per thread: its images' part of dWp
  std::vector<GemmWorkspace<S>> m_gemmForward, m_gemmWeight, m_gemmInput;  // per thread
};

}  // namespace ddl
