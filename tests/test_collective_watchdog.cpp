// The collective watchdog (distributed/collective_watchdog.hpp): a call that waits past the timeout
// expires once; calls that return in time, idle time and time this process itself stood still
// (SIGSTOP ... SIGCONT) do not count.
#include <atomic>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "catch_compat.hpp"
#include "ddl/distributed/collective_watchdog.hpp"

namespace test_collective_watchdog {  // each test file in its own namespace: a group of files compiles as one unit

namespace {
using namespace std::chrono_literals;

struct Expiries {
  std::atomic<int> count{0};
  std::atomic<const char*> call{nullptr};
  ddl::CollectiveWatchdog::Expired action() {
    return [this](const char* c, double) {
      call = c;
      ++count;
    };
  }
};
}  // namespace

TEST_CASE("watchdog: a call waiting past the timeout expires once, naming the call", "[watchdog]") {
  Expiries seen;
  ddl::CollectiveWatchdog dog(0.3, seen.action(), 0.02);
  {
    const ddl::CollectiveWatchdog::Scope scope(&dog, "MPI_Alltoallv");
    std::this_thread::sleep_for(1000ms);
  }
  CHECK(seen.count == 1);
  REQUIRE(seen.call.load() != nullptr);
  CHECK(std::string(seen.call.load()) == "MPI_Alltoallv");
}

TEST_CASE("watchdog: many short calls and idle time never expire", "[watchdog]") {
  Expiries seen;
  ddl::CollectiveWatchdog dog(0.5, seen.action(), 0.02);
  for (int i = 0; i < 80; ++i) {  // 80 calls of 10 ms: 800 ms inside calls, none of them long
    const ddl::CollectiveWatchdog::Scope scope(&dog, "MPI_Allgather");
    std::this_thread::sleep_for(10ms);
  }
  std::this_thread::sleep_for(800ms);  // idle: outside any call
  const ddl::CollectiveWatchdog::Scope none(nullptr, "no watchdog");  // a null watchdog is a no-op
  CHECK(seen.count == 0);
}

TEST_CASE("watchdog: refuses a timeout or poll that is not positive, or no action", "[watchdog]") {
  const auto none = [](const char*, double) {};
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::Error>([&] { ddl::CollectiveWatchdog(0, none); }),
                           "ddl::CollectiveWatchdog: timeout 0 s"));
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::Error>([&] { ddl::CollectiveWatchdog(1, none, -1); }),
                           "must be > 0"));
  CHECK(ddl_test::contains(ddl_test::thrownMessage<ddl::Error>([] { ddl::CollectiveWatchdog(1, nullptr); }),
                           "expiry action"));
}

// A child process enters a call and, with `stop`, stops itself (SIGSTOP) there; the parent continues it
// after `stopped`; the child then stays in the call for `after`. Returns the child's exit status: 7 if
// its watchdog (timeout 1 s, poll 20 ms) expired, 0 if not.
static int stoppedChild(bool stop, std::chrono::milliseconds stopped, std::chrono::milliseconds after) {
  const pid_t child = fork();
  if (child == 0) {
    ddl::CollectiveWatchdog dog(1.0, [](const char*, double) { _exit(7); }, 0.02);
    {
      const ddl::CollectiveWatchdog::Scope scope(&dog, "MPI_Barrier");
      if (stop) raise(SIGSTOP);
      std::this_thread::sleep_for(after);
    }
    _exit(0);
  }
  REQUIRE(child > 0);
  int status = 0;
  if (stop) {
    REQUIRE(waitpid(child, &status, WUNTRACED) == child);  // the child has stopped itself
    REQUIRE(WIFSTOPPED(status));
    std::this_thread::sleep_for(stopped);
    kill(child, SIGCONT);
  }
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

TEST_CASE("watchdog: the time this process stood still (SIGSTOP, SIGCONT) is not a wait", "[watchdog]") {
  CHECK(stoppedChild(true, 2500ms, 300ms) == 0);  // stopped 2.5 s inside a call, 1 s timeout: no expiry
  CHECK(stoppedChild(false, 0ms, 2000ms) == 7);   // a child that waits 2 s in the call does expire
}

}  // namespace test_collective_watchdog
