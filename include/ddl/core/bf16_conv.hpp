#pragma once
// ddl/core/bf16_conv.hpp: the slot of a native bf16 convolution (docs/decisions.md, "bf16 convolutions").
//
// Under the bf16 policy (core/precision.hpp) Conv2d<float> (nn/layers/conv2d.hpp) hands each of its three
// passes whole to the kernel installed here, when one is: oneDNN's convolution (ddl/dnnl/convolution.hpp),
// one call per pass where ddl's own algorithms make one product per band and tap. The inputs are bf16 bits
// rounded by ddl (core/bf16.hpp), as for the products, so the kernel multiplies exactly the numbers the
// emulated products multiply; only the order of the float sums differs. Without a kernel (nullptr, the
// default) Conv2d runs its own algorithms on the policy's products.
#include <atomic>
#include <cstdint>

#include "ddl/core/types.hpp"

namespace ddl {

// A 2-D convolution's sizes: input (in, batch*height*width) -> output (out, batch*outHeight*outWidth), window
// kernelH × kernelW with strides and zero padding (dilation 1, groups 1; nn/layers/window2d.hpp).
struct ConvGeometry {
  Index batch = 0, in = 0, out = 0, height = 0, width = 0, outHeight = 0, outWidth = 0;
  Index kernelH = 1, kernelW = 1, strideH = 1, strideW = 1, padH = 0, padW = 0;
};

enum class ConvPass { Forward, BackwardData, BackwardWeights };

// One pass, every matrix dense and column-major, pixels as columns (column (b*H + y)*W + x):
//   X (in, batch*H*W), W (out, in*kh*kw) with column (c*kh + i)*kw + j (torch's [out, in, kh, kw]),
//   dY (out, batch*Ho*Wo), elements T; bias (out) and every output float.
//   Forward:         out = Y (out, batch*Ho*Wo) = conv(X, W) + bias (bias may be null), overwritten
//   BackwardData:    out = dX (in, batch*H*W), overwritten
//   BackwardWeights: out = dW (out, in*kh*kw), accumulated (+=)
template <class T>
struct ConvArgs {
  ConvGeometry g;
  ConvPass pass = ConvPass::Forward;
  const T* X = nullptr;
  const T* W = nullptr;
  const T* dY = nullptr;
  const float* bias = nullptr;
  float* out = nullptr;
};
using Bf16ConvArgs = ConvArgs<std::uint16_t>;
using Bf16ConvKernel = void (*)(const Bf16ConvArgs&);

namespace detail {
inline std::atomic<Bf16ConvKernel>& bf16ConvKernelSlot() {
  static std::atomic<Bf16ConvKernel> k{nullptr};
  return k;
}
}  // namespace detail

// The native bf16 convolution, or nullptr when Conv2d forms bf16 convolutions from the policy's products.
inline Bf16ConvKernel bf16ConvKernel() { return detail::bf16ConvKernelSlot().load(); }

// Installs one (nullptr: none); returns the previous one. ddl/dnnl/convolution.hpp calls it.
inline Bf16ConvKernel setBf16ConvKernel(Bf16ConvKernel k) { return detail::bf16ConvKernelSlot().exchange(k); }

}  // namespace ddl
