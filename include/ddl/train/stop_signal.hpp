#pragma once
// ddl/train/stop_signal.hpp: SIGINT / SIGTERM as a request to stop training cleanly.
//
//   ddl::installStopSignalHandlers();                      // in main(), before training
//   trainer.shouldStop = [] { return ddl::stopSignal() != 0; };
//   trainer.run();                                         // finishes the step, checkpoints, returns
//   if (trainer.stopped()) return 128 + ddl::stopSignal(); // the program decides how to exit
//
// The handler only stores the signal number in a volatile sig_atomic_t (the one thing a handler may
// safely do). SA_RESETHAND restores the default action, so a second Ctrl-C ends the program at once
// if the clean stop takes too long; SA_RESTART resumes interrupted reads and writes. POSIX only.
#include <csignal>
#include <cstring>
#include <string>

#include <signal.h>

#include "ddl/core/error.hpp"

namespace ddl {
namespace detail {
inline volatile std::sig_atomic_t g_stopSignal = 0;
extern "C" inline void ddlRecordStopSignal(int sig) { g_stopSignal = sig; }
}  // namespace detail

// Installs the recording handler for SIGINT and SIGTERM. Throws Error when sigaction fails.
inline void installStopSignalHandlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = detail::ddlRecordStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  for (int sig : {SIGINT, SIGTERM})
    if (sigaction(sig, &sa, nullptr) != 0)
      throw Error("ddl::installStopSignalHandlers: sigaction(" + std::to_string(sig) + ") failed");
}

// The signal received since the handlers were installed (SIGINT, SIGTERM), or 0.
inline int stopSignal() { return static_cast<int>(detail::g_stopSignal); }

// "SIGINT", "SIGTERM" or "signal N".
inline std::string signalName(int sig) {
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(sig);
}

}  // namespace ddl
