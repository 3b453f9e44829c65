// Downstream smoke test: include the umbrella header, apply a Delta Operator, check the result.
#include <cmath>
#include <cstdio>

#include <ddl/ddl.hpp>

int main() {
  Eigen::VectorXd k = Eigen::VectorXd::Zero(4);
  k(0) = 1.0;
  Eigen::MatrixXd X = Eigen::MatrixXd::Ones(4, 2);
  Eigen::MatrixXd Y = ddl::deltaOperator(k, 2.0) * X;  // Householder reflection flips row 0
  const bool ok = std::abs(Y(0, 0) + 1.0) < 1e-12 && std::abs(Y(1, 1) - 1.0) < 1e-12;
  std::printf("ddl %s consumer: %s\n", ddl::versionString(), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
