// ddl::testing (testing/grad_check.hpp): relErr misses an error confined to a small entry,
// entryRelErr and FD_CHECK (tests/fd_check.hpp) catch it.
#include <cmath>

#include "catch_compat.hpp"
#include "ddl/testing/grad_check.hpp"
#include "fd_check.hpp"

namespace test_grad_check {  // each test file in its own namespace: a group of files compiles as one unit

using ddl::MatX;

TEST_CASE("entryRelErr catches a wrong small gradient entry that relErr hides", "[testing][grad]") {
  // loss = 1e6 x0^2 / 2 + 1e-3 x1 at x = (0.01, 1): gradient (1e4, 1e-3).
  MatX<double> x(2, 1);
  x << 0.01, 1.0;
  auto loss = [&] { return 5e5 * x(0) * x(0) + 1e-3 * x(1); };
  const MatX<double> num = ddl::testing::numericGrad(x, loss);
  MatX<double> right(2, 1), wrong(2, 1);
  right << 1e4, 1e-3;
  wrong << 1e4, 1.2e-3;  // the small entry 20 % off: a wrong backward
  CHECK(ddl::testing::relErr(right, num) < 1e-6);
  CHECK(ddl::testing::entryRelErr(right, num) < ddl_test::kFdEntryTol);
  CHECK(ddl::testing::relErr(wrong, num) < 1e-6);      // relErr: 2e-4 / 1e4 = 2e-8, the error hides
  CHECK(ddl::testing::entryRelErr(wrong, num) > 0.1);  // per entry: 2e-4 / max(1.2e-3, 1e-3)
  FD_CHECK(right, num);
}

TEST_CASE("entryRelErr floors tiny entries and checks shapes", "[testing][grad]") {
  MatX<double> a(1, 2), n(1, 2);
  a << 0.0, 1.0;
  n << 1e-9, 1.0;  // zero up to rounding: 1e-9 / floor 1e-3 = 1e-6
  CHECK(ddl::testing::entryRelErr(a, n) == Approx(1e-6).epsilon(1e-9));
  CHECK(ddl::testing::entryRelErr(a, n, 1e-12) == Approx(1.0));
  CHECK_THROWS_AS(ddl::testing::entryRelErr(a, MatX<double>(2, 1)), ddl::ShapeError);
}

}  // namespace test_grad_check
