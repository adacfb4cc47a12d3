// The seam through which backends hand the tuner their config spaces (DESIGN §5: the tuner includes
// no kernel code). The tuner declares one function per backend; each backend defines its own beside
// its kernels and registers every space it has there: the CPU's in src/cpu/tune/cpu_config_spaces.cpp,
// the CUDA backend's in src/cuda/tune/cuda_config_spaces.cpp, and a build without CUDA defines the CUDA
// one as a no-op (src/core/cuda_unavailable.cpp). builtin_config_spaces() calls both. Calls, not
// self-registering static objects: a static library drops objects nothing references.
#pragma once
#include "tune/config_space_registry.hpp"

namespace attnkit::tune {

void register_cpu_config_spaces(ConfigSpaceRegistry& registry);
void register_cuda_config_spaces(ConfigSpaceRegistry& registry);

}  // namespace attnkit::tune
