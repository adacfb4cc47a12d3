// How the C ABI reports failure: every C++ exception raised below an attnkit_* function is caught
// at that boundary and turned into an attnkit_status, and its message is kept per thread for
// attnkit_last_error(). A successful call clears the message, so "" always means "no error".
#pragma once
#include <exception>
#include <new>
#include <string>

#include "attnkit/attnkit.h"
#include "attnkit/error.hpp"

namespace attnkit::capi {

void clear_last_error() noexcept;
attnkit_status record_error(attnkit_status status, const char* message) noexcept;
const char* last_error_text() noexcept;

// Runs body; maps attnkit::Error to its status, std::bad_alloc to ATTNKIT_OUT_OF_MEMORY and any
// other exception to ATTNKIT_INTERNAL with its what().
template <class Body>
attnkit_status guarded_call(Body&& body) noexcept {
  try {
    body();
    clear_last_error();
    return ATTNKIT_OK;
  } catch (const Error& error) {
    return record_error(static_cast<attnkit_status>(error.status()), error.what());
  } catch (const std::bad_alloc&) {
    return record_error(ATTNKIT_OUT_OF_MEMORY, "out of host memory (std::bad_alloc)");
  } catch (const std::exception& error) {
    return record_error(ATTNKIT_INTERNAL, error.what());
  } catch (...) {
    return record_error(ATTNKIT_INTERNAL, "an unknown exception was raised inside libattnkit");
  }
}

}  // namespace attnkit::capi
