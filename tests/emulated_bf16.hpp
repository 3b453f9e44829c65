// ddl_test::emulatedBf16(f): runs f under the bf16 precision policy with the portable emulation (no native
// kernel: inputs rounded to bf16, float products and sums, core/precision.hpp), then restores the previous
// policy and kernel, also when f throws. Shared by the bf16 tests of the products and of the layers.
#pragma once

#include "ddl/core/precision.hpp"

namespace ddl_test {

template <class F>
void emulatedBf16(F&& f) {
  const ddl::Precision previous = ddl::setProductPrecision(ddl::Precision::BF16);
  const ddl::Bf16Kernel kernel = ddl::setBf16Kernel(nullptr);
  try {
    f();
  } catch (...) {
    ddl::setBf16Kernel(kernel);
    ddl::setProductPrecision(previous);
    throw;
  }
  ddl::setBf16Kernel(kernel);
  ddl::setProductPrecision(previous);
}

}  // namespace ddl_test
