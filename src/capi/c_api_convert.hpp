// Conversion of the C ABI's argument structs into the C++ API's problem structs. Enum fields are
// range-checked here (naming the C field, e.g. "q.dtype") because an out-of-range integer must not
// become a C++ enum value that later code assumes valid; every other rule is left to the C++
// validators so that C and C++ callers get the same messages.
#pragma once
#include "attnkit/attention.hpp"
#include "attnkit/attnkit.h"
#include "attnkit/gemm.hpp"
#include "attnkit/retention.hpp"

namespace attnkit::capi {

// The dtypes a tensor argument may have: what the message of an out-of-range "<name>.dtype" lists (BOOL
// only for the masks). Which of them a call accepts (k: q's dtype, ...) is the C++ validators' rule.
enum class AllowedDtypes { floating, float32, state, mask, any };

// Range checks of a tensor's dtype, device_type and rank, naming the fields "<name>.dtype", ...
void check_tensor_fields(const attnkit_tensor& tensor, const char* name, AllowedDtypes allowed);
// data == NULL: a tensor with no elements (rank 1 to ATTNKIT_MAX_RANK with an extent 0) becomes a present
// view with null data, as the C++ API allows; anything else becomes an absent (default) view.
TensorView to_view(const attnkit_tensor& tensor, const char* name, AllowedDtypes allowed);
attnkit_tensor to_c_tensor(const TensorView& view);
RunOptions to_run_options(const attnkit_run_options* options);  // NULL = defaults

AttentionForward to_attention_forward(const attnkit_attention_forward_args& args);
AttentionBackward to_attention_backward(const attnkit_attention_backward_args& args);
RetentionForward to_retention_forward(const attnkit_retention_forward_args& args);
RetentionBackward to_retention_backward(const attnkit_retention_backward_args& args);
GemmProblem to_gemm(const attnkit_gemm_args& args);

// Throws Status::invalid_argument when pointer is NULL, naming the expected struct.
void require_args(const void* pointer, const char* struct_name);

}  // namespace attnkit::capi
