// The named predicates every validator is composed of (DESIGN §4, §9). Each checks one rule and,
// when it is broken, throws attnkit::Error(Status::invalid_argument) with a message of the form
//   "<argument>: <value received>; allowed: <what is allowed>"
// so a user sees which argument to change and to what. Validators call them in a fixed order
// (presence, device, rank, extents, strides, overflow, dtype, alignment, then cross-tensor rules),
// so that a later predicate may rely on an earlier one having passed (e.g. rank within bounds).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "attnkit/backend.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit::detail::checks {

[[noreturn]] void fail(const std::string& message);

std::string device_string(const Device& device);               // "cpu:0", "cuda:1"
std::string dtype_string(DType dtype);                         // "float16", or "unknown (7)"
std::string extents_string(std::span<const int64_t> extents);  // "[2, 16, 4, 8]"
std::string strides_string(const TensorView& view);            // "[512, 32, 8, 1]"
std::string number_string(double value);                       // shortest round-trip form

// --- one view on its own ---------------------------------------------------------------------
// Data, or no elements (rank >= 1 with an extent 0): such a tensor needs no memory, so null is allowed.
void check_present(const TensorView& view, std::string_view name);
void check_device_valid(const TensorView& view, std::string_view name);
// layout names the dims, e.g. "[B, *tokens, H, D] with 1 to 3 token dimensions".
void check_rank_in(const TensorView& view, std::string_view name, int32_t min_rank, int32_t max_rank,
                   std::string_view layout);
void check_extents_nonnegative(const TensorView& view, std::string_view name);
void check_strides_nonnegative(const TensorView& view, std::string_view name);
// Stride 1 in the last dimension; any strides for a tensor with no elements.
void check_last_dim_contiguous(const TensorView& view, std::string_view name);
// Neither the element count nor the byte offset of the farthest element (sum of (extent-1)*stride,
// times the element size) may overflow int64; kernels index with 64-bit integers.
void check_offsets_fit_int64(const TensorView& view, std::string_view name);
void check_aligned(const TensorView& view, std::string_view name);
// Outputs may not broadcast: a stride of 0 over an extent > 1 makes several results write one element.
// An output with no elements passes.
void check_output_not_broadcast(const TensorView& view, std::string_view name);

// The structural checks every tensor argument passes: device, rank, extents, strides, overflow.
// Callers add dtype, contiguity and alignment rules, which depend on the op.
void check_view_structure(const TensorView& view, std::string_view name, int32_t min_rank, int32_t max_rank,
                          std::string_view layout);

// --- dtypes ----------------------------------------------------------------------------------
void check_floating_dtype(const TensorView& view, std::string_view name);  // f32, f16, bf16, f64
void check_dtype_is(const TensorView& view, std::string_view name, DType expected, std::string_view why);
void check_same_dtype(const TensorView& view, std::string_view name, const TensorView& reference,
                      std::string_view reference_name);

// --- relations between views -----------------------------------------------------------------
void check_same_device(const TensorView& view, std::string_view name, const TensorView& reference,
                       std::string_view reference_name);
// Extents equal `expected`; `layout` names what they are, e.g. "[B, *tokens_q, Hq, Dv] from q and v".
void check_shape_equals(const TensorView& view, std::string_view name, std::span<const int64_t> expected,
                        std::string_view layout);

// --- scalars ---------------------------------------------------------------------------------
void check_scale(const std::optional<double>& scale, std::string_view default_text);
void check_finite(double value, std::string_view name);
void check_run_options(const RunOptions& options);

}  // namespace attnkit::detail::checks
