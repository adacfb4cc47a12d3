// The *_init functions: zero the struct (so fields added in later ABI versions start at zero) and
// set the defaults the C++ API uses. A NULL pointer is ignored.
#include <cstring>

#include "attnkit/attnkit.h"

namespace {

void init_neighborhood(attnkit_attention_mask* mask) {
  for (auto& dim : mask->neighborhood) {
    dim.kernel_size = 1;
    dim.dilation = 1;
    dim.stride = 1;
  }
  mask->element_path = ATTNKIT_ELEMENT_PATH_AUTOMATIC;
}

constexpr int64_t kDefaultRetentionChunk = 64;

}  // namespace

extern "C" {

void attnkit_run_options_init(attnkit_run_options* options) {
  if (options == nullptr) {
    return;
  }
  std::memset(options, 0, sizeof(*options));
  options->backend = ATTNKIT_BACKEND_AUTO;
}

void attnkit_attention_forward_args_init(attnkit_attention_forward_args* args) {
  if (args == nullptr) {
    return;
  }
  std::memset(args, 0, sizeof(*args));
  args->mask.kind = ATTNKIT_MASK_NONE;
  args->mask.causal_alignment = ATTNKIT_CAUSAL_TOP_LEFT;
  init_neighborhood(&args->mask);
}

void attnkit_attention_backward_args_init(attnkit_attention_backward_args* args) {
  if (args == nullptr) {
    return;
  }
  std::memset(args, 0, sizeof(*args));
  args->mask.kind = ATTNKIT_MASK_NONE;
  args->mask.causal_alignment = ATTNKIT_CAUSAL_TOP_LEFT;
  init_neighborhood(&args->mask);
  args->kv_splits = 0;               // automatic
  args->split_workspace_limit = -1;  // the default bound
}

void attnkit_retention_forward_args_init(attnkit_retention_forward_args* args) {
  if (args == nullptr) {
    return;
  }
  std::memset(args, 0, sizeof(*args));
  args->mode = ATTNKIT_RETENTION_CHUNKWISE;
  args->chunk_size = kDefaultRetentionChunk;
}

void attnkit_retention_backward_args_init(attnkit_retention_backward_args* args) {
  if (args == nullptr) {
    return;
  }
  std::memset(args, 0, sizeof(*args));
  args->mode = ATTNKIT_RETENTION_CHUNKWISE;
  args->chunk_size = kDefaultRetentionChunk;
}

void attnkit_gemm_args_init(attnkit_gemm_args* args) {
  if (args == nullptr) {
    return;
  }
  std::memset(args, 0, sizeof(*args));
  args->alpha = 1.0;
  args->beta = 0.0;
}

}  // extern "C"
