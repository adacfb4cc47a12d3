// For an accepted call without corruptions: its outputs against the brute-force reference the tests use
// (src/cpu/*_reference, in double), by relative L2 error within the dtype's tolerance (DESIGN §5). A larger
// error is a violation. The library's outputs are read from the args' views.
#pragma once
#include "attnkit/attnkit.h"

namespace attnkit::fuzz {

void compare_with_reference(const attnkit_attention_forward_args& args);
void compare_with_reference(const attnkit_attention_backward_args& args);
void compare_with_reference(const attnkit_retention_forward_args& args);
void compare_with_reference(const attnkit_retention_backward_args& args);
// c_before: C's memory as it was before the call (the layout of args.c), read when beta != 0.
void compare_with_reference(const attnkit_gemm_args& args, const void* c_before);

}  // namespace attnkit::fuzz
