// The CUDA backend's entry points in a build without CUDA: each says how to get CUDA support.
#include "attnkit/error.hpp"
#include "cuda/cuda_backend.hpp"

namespace attnkit::cuda {
namespace {
[[noreturn]] void not_built() {
  throw Error(Status::unsupported,
              "backend: this libattnkit was built without CUDA; rebuild with -DATTNKIT_WITH_CUDA=ON (needs nvcc "
              ">= 12.4) or run on CPU tensors");
}
}  // namespace

bool compiled() { return false; }
std::vector<DeviceInfo> devices() { return {}; }
std::string runtime_version() { return ""; }
std::string driver_version() { return ""; }
void attention_forward(const AttentionForward&, const detail::AttentionShape&, const RunOptions&) { not_built(); }
void attention_backward(const AttentionBackward&, const detail::AttentionShape&, const RunOptions&) { not_built(); }
int64_t attention_forward_workspace_size(const AttentionForward&, const detail::AttentionShape&, const RunOptions&) {
  not_built();
}
int64_t attention_backward_workspace_size(const AttentionBackward&, const detail::AttentionShape&, const RunOptions&) {
  not_built();
}
void retention_forward(const RetentionForward&, const RunOptions&) { not_built(); }
void retention_backward(const RetentionBackward&, const RunOptions&) { not_built(); }
void gemm(const GemmProblem&, const RunOptions&) { not_built(); }

}  // namespace attnkit::cuda
