#pragma once
// ddl/core/precision.hpp: the precision policy of the float products (docs/decisions.md, "bf16").
//
//   ddl::setProductPrecision(ddl::Precision::BF16);   // every GemmWorkspace<float> product from now on
//
// Precision::Float (the default) leaves every product as it is, bit for bit. Precision::BF16 makes the
// products of GemmWorkspace<float> (Linear, attention, the LM head, the convolutions' patches) take their
// inputs rounded to bf16 (core/bf16.hpp), with float sums and float outputs, forward and backward, as
// PyTorch's autocast does; everything else (weights, optimizer state, norms, softmax, gates, losses) stays
// float. Who runs a bf16 product is the bf16 kernel installed here: oneDNN's bf16 matmul when a program
// links ddl::dnnl and the CPU has it (ddl/dnnl/matmul.hpp), else none, and the products are emulated (the
// rounded inputs widened back to float and multiplied by the float kernel): the same numerics, slower.
// A float Conv2d under the policy hands each whole pass to the native bf16 convolution when one is
// installed (core/bf16_conv.hpp), with its inputs rounded the same way.
// The policy is process-wide, like the thread count: set it before products run on other threads.
#include <atomic>
#include <cstdint>
#include <string>

#include "ddl/core/error.hpp"
#include "ddl/core/types.hpp"

namespace ddl {

enum class Precision { Float, BF16 };

inline const char* precisionName(Precision p) { return p == Precision::BF16 ? "bf16" : "float"; }

// "float" or "bf16" (as precisionName writes them); anything else is an Error naming where.
inline Precision parsePrecision(const std::string& text, const char* where = "ddl::parsePrecision") {
  if (text == "float") return Precision::Float;
  if (text == "bf16") return Precision::BF16;
  throw Error(message(where, "precision must be float or bf16, got '", text, "'"));
}

// One product's operands: C (m, n) = alpha op(A) op(B), or C += alpha op(A) op(B) with accumulate; A and B
// are column-major with column strides lda, ldb and elements T; C is float, column stride ldc. The bf16
// kernel takes them as bf16 bits (core/bf16.hpp); oneDNN's products (dnnl/matmul.hpp) add the element type.
template <class T>
struct ProductArgs {
  Index m = 0, n = 0, k = 0;
  const T* A = nullptr;
  Index lda = 0;
  bool transA = false;
  const T* B = nullptr;
  Index ldb = 0;
  bool transB = false;
  float* C = nullptr;
  Index ldc = 0;
  float alpha = 1.0f;
  bool accumulate = false;
};
using Bf16ProductArgs = ProductArgs<std::uint16_t>;
using Bf16Kernel = void (*)(const Bf16ProductArgs&);

namespace detail {
inline std::atomic<int>& precisionSetting() {
  static std::atomic<int> p{static_cast<int>(Precision::Float)};
  return p;
}
inline std::atomic<Bf16Kernel>& bf16KernelSlot() {
  static std::atomic<Bf16Kernel> k{nullptr};
  return k;
}
}  // namespace detail

// The precision of GemmWorkspace<float>'s products now.
inline Precision productPrecision() { return static_cast<Precision>(detail::precisionSetting().load()); }

// Sets it; returns the previous one. GemmWorkspace<double> ignores it (double products check gradients).
inline Precision setProductPrecision(Precision p) {
  return static_cast<Precision>(detail::precisionSetting().exchange(static_cast<int>(p)));
}

// The native bf16 kernel, or nullptr when bf16 products are emulated.
inline Bf16Kernel bf16Kernel() { return detail::bf16KernelSlot().load(); }

// Installs a native bf16 kernel (nullptr: emulate); returns the previous one. ddl/dnnl/matmul.hpp calls it.
inline Bf16Kernel setBf16Kernel(Bf16Kernel k) { return detail::bf16KernelSlot().exchange(k); }

}  // namespace ddl
