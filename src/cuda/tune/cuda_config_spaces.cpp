// The CUDA backend's config spaces, handed to the tuner through its registration seam
// (tune/backend_config_spaces.hpp): the fused-attention forward and backward spaces of the kernels this
// build compiled, the GEMM registry's space and the chunkwise retention's forward and backward spaces (none
// of an op whose registry is empty).
#include "cuda/tune/fmha_config_space.hpp"
#include "cuda/tune/gemm_config_space.hpp"
#include "cuda/tune/retention_config_space.hpp"
#include "tune/backend_config_spaces.hpp"

namespace attnkit::tune {

void register_cuda_config_spaces(ConfigSpaceRegistry& registry) {
  cuda::fmha::register_fmha_spaces(registry);
  cuda::gemm::register_gemm_space(registry);
  cuda::retention::register_retention_spaces(registry);
}

}  // namespace attnkit::tune
