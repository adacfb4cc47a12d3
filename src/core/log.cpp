#include "core/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace attnkit::detail {
namespace {

struct LogSink {
  LogLevel level = LogLevel::warning;
  std::FILE* file = stderr;
  std::mutex mutex;

  LogSink() {
    if (const char* env = std::getenv("ATTNKIT_LOG_LEVEL")) {
      const std::string value = env;
      if (value == "error")
        level = LogLevel::error;
      else if (value == "warning")
        level = LogLevel::warning;
      else if (value == "info")
        level = LogLevel::info;
      else if (value == "debug")
        level = LogLevel::debug;
      else
        std::fprintf(stderr,
                     "attnkit [warning] ATTNKIT_LOG_LEVEL='%s' is not one of error|warning|info|debug; using warning\n",
                     env);
    }
    if (const char* path = std::getenv("ATTNKIT_LOG_FILE"); path && *path && std::string(path) != "stderr") {
      if (std::FILE* f = std::fopen(path, "a"))
        file = f;
      else
        std::fprintf(stderr, "attnkit [warning] cannot open ATTNKIT_LOG_FILE='%s'; logging to stderr\n", path);
    }
  }
};

LogSink& sink() {
  static LogSink instance;
  return instance;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::error: return "error";
    case LogLevel::warning: return "warning";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
  }
  return "?";
}

}  // namespace

bool log_enabled(LogLevel level) { return static_cast<int>(level) <= static_cast<int>(sink().level); }

void log_message(LogLevel level, std::string_view message) {
  auto& s = sink();
  if (!log_enabled(level)) return;
  std::lock_guard lock(s.mutex);
  std::fprintf(s.file, "attnkit [%s] %.*s\n", level_name(level), static_cast<int>(message.size()), message.data());
  std::fflush(s.file);
}

}  // namespace attnkit::detail
