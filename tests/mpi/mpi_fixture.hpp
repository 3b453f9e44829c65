#pragma once
// What every MPI test program shares: the world communicator its test cases talk through, and the
// main that runs Catch2 on every rank and makes every rank exit with the worst rank's result.
// Include it first: the program supplies its own main (CATCH_CONFIG_RUNNER).
#define CATCH_CONFIG_RUNNER
#include "catch_compat.hpp"
#include "ddl/distributed/mpi_communicator.hpp"

namespace ddl_test {

inline ddl::MpiCommunicator*& worldPointer() {
  static ddl::MpiCommunicator* world = nullptr;
  return world;
}

// The communicator of all ranks (set by runCatchOnEveryRank).
inline ddl::MpiCommunicator& world() { return *worldPointer(); }

// A test program's main: starts MPI, runs the test cases, returns 1 on every rank if any rank failed.
inline int runCatchOnEveryRank(int argc, char** argv) {
  ddl::MpiSession session(&argc, &argv);
  ddl::MpiCommunicator comm;
  worldPointer() = &comm;
  const int failed = Catch::Session().run(argc, argv);
  // every rank exits with the worst result
  double worst = failed > 0 ? 1.0 : 0.0;
  comm.allreduceSum(&worst, 1);
  worldPointer() = nullptr;
  return worst > 0 ? 1 : 0;
}

}  // namespace ddl_test
