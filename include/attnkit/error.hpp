// The one exception type of the C++ API. Its message names the argument, the value received and
// what is allowed; its status maps one-to-one onto the C ABI's attnkit_status.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include "attnkit/export.hpp"

namespace attnkit {

// Values match the C ABI's attnkit_status.
enum class Status : int32_t {
  ok = 0,
  invalid_argument = 1,  // a shape, stride, dtype, device or parameter is not allowed
  unsupported = 2,       // valid, but the chosen backend or build cannot run it
  cuda_error = 3,        // the CUDA runtime reported an error
  out_of_memory = 4,
  internal = 5,
};

class ATTNKIT_API Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

}  // namespace attnkit
