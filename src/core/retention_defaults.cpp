// Default per-head decay of RetNet retention (DESIGN §3): gamma_h = 1 - 2^(-5-h), so head 0 decays
// fastest (1 - 1/32) and later heads keep ever longer memories.
#include <cmath>
#include <cstdint>
#include <vector>

#include "attnkit/retention.hpp"

namespace attnkit {

std::vector<double> default_retention_gamma(int64_t heads) {
  std::vector<double> gamma(heads > 0 ? static_cast<std::size_t>(heads) : 0);
  for (std::size_t h = 0; h < gamma.size(); ++h) gamma[h] = 1.0 - std::ldexp(1.0, -5 - static_cast<int>(h));
  return gamma;
}

}  // namespace attnkit
