#pragma once
// FD_CHECK(analytic, numeric): a backward against central differences, checked two ways.
//   relErr < 1e-6        the tensor as a whole (error relative to its largest entry)
//   entryRelErr < 1e-4   every entry on its own, with the absolute floor 1e-3, so a wrong small
//                        entry that relErr would hide behind a large one still fails
// The numeric gradient is evaluated once.
#include "catch_compat.hpp"
#include "ddl/core/types.hpp"
#include "ddl/testing/grad_check.hpp"

namespace ddl_test {
constexpr double kFdTensorTol = 1e-6;
constexpr double kFdEntryTol = 1e-4;
}  // namespace ddl_test

#define FD_CHECK(analytic, numeric)                                                      \
  do {                                                                                   \
    const ddl::MatX<double> fdNumeric_ = (numeric).template cast<double>();              \
    const ddl::MatX<double> fdAnalytic_ = (analytic).template cast<double>();            \
    CHECK(ddl::testing::relErr(fdAnalytic_, fdNumeric_) < ddl_test::kFdTensorTol);       \
    CHECK(ddl::testing::entryRelErr(fdAnalytic_, fdNumeric_) < ddl_test::kFdEntryTol);   \
  } while (0)
