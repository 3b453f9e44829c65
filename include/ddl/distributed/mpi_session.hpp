#pragma once
// ddl/distributed/mpi_session.hpp: MPI's start and end for a program (MPI_Init_thread ... MPI_Finalize), and
// the check of MPI's return codes that ddl's MPI calls share (distributed/mpi_communicator.hpp).
//
//   int main(int argc, char** argv) {
//     ddl::MpiSession mpi(&argc, &argv, 60);  // MPI_Init_thread (FUNNELED), both ends watched for 60 s
//     ...
//   }
// Needs MPI like mpi_communicator.hpp: link ddl::mpi, which defines DDL_WITH_MPI=1; without it this header
// stops with #error. The job's start and end are watched (docs/distributed.md): a rank that exits before it
// starts MPI leaves the others in MPI_Init, one stopped at the end leaves them in MPI_Finalize.
#include "ddl/core/config.hpp"

#if !DDL_WITH_MPI
#error "ddl/distributed/mpi_session.hpp needs MPI: link ddl::mpi (find_package(ddl COMPONENTS mpi); Debian: libopenmpi-dev), or compile with -DDDL_WITH_MPI=1 and MPI's flags"
#endif
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include <mpi.h>

#include "ddl/core/error.hpp"
#include "ddl/distributed/collective_watchdog.hpp"

namespace ddl {

namespace detail {
inline void checkMpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  throw Error(message("ddl::MpiCommunicator", call, " failed (error ", rc, "): ", std::string(text, len)));
}
}  // namespace detail


// MPI_Init_thread (FUNNELED) in the constructor, MPI_Finalize in finalize() or the destructor, unless MPI
// was already initialised by the caller (then the caller finalises it). A rank that exits before it starts
// MPI (or is stopped) leaves the others in MPI_Init, and a rank stopped at the end leaves them in
// MPI_Finalize, forever: with timeoutSeconds > 0 either call that waits that long says so on stderr and
// ends this process with `status` (MPI_Abort is not allowed there); mpirun then ends the job.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv, double timeoutSeconds = 0, int status = 1) {
    int initialized = 0;
    detail::checkMpi(MPI_Initialized(&initialized), "MPI_Initialized");
    if (initialized) return;
    int provided = 0;
    const std::unique_ptr<CollectiveWatchdog> dog = exitAfter(timeoutSeconds, status);
    const CollectiveWatchdog::Scope watched(dog.get(), "MPI_Init");
    detail::checkMpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    m_owner = true;
  }
  ~MpiSession() { finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // MPI_Finalize (once; nothing when the caller owns MPI), timed as the constructor's MPI_Init.
  void finalize(double timeoutSeconds = 0, int status = 1) {
    int finalized = 0;
    if (!m_owner || MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
    const std::unique_ptr<CollectiveWatchdog> dog = exitAfter(timeoutSeconds, status);
    const CollectiveWatchdog::Scope watched(dog.get(), "MPI_Finalize");
    MPI_Finalize();
  }

 private:
  static std::unique_ptr<CollectiveWatchdog> exitAfter(double seconds, int status) {
    if (!(seconds > 0)) return nullptr;
    return std::make_unique<CollectiveWatchdog>(seconds, [status](const char* call, double waited) {
      const bool init = std::string(call) == "MPI_Init";
      std::cerr << "ddl::MpiSession: " << call << " has waited " << static_cast<long long>(waited)
                << " s for the other ranks (a rank " << (init ? "exited before it started MPI, or is stopped or hung"
                                                              : "is stopped, hung or gone")
                << "); ending this process with status " << status << "\n"
                << std::flush;
      std::_Exit(status);
    });
  }

  bool m_owner = false;
};

}  // namespace ddl
