// TEMPORARY placeholder until the CPU retention oracle lands; delete when src/cpu/retention_*.cpp exist.
#include "attnkit/error.hpp"
#include "cpu/cpu_backend.hpp"
namespace attnkit::cpu {
void retention_forward(const RetentionForward&, const RunOptions&) {
  throw Error(Status::internal, "CPU retention forward: not implemented yet");
}
void retention_backward(const RetentionBackward&, const RunOptions&) {
  throw Error(Status::internal, "CPU retention backward: not implemented yet");
}
}  // namespace attnkit::cpu
