#include "capi/c_api_errors.hpp"

namespace attnkit::capi {
namespace {

thread_local std::string last_error;

// Used when even storing the message fails (no memory left for the string).
constexpr const char* kUnrecordable = "an error occurred but its message could not be stored (out of memory)";
thread_local bool last_error_unrecordable = false;

}  // namespace

void clear_last_error() noexcept {
  last_error.clear();
  last_error_unrecordable = false;
}

attnkit_status record_error(attnkit_status status, const char* message) noexcept {
  try {
    last_error = message;
    last_error_unrecordable = false;
  } catch (...) {
    last_error_unrecordable = true;
  }
  return status;
}

const char* last_error_text() noexcept { return last_error_unrecordable ? kUnrecordable : last_error.c_str(); }

}  // namespace attnkit::capi
