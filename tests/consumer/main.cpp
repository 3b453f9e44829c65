// Downstream smoke test of a user who asks for optional parts: every component the project linked
// (DDL_EXPECT_<PART>=1) must have switched its part on, and the umbrella header must compile with them.
#include <cmath>
#include <cstdio>
#include <sstream>

#include <ddl/ddl.hpp>

#ifndef DDL_EXPECT_JSON
#define DDL_EXPECT_JSON 0
#endif
#ifndef DDL_EXPECT_OPENMP
#define DDL_EXPECT_OPENMP 0
#endif
#ifndef DDL_EXPECT_ZLIB
#define DDL_EXPECT_ZLIB 0
#endif
#ifndef DDL_EXPECT_MPI
#define DDL_EXPECT_MPI 0
#endif
static_assert(!DDL_EXPECT_JSON || DDL_WITH_JSON, "ddl::json did not switch on DDL_WITH_JSON");
static_assert(!DDL_EXPECT_OPENMP || DDL_WITH_OPENMP, "ddl::openmp did not switch on DDL_WITH_OPENMP");
static_assert(DDL_EXPECT_ZLIB == DDL_WITH_ZLIB, "DDL_WITH_ZLIB must follow ddl::zlib");
static_assert(DDL_EXPECT_MPI == DDL_WITH_MPI, "DDL_WITH_MPI must follow ddl::mpi");

int main() {
  Eigen::VectorXd k = Eigen::VectorXd::Zero(4);
  k(0) = 1.0;
  Eigen::MatrixXd X = Eigen::MatrixXd::Ones(4, 2);
  Eigen::MatrixXd Y = ddl::deltaOperator(k, 2.0) * X;  // Householder reflection flips row 0
  bool ok = std::abs(Y(0, 0) + 1.0) < 1e-12 && std::abs(Y(1, 1) - 1.0) < 1e-12;
#if DDL_EXPECT_JSON  // the safetensors writer (nlohmann-json) works
  ddl::SafetensorsWriter writer;
  writer.declare("x", ddl::DType::F64, {2});
  ok = ok && !writer.headerBytes().empty();
#endif
#if DDL_EXPECT_MPI  // the MPI communicator is declared (running it needs mpirun)
  ok = ok && sizeof(ddl::MpiCommunicator) > 0;
#endif
  std::printf("ddl %s consumer (json %d, openmp %d, zlib %d, mpi %d): %s\n", ddl::versionString(), DDL_WITH_JSON,
              DDL_WITH_OPENMP, DDL_WITH_ZLIB, DDL_WITH_MPI, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
