#pragma once
// --precision of the ddl programs: float | bf16 | bf16-emulated | auto (docs/using.md, "Precision").
//   float          every product in float (the default; bit for bit the runs of before)
//   bf16           the products' inputs rounded to bf16, float sums, on oneDNN's bf16 matmul; refused, with
//                  the reason, where this build has no oneDNN or the CPU has neither avx512_bf16 nor AMX
//   bf16-emulated  the same numerics on any CPU (the products widened back to float): slow, for checks
//   auto           bf16 where it runs natively, else float
// The policy is process-wide (core/precision.hpp); the programs record what ran in the checkpoint's
// metadata under "precision" (a checkpoint without it ran in float).
#include <string>

#include "cli.hpp"
#include "ddl/core/error.hpp"
#include "ddl/core/precision.hpp"
#if DDL_WITH_DNNL
#include "ddl/dnnl/bf16.hpp"
#endif

namespace ddl::example {

inline void declarePrecisionOption(cli::CommandLine& cli) {
  cli.option("precision", "P",
             "float | bf16 (products with bf16 inputs and float sums, on oneDNN where the CPU has avx512_bf16 or "
             "AMX) | bf16-emulated (the same numerics on any CPU, slowly) | auto (bf16 where native, else float)",
             "float");
}

// Why native bf16 products cannot run here, or "".
inline std::string nativeBf16Refusal() {
#if DDL_WITH_DNNL
  return dnnlBf16Refusal();
#else
  return "this build has no oneDNN (the CMake target ddl::dnnl; Debian: libdnnl-dev)";
#endif
}

// Sets the products' precision from --precision; returns what runs: "float", "bf16" or "bf16-emulated".
inline std::string applyPrecision(const cli::CommandLine& cli) {
  const std::string asked = cli.choice("precision", {"float", "bf16", "bf16-emulated", "auto"});
  if (asked == "float") {
    setProductPrecision(Precision::Float);
    return asked;
  }
  if (asked == "bf16-emulated") {
    setBf16Kernel(nullptr);
    setProductPrecision(Precision::BF16);
    return asked;
  }
  const std::string why = nativeBf16Refusal();
  if (!why.empty()) {
    if (asked == "bf16")
      throw ValueError("--precision bf16: " + why + " (--precision bf16-emulated gives its numerics on any CPU, slowly; "
                       "auto keeps float)");
    setProductPrecision(Precision::Float);
    return "float";
  }
#if DDL_WITH_DNNL
  installDnnlBf16();
#endif
  setProductPrecision(Precision::BF16);
  return "bf16";
}

}  // namespace ddl::example
