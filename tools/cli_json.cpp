#include "cli_json.hpp"

#include <cmath>
#include <cstdio>

namespace attnkit::cli {

void print_json(const Json& document) {
  const std::string text = document.dump(2, ' ', false, Json::error_handler_t::replace);
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

Json finite_or_null(double value) { return std::isfinite(value) ? Json(value) : Json(nullptr); }

}  // namespace attnkit::cli
