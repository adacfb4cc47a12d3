// The CUDA backend's config spaces, handed to the tuner through its registration seam
// (tune/backend_config_spaces.hpp): the fused-attention forward and backward spaces of the kernels
// this build compiled (none when the registries are empty).
#include "cuda/tune/fmha_config_space.hpp"
#include "tune/backend_config_spaces.hpp"

namespace attnkit::tune {

void register_cuda_config_spaces(ConfigSpaceRegistry& registry) { cuda::fmha::register_fmha_spaces(registry); }

}  // namespace attnkit::tune
