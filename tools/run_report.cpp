#include "run_report.hpp"

#include <cstdarg>
#include <cstdio>

namespace attnkit::cli {

void RunReport::line(const char* format, ...) {
  if (json_) return;
  va_list arguments;
  va_start(arguments, format);
  std::vprintf(format, arguments);
  va_end(arguments);
  std::printf("\n");
  std::fflush(stdout);  // in order with the progress lines on stderr when both go to one log
}

void RunReport::print_document() const {
  if (json_) print_json(document_);
}

}  // namespace attnkit::cli
