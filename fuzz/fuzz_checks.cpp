#include "fuzz_checks.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace attnkit::fuzz {
namespace {

std::string& note_text() {
  static std::string text;
  return text;
}

bool status_known(attnkit_status status) { return status >= ATTNKIT_OK && status <= ATTNKIT_INTERNAL; }

// First byte index where the buffers differ among those `select` picks, or -1.
template <class Select>
int64_t first_change(const TensorSlot& slot, Select&& select) {
  for (std::size_t i = 0; i < slot.memory_bytes; ++i) {
    if (select(i) && slot.memory[i] != slot.before[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

void check_outputs_finite(const std::string& call, const TensorSlot& slot) {
  const int32_t dtype = slot.field->dtype;
  if (dtype == ATTNKIT_BOOL) return;
  const auto* base = static_cast<const unsigned char*>(slot.data());
  const auto element = static_cast<std::size_t>(dtype_bytes(dtype));
  for_each_element(*slot.field, [&](int64_t offset) {
    const double value = load_element(base + static_cast<std::size_t>(offset) * element, dtype);
    const bool allowed = std::isfinite(value) || (slot.lse_like && value == -INFINITY);
    if (!allowed) {
      violation(call + " accepted and left " + slot.name + " element at offset " + std::to_string(offset) + " = " +
                std::to_string(value) + " (finite inputs: every output element written and finite)");
    }
  });
}

}  // namespace

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", value);
  return text;
}

void clear_notes() { note_text().clear(); }
void note(const std::string& line) {
  note_text() += "  ";
  note_text() += line;
  note_text() += '\n';
}
const std::string& notes() { return note_text(); }

void violation(const std::string& what) {
  std::fprintf(stderr, "attnkit fuzz: property violated: %s\ninput:\n%s", what.c_str(), notes().c_str());
  std::fflush(stderr);
  std::abort();
}

CallCounts& call_counts() {
  static CallCounts counts;
  return counts;
}

bool check_status(const std::string& call, attnkit_status status) {
  ++call_counts().checked;
  if (!status_known(status)) violation(call + " returned status " + std::to_string(status) + ", not an attnkit_status");
  const char* message = attnkit_last_error();
  if (message == nullptr) violation(call + ": attnkit_last_error() returned NULL");
  if (status == ATTNKIT_OK) {
    if (*message != '\0') violation(call + " succeeded but attnkit_last_error() is '" + message + "'");
    ++call_counts().accepted;
    return true;
  }
  if (*message == '\0') violation(call + " returned " + attnkit_status_name(status) + " with an empty message");
  if (status == ATTNKIT_INTERNAL) {
    violation(call + " returned ATTNKIT_INTERNAL (an exception escaped validation): " + message);
  }
  note(call + " -> " + attnkit_status_name(status) + ": " + message);
  return false;
}

bool check_call(const std::string& call, attnkit_status status, const TensorSet& tensors,
                const Expectation& expectation) {
  const bool accepted = check_status(call, status);
  if (accepted && expectation.must_refuse) {
    for (const auto& slot : tensors.slots()) {
      if (slot.memory && !slot.fits && !slot.unread) {
        violation(call + " accepted " + slot.name +
                  " although its descriptor spans no memory that could exist (negative, overflowing or huge)");
      }
    }
  }
  for (const auto& slot : tensors.slots()) {
    if (!slot.memory) continue;
    const bool writable = accepted && slot.written_to();
    const int64_t changed = first_change(slot, [&](std::size_t i) { return !writable || slot.covered[i] == 0; });
    if (changed >= 0) {
      const char* why = !accepted           ? "a refused call wrote it"
                        : slot.written_to() ? "outside the output's view"
                                            : "an input was written";
      violation(call + ": byte " + std::to_string(changed - slot.misalign_bytes) + " of " + slot.name + " changed (" +
                why + ")");
    }
    if (writable && expectation.finite_results && tensors.inputs_finite()) check_outputs_finite(call, slot);
  }
  return accepted;
}

void check_nothing_written(const std::string& call, const TensorSet& tensors) {
  for (const auto& slot : tensors.slots()) {
    if (!slot.memory) continue;
    const int64_t changed = first_change(slot, [](std::size_t) { return true; });
    if (changed >= 0) {
      violation(call + ": byte " + std::to_string(changed - slot.misalign_bytes) + " of " + slot.name +
                " changed (this call reads no tensor or writes none)");
    }
  }
}

}  // namespace attnkit::fuzz
