// Capability checks and token addressing shared by the forward and backward Arguments -> Params
// translations (fmha_arguments.cpp, fmha_backward_arguments.cpp): dtype, head-dim, stride and alignment
// checks that throw Status::unsupported naming the argument, the value and what is allowed; tensor
// addresses of [B, *tokens, H, X] views; and the flat (one-dimensional or decomposed) token space of a
// side whose tensors share a sequence.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "attnkit/attention.hpp"
#include "attnkit/tensor.hpp"
#include "core/attention_shape.hpp"
#include "cuda/fmha/fmha_params.hpp"

namespace attnkit::cuda::fmha {

inline constexpr int64_t kMaxTokens = int64_t{1} << 30;              // flat indices and coordinates are int32
inline constexpr int64_t kMaxNeighborhoodExtent = int64_t{1} << 24;  // (index + box) * dilation stays in int32
inline constexpr int64_t kMaxGridYZ = 65535;

[[noreturn]] void unsupported(const std::string& message);
int log2_exact(int value);
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// Distinct slices of a [B|1, H|1, rows, cols] mask along `dim` (0 batch, 1 heads): 1 where the mask
// broadcasts, by extent 1 or by a stride-0 view (torch's expand), so a broadcast given as a view builds one
// set of tile lists, not one per slice.
inline int32_t mask_slices(const TensorView& mask, int dim) {
  return mask.strides[dim] == 0 ? 1 : static_cast<int32_t>(mask.extents[dim]);
}
void check_dtype(const TensorView& view, const char* name);
void check_head_dim_multiple_of_8(int64_t value, const char* name);
// The last stride is 1, the others multiples of 8 elements, the data 16-byte aligned (cp.async).
void check_strides_and_alignment(const TensorView& view, const char* name);
void check_limit(int64_t value, int64_t limit, const std::string& what);
// Sequence lengths, heads, batch and neighborhood extents within the kernels' index and grid limits.
void check_extent_limits(const detail::AttentionShape& shape, MaskKind mask);
// A positional bias table (mask.rpb, or the backward's grad_rpb, named `name`) as the portable kernels
// address it: float32/float16/bfloat16, non-negative strides, element offsets in int32.
void check_positional_bias_supported(const TensorView& rpb, const char* name);
// Its addressing (data nullptr when `rpb` is not given), with the mask's kernel sizes.
PositionalBias positional_bias_of(const TensorView& rpb, const AttentionMask& mask, int32_t dims);
TensorAddress address_of(const TensorView& view, int32_t token_dims);
// The stride of the flattened sequence when the token dims of `view` collapse into one, else -1.
int64_t collapsed_stride(const TensorView& view, int32_t token_dims);
void set_box_shifts(TokenSpace& space);
// One side of a flat-mask problem (queries: q, out, lse, ...; keys: k, v, ...): a one-dimensional box over
// the flattened sequence when every tensor's token strides collapse, else decompose mode.
void set_flat_side(TokenSpace& space, int block_log2, int64_t sequence, int32_t token_dims,
                   const std::array<int64_t, kMaxTokenDims>& extents,
                   std::initializer_list<std::pair<TensorAddress*, const TensorView*>> tensors);

}  // namespace attnkit::cuda::fmha
