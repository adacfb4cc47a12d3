#include "progress_reporter.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <utility>

namespace attnkit::cli {
namespace {

// A terminal line appears only for work that lasts, and is not redrawn faster than it can be read.
constexpr double kTerminalFirstDrawSeconds = 0.25;
constexpr double kTerminalRedrawSeconds = 0.1;
// A log gets a line at most this often, so long runs stay readable.
constexpr double kLogLineSeconds = 2.0;
constexpr std::size_t kFallbackColumns = 80;

std::size_t terminal_columns() {
  winsize size{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return kFallbackColumns;
}

}  // namespace

ProgressOutput ProgressOutput::to_stderr(bool quiet) { return ProgressOutput{!quiet, isatty(STDERR_FILENO) == 1}; }

std::string duration_text(double seconds) {
  char text[32];
  if (seconds < 1.0) {
    std::snprintf(text, sizeof(text), "%.0f ms", seconds * 1e3);
  } else if (seconds < 60.0) {
    std::snprintf(text, sizeof(text), "%.1f s", seconds);
  } else if (seconds < 3600.0) {
    const auto whole = static_cast<long long>(seconds);
    std::snprintf(text, sizeof(text), "%lld min %02lld s", whole / 60, whole % 60);
  } else {
    const auto minutes = static_cast<long long>(seconds / 60.0);
    std::snprintf(text, sizeof(text), "%lld h %02lld min", minutes / 60, minutes % 60);
  }
  return text;
}

ProgressReporter::ProgressReporter(ProgressOutput output, std::string task, int64_t total, std::string unit)
    : output_(output),
      task_(std::move(task)),
      total_(total),
      unit_(std::move(unit)),
      uncaught_at_start_(std::uncaught_exceptions()) {}

ProgressReporter::~ProgressReporter() {
  if (std::uncaught_exceptions() > uncaught_at_start_) {
    const std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
    erase_drawn_line();  // the error message that follows starts on a clean line
    return;
  }
  finish();
}

void ProgressReporter::advance(int64_t steps) {
  const std::lock_guard<std::mutex> lock(mutex_);
  done_ += steps;
  draw_when_due();
}

void ProgressReporter::advance_to(int64_t done, const std::string& detail, std::optional<double> seconds_left) {
  const std::lock_guard<std::mutex> lock(mutex_);
  done_ = done;
  detail_ = detail;
  seconds_left_ = seconds_left;
  draw_when_due();
}

void ProgressReporter::draw_when_due() {
  if (!output_.enabled || finished_ || done_ >= total_) return;  // the last step's line is finish()'s
  const Clock::time_point now = Clock::now();
  const double running = std::chrono::duration<double>(now - start_).count();
  const double since_drawn = last_drawn_ ? std::chrono::duration<double>(now - *last_drawn_).count() : running;
  const bool due = output_.terminal ? running >= kTerminalFirstDrawSeconds && since_drawn >= kTerminalRedrawSeconds
                                    : since_drawn >= kLogLineSeconds;
  if (due) draw(false);
}

void ProgressReporter::finish() {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return;
  finished_ = true;
  if (!output_.enabled) return;
  if (output_.terminal && !ever_drawn_) return;
  draw(true);
}

void ProgressReporter::clear_line() {
  const std::lock_guard<std::mutex> lock(mutex_);
  erase_drawn_line();
  last_drawn_.reset();
}

std::string ProgressReporter::line_text(bool final) const {
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  std::string text = "attnkit: " + task_ + ": " + std::to_string(done_) + "/" + std::to_string(total_) + " " + unit_;
  if (!detail_.empty()) text += ", " + detail_;
  if (final) return text + " in " + duration_text(elapsed);
  text += ", " + duration_text(elapsed) + " elapsed";
  std::optional<double> left = seconds_left_;
  if (!left && done_ > 0 && done_ < total_) {
    left = elapsed / static_cast<double>(done_) * static_cast<double>(total_ - done_);
  }
  if (left) text += ", ~" + duration_text(*left) + " left";
  return text;
}

void ProgressReporter::draw(bool final) {
  std::string text = line_text(final);
  last_drawn_ = Clock::now();
  ever_drawn_ = true;
  if (!output_.terminal) {
    std::fprintf(stderr, "%s\n", text.c_str());
    return;
  }
  // One column short of the width, so the cursor never wraps onto a new line.
  const std::size_t columns = terminal_columns();
  if (text.size() >= columns) text.resize(columns - 1);
  const std::size_t padding = drawn_width_ > text.size() ? drawn_width_ - text.size() : 0;
  std::fprintf(stderr, "\r%s%*s%s", text.c_str(), static_cast<int>(padding), "", final ? "\n" : "");
  drawn_width_ = final ? 0 : text.size();
  std::fflush(stderr);
}

void ProgressReporter::erase_drawn_line() {
  if (!output_.terminal || drawn_width_ == 0) return;
  std::fprintf(stderr, "\r%*s\r", static_cast<int>(drawn_width_), "");
  std::fflush(stderr);
  drawn_width_ = 0;
}

}  // namespace attnkit::cli
