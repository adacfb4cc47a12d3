// The structure-aware generator: one function per C ABI operation reads its choices from the input, builds
// a mostly valid argument struct (shapes, strides, dtypes, masks, scalars), applies a few targeted
// corruptions, lays out real memory and runs the call through every entry point that takes those
// arguments (the operation, its workspace query, its plan), checking fuzz_checks.hpp's properties.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attnkit/attnkit.h"
#include "byte_source.hpp"
#include "fuzz_checks.hpp"
#include "fuzz_tensors.hpp"

namespace attnkit::fuzz {

// Sets the process up once: default tuner settings (off, memory only), errors-only logging.
void initialise();
// Runs one input (what LLVMFuzzerTestOneInput calls).
void run_one_input(const uint8_t* data, std::size_t size);

// The operations; each consumes what it needs from `in`.
void fuzz_attention_forward(ByteSource& in);
void fuzz_attention_backward(ByteSource& in);
void fuzz_retention_forward(ByteSource& in);
void fuzz_retention_backward(ByteSource& in);
void fuzz_gemm(ByteSource& in);
void fuzz_tensor_contiguous(ByteSource& in);
void fuzz_tuner_settings(ByteSource& in);
void fuzz_null_arguments(ByteSource& in);

// --- shared by the operations ----------------------------------------------------------------

// How many corruptions an input applies: 0 for about half the inputs, else 1 to 3.
int corruption_count(ByteSource& in);

// A scalar field corruption: changes a field of the argument struct and says what it did.
using ScalarCorruption = std::function<std::string(ByteSource&)>;

// Applies `count` corruptions, each to a tensor descriptor or through one of `scalars`. Returns whether an
// unallocatable (huge) extent was used.
bool apply_corruptions(ByteSource& in, int count, TensorSet& tensors, const std::vector<ScalarCorruption>& scalars);

// Run options: NULL, or initialised with a backend and a thread count, sometimes corrupted. `storage` holds
// them; `workspace` keeps a caller workspace alive.
const attnkit_run_options* make_options(ByteSource& in, attnkit_run_options& storage,
                                        std::vector<unsigned char>& workspace, bool corrupt);

// A valid scale: has_scale 0 for the default, or a positive value, sometimes extreme (1e-300, 1e30).
void make_scale(ByteSource& in, int32_t& has_scale, double& scale);
// Beyond [1e-100, 100]: results may saturate or overflow legitimately, and are not compared.
bool extreme_scale(int32_t has_scale, double scale);
// The scalar corruption of a scale: zero, negative, NaN, infinite, denormal.
ScalarCorruption scale_corruption(int32_t& has_scale, double& scale);

// A float dtype for the inputs of an op: mostly float32.
int32_t pick_float_dtype(ByteSource& in);

// Small extents: 0 rarely, else 1..max.
int64_t small_extent(ByteSource& in, int64_t max, bool allow_zero = true);

std::string describe_extents(const attnkit_tensor& tensor);

}  // namespace attnkit::fuzz
