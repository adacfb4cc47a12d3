// What `attnkit run` reports. As text: lines on stdout as the run goes. With --json: the same facts
// gathered into one JSON document, printed on stdout when the run ends (its fields are listed in
// `attnkit run --help`). Progress is not a fact of the run: it goes to stderr (progress_reporter.hpp).
#pragma once
#include "cli_json.hpp"

namespace attnkit::cli {

class RunReport {
 public:
  explicit RunReport(bool json = false) : json_(json) {}

  bool json() const { return json_; }
  // A line on stdout (printf format, newline added) in text mode; nothing with --json.
  void line(const char* format, ...) __attribute__((format(printf, 2, 3)));
  Json& document() { return document_; }
  // With --json, the document on stdout; nothing in text mode.
  void print_document() const;

 private:
  bool json_;
  Json document_ = Json::object();
};

}  // namespace attnkit::cli
