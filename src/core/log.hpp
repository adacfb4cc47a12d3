// Library logging (DESIGN §4): ATTNKIT_LOG_LEVEL = error|warning|info|debug (default warning),
// ATTNKIT_LOG_FILE = a path, or stderr when unset. Thread-safe; each message is one line.
#pragma once
#include <string_view>

namespace attnkit::detail {

enum class LogLevel : int { error = 0, warning = 1, info = 2, debug = 3 };

bool log_enabled(LogLevel level);
void log_message(LogLevel level, std::string_view message);

}  // namespace attnkit::detail
