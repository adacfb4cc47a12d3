// TEMPORARY placeholder until the CPU attention oracle lands; delete when src/cpu/attention_*.cpp exist.
#include "attnkit/error.hpp"
#include "cpu/cpu_backend.hpp"
namespace attnkit::cpu {
void attention_forward(const AttentionForward&, const detail::AttentionShape&, const RunOptions&) {
  throw Error(Status::internal, "CPU attention forward: not implemented yet");
}
void attention_backward(const AttentionBackward&, const detail::AttentionShape&, const RunOptions&) {
  throw Error(Status::internal, "CPU attention backward: not implemented yet");
}
}  // namespace attnkit::cpu
