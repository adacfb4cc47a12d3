// A mistake on the command line that CLI11 cannot see (e.g. "--tokens 64xx"). main() prints it as
// "attnkit: error: <message>" and exits 2, like errors reported by the library.
#pragma once
#include <stdexcept>
#include <string>

namespace attnkit::cli {

class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace attnkit::cli
