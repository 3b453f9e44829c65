// Downstream smoke test of a user who links ddl::ddl alone: the operator from its ops header, built
// against Eigen and nothing else (the consumer project hides every optional package from CMake).
#include <cmath>
#include <cstdio>

#include <ddl/core/config.hpp>
#include <ddl/ops/delta_operator.hpp>

static_assert(DDL_WITH_MPI == 0 && DDL_WITH_ZLIB == 0, "ddl::ddl alone must not switch on MPI or zlib");

int main() {
  Eigen::VectorXd k = Eigen::VectorXd::Zero(3);
  k(1) = 1.0;
  Eigen::MatrixXd X = Eigen::MatrixXd::Ones(3, 2);
  Eigen::MatrixXd Y = ddl::deltaOperator(k, 1.0) * X;  // beta = 1: projection, row 1 erased
  const bool ok = std::abs(Y(1, 0)) < 1e-12 && std::abs(Y(0, 1) - 1.0) < 1e-12;
  std::printf("ddl %s core-only consumer: %s\n", ddl::versionString(), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
