#pragma once
// ddl/train/progress.hpp: a per-epoch progress display for training loops.
//
// On a terminal it redraws one line in place:
//   epoch 3/12 [##########----------]  52% 244/469  loss 0.3121  acc 88.70%  9850/s  ETA 6s
// When the stream is not a terminal (piped to a file, CI logs) it prints plain lines instead, at
// most one every `plainInterval` seconds, so logs stay short and never contain '\r'.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#if defined(_WIN32)
#include <io.h>
#else
#include <unistd.h>
#endif

#include "ddl/core/types.hpp"

namespace ddl {

// True when stdout is an interactive terminal.
inline bool stdoutIsTerminal() {
#if defined(_WIN32)
  return _isatty(_fileno(stdout)) != 0;
#else
  return isatty(fileno(stdout)) != 0;
#endif
}

// "2m05s", "41s", "1h02m".
inline std::string formatDuration(double seconds) {
  if (!(seconds >= 0.0) || seconds > 1e7) return "?";
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

class ProgressBar {
 public:
  // out: where to draw; terminal: redraw in place (true) or plain lines (false).
  explicit ProgressBar(std::ostream& out = std::cout, bool terminal = stdoutIsTerminal(), double plainInterval = 10.0)
      : m_out(out), m_terminal(terminal), m_plainInterval(plainInterval) {}

  bool terminal() const { return m_terminal; }

  // Starts a new bar of `total` units (batches) labelled e.g. "epoch 3/12".
  void start(const std::string& label, Index total) {
    m_label = label;
    m_total = total;
    m_start = Clock::now();
    m_lastDraw = m_start;
    m_lastPlain = m_start;
    m_drawn = false;
  }

  // done of total units finished; loss and accuracy (fraction) so far; samplesPerSec throughput.
  void update(Index done, double loss, double accuracy, double samplesPerSec) {
    const auto now = Clock::now();
    const double sinceDraw = seconds(m_lastDraw, now);
    if (m_terminal) {
      if (m_drawn && sinceDraw < 0.1 && done < m_total) return;  // at most ~10 redraws a second
      m_out << '\r' << line(done, loss, accuracy, samplesPerSec, now) << "\x1b[K" << std::flush;
      m_drawn = true;
    } else {
      if (seconds(m_lastPlain, now) < m_plainInterval || done >= m_total) return;
      m_out << line(done, loss, accuracy, samplesPerSec, now) << '\n' << std::flush;
      m_lastPlain = now;
    }
    m_lastDraw = now;
  }

  // Ends the bar with a summary line (replacing the bar on a terminal).
  void finish(const std::string& summary) {
    if (m_terminal && m_drawn) m_out << '\r' << "\x1b[K";
    m_out << summary << '\n' << std::flush;
    m_drawn = false;
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  }

  std::string line(Index done, double loss, double accuracy, double samplesPerSec, Clock::time_point now) const {
    const double frac = m_total > 0 ? static_cast<double>(done) / static_cast<double>(m_total) : 1.0;
    const double elapsed = seconds(m_start, now);
    const double eta = done > 0 ? elapsed * static_cast<double>(m_total - done) / static_cast<double>(done) : -1.0;
    std::string s = m_label + " ";
    if (m_terminal) {
      const int width = 20, filled = static_cast<int>(frac * width + 0.5);
      s += "[" + std::string(static_cast<std::size_t>(filled), '#') +
           std::string(static_cast<std::size_t>(width - filled), '-') + "] ";
    }
    char buf[160];
    std::snprintf(buf, sizeof buf, "%3d%% %ld/%ld  loss %.4f  acc %.2f%%  %.0f/s  ETA %s",
                  static_cast<int>(frac * 100.0 + 0.5), static_cast<long>(done), static_cast<long>(m_total), loss,
                  accuracy * 100.0, samplesPerSec, formatDuration(eta).c_str());
    return s + buf;
  }

  std::ostream& m_out;
  bool m_terminal;
  double m_plainInterval;
  std::string m_label;
  Index m_total = 0;
  Clock::time_point m_start, m_lastDraw, m_lastPlain;
  bool m_drawn = false;
};

}  // namespace ddl
