// The properties every fuzzed call must keep (fuzz/README.md):
//  1. no crash, no sanitizer report, no hang (the sanitizers and the driver's watchdog);
//  2. the status is ATTNKIT_OK with attnkit_last_error() == "", or an error status (never INTERNAL: an
//     exception that escaped validation) with a non-empty message;
//  3. a refused call wrote nothing: every buffer is bit-identical to its snapshot;
//  4. no call writes its inputs, and an accepted call writes no byte of an output outside its view;
//  5. an accepted call on finite inputs (and moderate scalars) leaves finite outputs: every element was
//     written (the poison is NaN) and none overflowed; only LSE-like outputs may hold -inf;
//  6. a descriptor whose span could not be laid out (negative, overflowing) is refused.
// A violation prints what was broken with the notes taken while the input was generated, and aborts, so
// libFuzzer and the standalone driver both keep the input.
#pragma once
#include <cstdint>
#include <string>

#include "attnkit/attnkit.h"
#include "fuzz_tensors.hpp"

namespace attnkit::fuzz {

// What the generator knows about one call.
struct Expectation {
  bool must_refuse = false;    // property 6
  bool finite_results = true;  // property 5 applies
};

// Notes about the input being run (op, shapes, corruptions), printed with a violation.
void clear_notes();
void note(const std::string& line);
const std::string& notes();

[[noreturn]] void violation(const std::string& what);

// A double in %.9g form (std::to_string prints 6 fixed decimals).
std::string number(double value);

// Calls checked and calls accepted so far (the driver's summary).
struct CallCounts {
  uint64_t checked = 0;
  uint64_t accepted = 0;
};
CallCounts& call_counts();

// Checks properties 2-6 for one call and returns whether the call was accepted.
bool check_call(const std::string& call, attnkit_status status, const TensorSet& tensors,
                const Expectation& expectation);

// Property 3 for a call that may succeed but takes no output among `tensors` (queries, plan creation).
void check_nothing_written(const std::string& call, const TensorSet& tensors);

// Property 2 alone, for calls without tensors.
bool check_status(const std::string& call, attnkit_status status);

}  // namespace attnkit::fuzz
