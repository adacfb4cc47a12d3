// The C ABI's operations: check the args pointer, convert to the C++ problem, call the C++ API,
// all inside guarded_call so no exception crosses the C boundary.
#include "attnkit/attention.hpp"
#include "attnkit/attnkit.h"
#include "attnkit/gemm.hpp"
#include "attnkit/retention.hpp"
#include "capi/c_api_convert.hpp"
#include "capi/c_api_errors.hpp"

using namespace attnkit::capi;

extern "C" {

attnkit_status attnkit_attention_forward(const attnkit_attention_forward_args* args,
                                         const attnkit_run_options* options) {
  return guarded_call([&] {
    require_args(args, "attnkit_attention_forward_args");
    attnkit::attention_forward(to_attention_forward(*args), to_run_options(options));
  });
}

attnkit_status attnkit_attention_backward(const attnkit_attention_backward_args* args,
                                          const attnkit_run_options* options) {
  return guarded_call([&] {
    require_args(args, "attnkit_attention_backward_args");
    attnkit::attention_backward(to_attention_backward(*args), to_run_options(options));
  });
}

attnkit_status attnkit_attention_forward_workspace_size(const attnkit_attention_forward_args* args,
                                                        const attnkit_run_options* options, int64_t* bytes) {
  return guarded_call([&] {
    require_args(args, "attnkit_attention_forward_args");
    require_args(bytes, "bytes");
    *bytes = attnkit::attention_forward_workspace_size(to_attention_forward(*args), to_run_options(options));
  });
}

attnkit_status attnkit_attention_backward_workspace_size(const attnkit_attention_backward_args* args,
                                                         const attnkit_run_options* options, int64_t* bytes) {
  return guarded_call([&] {
    require_args(args, "attnkit_attention_backward_args");
    require_args(bytes, "bytes");
    *bytes = attnkit::attention_backward_workspace_size(to_attention_backward(*args), to_run_options(options));
  });
}

attnkit_status attnkit_retention_forward(const attnkit_retention_forward_args* args,
                                         const attnkit_run_options* options) {
  return guarded_call([&] {
    require_args(args, "attnkit_retention_forward_args");
    attnkit::retention_forward(to_retention_forward(*args), to_run_options(options));
  });
}

attnkit_status attnkit_retention_backward(const attnkit_retention_backward_args* args,
                                          const attnkit_run_options* options) {
  return guarded_call([&] {
    require_args(args, "attnkit_retention_backward_args");
    attnkit::retention_backward(to_retention_backward(*args), to_run_options(options));
  });
}

attnkit_status attnkit_gemm(const attnkit_gemm_args* args, const attnkit_run_options* options) {
  return guarded_call([&] {
    require_args(args, "attnkit_gemm_args");
    attnkit::gemm(to_gemm(*args), to_run_options(options));
  });
}

}  // extern "C"
