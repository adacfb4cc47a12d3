// Which backend runs a call, and on which stream.
#pragma once
#include <cstdint>
#include "attnkit/export.hpp"

namespace attnkit {

// Values match the C ABI's attnkit_backend.
enum class Backend : int32_t {
  automatic = 0,  // the tensors' device decides: CPU tensors -> cpu, CUDA tensors -> best CUDA tier
  cpu = 1,
  cuda = 2,
};

struct RunOptions {
  Backend backend = Backend::automatic;
  void* stream = nullptr;   // cudaStream_t for CUDA backends; nullptr = legacy default stream
  int32_t num_threads = 0;  // CPU backend: 0 = all available
  // Device scratch of at least attention_*_workspace_size() bytes (256-byte aligned); nullptr = the
  // library allocates stream-ordered when a kernel needs scratch.
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
  // true: this call never times kernel configs, whatever the tuner's mode (cached winners or the
  // default). The Python package sets it under torch.use_deterministic_algorithms(True).
  bool no_tuning = false;
};

ATTNKIT_API const char* backend_name(Backend backend);

}  // namespace attnkit
