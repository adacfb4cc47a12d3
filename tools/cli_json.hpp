// The --json output of the commands: one JSON document on stdout, its fields in the order they were
// set. Errors still go to stderr (main()), and then no document is printed.
#pragma once
#include <nlohmann/json.hpp>

namespace attnkit::cli {

using Json = nlohmann::ordered_json;

// `document` on stdout, indented by 2, with a newline at the end.
void print_json(const Json& document);

// `value`, or null when it is NaN or infinite (JSON has no such numbers).
Json finite_or_null(double value);

}  // namespace attnkit::cli
