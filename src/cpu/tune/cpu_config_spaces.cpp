// The CPU backend's config spaces, handed to the tuner through its registration seam
// (tune/backend_config_spaces.hpp): one line per space the backend has.
#include "cpu/tune/cpu_attention_space.hpp"
#include "tune/backend_config_spaces.hpp"

namespace attnkit::tune {

void register_cpu_config_spaces(ConfigSpaceRegistry& registry) { register_cpu_attention_spaces(registry); }

}  // namespace attnkit::tune
