// The CUDA backend's entry points in a build without CUDA: each says how to get CUDA support.
#include "attnkit/error.hpp"
#include "cuda/cuda_backend.hpp"
#include "tune/backend_config_spaces.hpp"

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
detail::MadePlan<AttentionForward> make_attention_forward_plan(const AttentionForward&, const detail::AttentionShape&,
                                                               const RunOptions&) {
  not_built();
}
detail::MadePlan<AttentionBackward> make_attention_backward_plan(const AttentionBackward&,
                                                                 const detail::AttentionShape&, const RunOptions&) {
  not_built();
}
detail::MadePlan<RetentionForward> make_retention_forward_plan(const RetentionForward&, const RunOptions&) {
  not_built();
}
detail::MadePlan<RetentionBackward> make_retention_backward_plan(const RetentionBackward&, const RunOptions&) {
  not_built();
}
detail::MadePlan<GemmProblem> make_gemm_plan(const GemmProblem&, const RunOptions&) { not_built(); }

}  // namespace attnkit::cuda

namespace attnkit::tune {

// No CUDA kernels, so no CUDA config spaces: the tuner knows the CPU's only.
void register_cuda_config_spaces(ConfigSpaceRegistry&) {}

}  // namespace attnkit::tune
