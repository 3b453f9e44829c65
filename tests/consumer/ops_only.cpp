// Downstream smoke test of a user who needs the operator only: it includes the ops header alone and
// is built with nlohmann-json hidden from CMake, so it proves that the core and ops need Eigen alone.
#include <cmath>
#include <cstdio>

#include <ddl/ops/delta_operator.hpp>

int main() {
  Eigen::VectorXd k = Eigen::VectorXd::Zero(3);
  k(1) = 1.0;
  Eigen::MatrixXd X = Eigen::MatrixXd::Ones(3, 2);
  Eigen::MatrixXd Y = ddl::deltaOperator(k, 1.0) * X;  // beta = 1: projection, row 1 erased
  const bool ok = std::abs(Y(1, 0)) < 1e-12 && std::abs(Y(0, 1) - 1.0) < 1e-12;
  std::printf("ddl ops-only consumer: %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
