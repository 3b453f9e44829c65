#pragma once
// ddl/nn/layers/conv_native.hpp: Conv2d's passes (nn/layers/conv2d.hpp) on the installed native bf16
// convolution (core/bf16_conv.hpp), the bf16 policy's route for float layers when a program installed one
// (ddl/dnnl/bf16.hpp). Conv2d's own algorithms (nn/layers/conv_algorithm.hpp) cut a narrow layer into one
// small product per band and tap, a few thousand calls per step at 24 channels; the native convolution
// runs each pass in one call (docs/decisions.md, "bf16 convolutions").
//
// The operands are rounded to bf16 here, as the policy's products round theirs: X and dY into dense
// copies, the weight from the step's cache (core/bf16_weights.hpp) when it holds it. The bias gradient is
// ddl's own sum of dY in double, as on the other routes.
#include <cstdint>
#include <type_traits>

#include "ddl/core/alias.hpp"
#include "ddl/core/bf16.hpp"
#include "ddl/core/bf16_conv.hpp"
#include "ddl/core/bf16_copy.hpp"
#include "ddl/core/bf16_weights.hpp"
#include "ddl/core/precision.hpp"
#include "ddl/core/reduce.hpp"
#include "ddl/core/token_layout.hpp"
#include "ddl/core/types.hpp"
#include "ddl/core/view.hpp"
#include "ddl/nn/layers/window2d.hpp"

namespace ddl::detail {

// The native convolution that runs a Conv2d<S>'s passes now: the installed one under the bf16 policy for
// float layers, else nullptr (the layer forms its passes from products).
template <class S>
Bf16ConvKernel nativeConvKernel() {
  if constexpr (std::is_same_v<S, float>) {
    if (productPrecision() == Precision::BF16) return bf16ConvKernel();
  }
  return nullptr;
}

inline ConvGeometry convGeometry(const Window2d& w, Index in, Index out, const TokenLayout& inL,
                                 const TokenLayout& outL) {
  ConvGeometry g;
  g.batch = inL.batch, g.in = in, g.out = out, g.height = inL.height, g.width = inL.width;
  g.outHeight = outL.height, g.outWidth = outL.width;
  g.kernelH = w.kernelH, g.kernelW = w.kernelW, g.strideH = w.strideH, g.strideW = w.strideW;
  g.padH = w.padH, g.padW = w.padW;
  return g;
}

// The bf16 operands of one layer's passes (allocated on the first pass of a size, then reused).
class NativeConv {
 public:
  NativeConv() = default;
  // Scratch, not state: a copy starts empty (its layer's next backward converts X again).
  NativeConv(const NativeConv&) {}
  NativeConv& operator=(const NativeConv&) {
    m_xKept = nullptr;
    return *this;
  }

  // A Conv2d<S>'s forward on the native convolution, when nativeConvKernel<S>() gives one (else false: the
  // layer runs its own algorithms). X: (in, B*H*W), any column stride; W: (out, in*kh*kw); bias: (out) or
  // null -> Y: (out, B*Ho*Wo) dense. keep (a training forward): X's bits stay for backward, which reads them
  // instead of converting X again (X is unchanged until then: Conv2d's contract).
  template <class S>
  bool forward(const ConvGeometry& g, const Eigen::Ref<const MatX<S>>& X, const MatX<S>& W, const S* bias,
               MatX<S>& Y, bool keep) {
    if constexpr (std::is_same_v<S, float>) {
      if (const Bf16ConvKernel kernel = nativeConvKernel<S>()) {
        if (Y.size() > 0) runForward(kernel, g, X.data(), X.outerStride(), W, bias, Y, keep);
        return true;
      }
    }
    m_xKept = nullptr;  // another route ran: backward converts X again
    return false;
  }

  // The backward of the last forward on the native convolution, when there is one (else false). X, W: the
  // forward's; dY: (out, B*Ho*Wo) any column stride -> dX (in, B*H*W) dense, overwritten (null: not
  // wanted); dW += the weight gradient; db (null without a bias) += the row sums of dY.
  template <class S>
  bool backward(const ConvGeometry& g, const ConstView<S>& X, const MatX<S>& W, const Eigen::Ref<const MatX<S>>& dY,
                MatX<S>* dX, MatX<S>& dW, MatX<S>* db) {
    if constexpr (std::is_same_v<S, float>) {
      if (const Bf16ConvKernel kernel = nativeConvKernel<S>()) {
        if (dY.size() > 0)
          runBackward(kernel, g, X.data(), X.outerStride(), W, dY, dX, dW, db);
        else if (dX)
          dX->setZero();
        return true;
      }
    }
    return false;
  }

 private:
  void runForward(Bf16ConvKernel kernel, const ConvGeometry& g, const float* X, Index ldX, const MatX<float>& W,
                  const float* bias, MatX<float>& Y, bool keep) {
    Bf16ConvArgs a;
    a.g = g, a.pass = ConvPass::Forward, a.bias = bias, a.out = Y.data();
    a.X = bits(X, ldX, g.in, g.batch * g.height * g.width, keep ? m_x : m_inference);
    a.W = weightBits(W);
    kernel(a);
    m_xKept = keep ? X : nullptr;
  }
  void runBackward(Bf16ConvKernel kernel, const ConvGeometry& g, const float* X, Index ldX, const MatX<float>& W,
                   const Eigen::Ref<const MatX<float>>& dY, MatX<float>* dX, MatX<float>& dW, MatX<float>* db) {
    Bf16ConvArgs a;
    a.g = g;
    a.dY = bits(dY.data(), dY.outerStride(), dY.rows(), dY.cols(), m_dY);
    if (dX) {
      a.pass = ConvPass::BackwardData, a.W = weightBits(W), a.out = dX->data();
      kernel(a);
    }
    a.pass = ConvPass::BackwardWeights;
    a.X = X == m_xKept ? m_x.data() : bits(X, ldX, g.in, g.batch * g.height * g.width, m_x);
    a.out = dW.data();
    kernel(a);
    if (db) {
      m_db.setZero(dY.rows());
      addRowSums(dY, m_db);
      db->col(0) += m_db.cast<float>();
    }
  }

  static const std::uint16_t* bits(const float* data, Index ld, Index rows, Index cols, Bf16Buffer& buffer) {
    std::uint16_t* out = buffer.reserve(static_cast<std::size_t>(rows * cols));
    ddl::toBf16(data, ld, rows, cols, out);
    return out;
  }
  const std::uint16_t* weightBits(const MatX<float>& W) {
    if (const Bf16Weights* cache = activeBf16Weights().load(std::memory_order_relaxed))
      if (const std::uint16_t* cached = cache->find(W.data(), W.rows())) return cached;
    return bits(W.data(), W.rows(), W.rows(), W.cols(), m_w);
  }

  Bf16Buffer m_x, m_inference, m_w, m_dY;  // m_x: the training forward's X
  const float* m_xKept = nullptr;          // that X, or null when m_x holds none
  VecX<double> m_db;
};

}  // namespace ddl::detail
