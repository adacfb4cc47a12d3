// Progress of the CLI's long work (the --check references, timing loops, offline tuning) on stderr,
// never on stdout, so stdout stays machine-readable. A line reads
//   attnkit: reference check (forward): 3/8 heads, 4.2 s elapsed, ~6.3 s left
// and, when the task ends,
//   attnkit: reference check (forward): 8/8 heads in 11.0 s
// When stderr is a terminal the line is redrawn in place (at most 10 times a second, first after
// 0.25 s) and left with its final state only when it was ever drawn; otherwise (a log, a pipe) a line
// is printed at most every 2 seconds and the final line always, so every log records how long each
// task took. --quiet turns it all off.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <optional>
#include <string>

namespace attnkit::cli {

struct ProgressOutput {
  bool enabled = true;    // false with --quiet
  bool terminal = false;  // stderr is a terminal: one line redrawn in place

  // Progress on this process's stderr, silent when `quiet`.
  static ProgressOutput to_stderr(bool quiet);
};

// "950 ms", "4.2 s", "3 min 07 s", "1 h 02 min".
std::string duration_text(double seconds);

// One task counted in steps. Every member may be called from any thread.
class ProgressReporter {
 public:
  // `task` e.g. "reference check (forward)", `unit` e.g. "heads".
  ProgressReporter(ProgressOutput output, std::string task, int64_t total, std::string unit);
  ~ProgressReporter();  // finish(), or when an exception unwinds it, only clears a terminal line
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  void advance(int64_t steps = 1);
  // `done` steps so far; `detail` is printed after the count; `seconds_left` replaces the estimate
  // made from the steps' pace (elapsed / done * steps left) when the caller knows better.
  void advance_to(int64_t done, const std::string& detail = "", std::optional<double> seconds_left = std::nullopt);
  // Prints the final line (see above); later calls do nothing.
  void finish();
  // On a terminal: erases the line, so that what the caller prints to stdout next starts on a clean
  // line; the next update draws it again.
  void clear_line();

 private:
  using Clock = std::chrono::steady_clock;
  void draw_when_due();                     // under mutex_
  std::string line_text(bool final) const;  // under mutex_
  void draw(bool final);                    // under mutex_
  void erase_drawn_line();                  // under mutex_

  const ProgressOutput output_;
  const std::string task_;
  const int64_t total_;
  const std::string unit_;
  const Clock::time_point start_ = Clock::now();
  const int uncaught_at_start_;  // a task cut short by an exception did not finish
  std::mutex mutex_;
  int64_t done_ = 0;
  std::string detail_;
  std::optional<double> seconds_left_;
  std::optional<Clock::time_point> last_drawn_;
  bool ever_drawn_ = false;
  std::size_t drawn_width_ = 0;  // characters of the line on the terminal now; 0 when none
  bool finished_ = false;
};

}  // namespace attnkit::cli
