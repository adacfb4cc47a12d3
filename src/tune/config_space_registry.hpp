// The config spaces of every kernel in this build, looked up by (op, backend). The registry's
// fingerprint (kernel_set_hash) is part of the device key, so rebuilding a kernel set with other
// configs invalidates timings measured on the old one.
//
// Registration is explicit, not by static initialisers (which a static library would drop from the
// link): builtin_config_spaces() calls each backend's registration function, declared in
// backend_config_spaces.hpp and defined by the backend, so the tuner includes no kernel code.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tune/config_space.hpp"

namespace attnkit::tune {

class ConfigSpaceRegistry {
 public:
  // Throws Error(invalid_argument) for a second space of the same (op, backend), an empty space,
  // a missing estimate function, or duplicate config ids.
  void add(ConfigSpace space);
  const ConfigSpace* find(TuneOp op, Backend backend) const;
  std::vector<const ConfigSpace*> spaces(Backend backend) const;
  // 16 hex digits over the descriptions and configs of `backend`'s spaces, in (op) order.
  std::string kernel_set_hash(Backend backend) const;

 private:
  std::vector<std::unique_ptr<ConfigSpace>> spaces_;  // pointers stay valid as spaces are added
};

// The spaces of this build's kernels, registered once on first use.
const ConfigSpaceRegistry& builtin_config_spaces();

}  // namespace attnkit::tune
