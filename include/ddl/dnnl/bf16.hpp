#pragma once
// ddl/dnnl/bf16.hpp: oneDNN as the engine of the bf16 policy (core/precision.hpp): its matmul for the
// products (ddl/dnnl/matmul.hpp) and its convolution for Conv2d's passes (ddl/dnnl/convolution.hpp).
//
//   if (!ddl::installDnnlBf16()) std::cerr << ddl::dnnlBf16Refusal();   // float products stay, or emulation
#include "ddl/core/bf16_conv.hpp"
#include "ddl/core/precision.hpp"
#include "ddl/dnnl/convolution.hpp"
#include "ddl/dnnl/matmul.hpp"

namespace ddl {

// Installs oneDNN's bf16 matmul and convolution as the policy's kernels when dnnlBf16Refusal() is empty;
// returns whether it did (nothing is installed otherwise).
inline bool installDnnlBf16() {
  if (!dnnlBf16Refusal().empty()) return false;
  setBf16Kernel(&dnnlBf16Kernel);
  setBf16ConvKernel(&dnnlBf16ConvKernel);
  return true;
}

}  // namespace ddl
