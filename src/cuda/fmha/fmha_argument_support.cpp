#include "cuda/fmha/fmha_argument_support.hpp"

#include <cstdint>
#include <sstream>
#include <string>

#include "attnkit/error.hpp"

namespace attnkit::cuda::fmha {

[[noreturn]] void unsupported(const std::string& message) { throw Error(Status::unsupported, message); }

int log2_exact(int value) {
  int l = 0;
  while ((1 << l) < value) ++l;
  return l;
}

void check_dtype(const TensorView& view, const char* name) {
  if (view.dtype == DType::f16 || view.dtype == DType::bf16) return;
  unsupported(std::string(name) + ".dtype: " + std::string(dtype_name(view.dtype)) +
              " is not supported by the CUDA attention kernels; allowed: float16, bfloat16 (use the CPU backend for "
              "float32/float64)");
}

void check_head_dim_multiple_of_8(int64_t value, const char* name) {
  if (value % 8 == 0) return;
  unsupported(std::string(name) + ": " + std::to_string(value) +
              "; allowed: a multiple of 8 on the CUDA backend (rows are loaded in 16-byte chunks), or run on CPU "
              "tensors (backend cpu)");
}

void check_strides_and_alignment(const TensorView& view, const char* name) {
  for (int d = 0; d + 1 < view.rank; ++d) {
    if (view.strides[d] % 8 != 0) {
      unsupported(std::string(name) + ".strides[" + std::to_string(d) + "]: " + std::to_string(view.strides[d]) +
                  " elements; allowed: a multiple of 8 elements (16 bytes) in every dim but the last on the CUDA "
                  "backend, which loads and stores 16-byte chunks (make the tensor contiguous, or run on CPU tensors)");
    }
  }
  const auto address = reinterpret_cast<std::uintptr_t>(view.data);
  if (address % 16 != 0) {
    std::ostringstream hex;
    hex << std::hex << "0x" << address;
    unsupported(std::string(name) + ": data pointer " + hex.str() +
                " is not 16-byte aligned; allowed: a 16-byte aligned address on the CUDA backend (16-byte cp.async "
                "loads)");
  }
}

void check_limit(int64_t value, int64_t limit, const std::string& what) {
  if (value <= limit) return;
  unsupported(what + ": " + std::to_string(value) + "; allowed: at most " + std::to_string(limit) +
              " on the CUDA backend");
}

int64_t positional_bias_max_offset(const TensorView& rpb) {
  int64_t offset = 0;
  for (int i = 0; i < rpb.rank; ++i) offset += (rpb.extents[i] - 1) * rpb.strides[i];
  return offset;
}

void check_positional_bias_supported(const TensorView& rpb, const char* name) {
  if (!rpb.defined()) return;
  if (rpb.dtype != DType::f32 && rpb.dtype != DType::f16 && rpb.dtype != DType::bf16) {
    unsupported(std::string(name) + ": dtype " + std::string(dtype_name(rpb.dtype)) +
                "; allowed on the CUDA backend: float32, float16, bfloat16");
  }
  for (int i = 0; i < rpb.rank; ++i) {
    if (rpb.strides[i] < 0) {
      unsupported(std::string(name) + ": stride " + std::to_string(rpb.strides[i]) + " of dimension " +
                  std::to_string(i) + "; allowed on the CUDA backend: non-negative strides");
    }
  }
  check_limit(positional_bias_max_offset(rpb), (int64_t{1} << 31) - 1, std::string(name) + ": largest element offset");
}

PositionalBias positional_bias_of(const TensorView& rpb, const AttentionMask& mask, int32_t dims) {
  PositionalBias b;
  if (!rpb.defined()) return b;
  b.data = rpb.data;
  b.type = rpb.dtype == DType::f32 ? BiasType::f32 : rpb.dtype == DType::f16 ? BiasType::f16 : BiasType::bf16;
  b.head_stride = static_cast<int32_t>(rpb.strides[0]);
  for (int d = 0; d < dims; ++d) {
    b.stride[d] = static_cast<int32_t>(rpb.strides[d + 1]);
    b.kernel_size[d] = static_cast<int32_t>(mask.neighborhood[d].kernel_size);
  }
  b.max_offset = static_cast<int32_t>(positional_bias_max_offset(rpb));
  return b;
}

void check_extent_limits(const detail::AttentionShape& shape, MaskKind mask) {
  check_limit(shape.seq_q, kMaxTokens, "q: tokens (sequence length)");
  check_limit(shape.seq_k, kMaxTokens, "k: tokens (sequence length)");
  check_limit(shape.heads_q, kMaxGridYZ, "q: heads");
  check_limit(shape.batch, kMaxGridYZ, "q: batch");
  if (mask == MaskKind::neighborhood) {
    for (int d = 0; d < shape.token_dims; ++d) {
      check_limit(shape.tokens[d], kMaxNeighborhoodExtent,
                  "q: tokens[" + std::to_string(d) + "] with a neighborhood mask");
    }
  }
}

TensorAddress address_of(const TensorView& view, int32_t token_dims) {
  TensorAddress a;
  a.data = view.data;
  a.batch_stride = view.strides[0];
  a.head_stride = view.strides[token_dims + 1];
  for (int d = 0; d < token_dims; ++d) a.token_stride[d] = view.strides[1 + d];
  return a;
}

int64_t collapsed_stride(const TensorView& view, int32_t token_dims) {
  int64_t stride = 0;
  int64_t expected = -1;
  for (int d = token_dims - 1; d >= 0; --d) {
    const int64_t extent = view.extents[1 + d];
    const int64_t s = view.strides[1 + d];
    if (extent == 1) continue;
    if (expected < 0) {
      stride = s;
    } else if (s != expected) {
      return -1;
    }
    expected = s * extent;
  }
  return stride;
}

void set_box_shifts(TokenSpace& space) {
  int shift = 0;
  for (int d = kMaxDims - 1; d >= 0; --d) {
    space.box_shift[d] = shift;
    shift += space.box_log2[d];
  }
}

void set_flat_side(TokenSpace& space, int block_log2, int64_t sequence, int32_t token_dims,
                   const std::array<int64_t, kMaxTokenDims>& extents,
                   std::initializer_list<std::pair<TensorAddress*, const TensorView*>> tensors) {
  bool collapses = true;
  for (const auto& [address, view] : tensors) collapses = collapses && collapsed_stride(*view, token_dims) >= 0;
  space = TokenSpace{};
  space.box_log2[0] = block_log2;
  space.flat_extent = static_cast<int32_t>(sequence);
  if (collapses) {
    space.extent[0] = static_cast<int32_t>(sequence);
    for (const auto& [address, view] : tensors) {
      address->token_stride[0] = collapsed_stride(*view, token_dims);
      address->token_stride[1] = 0;
      address->token_stride[2] = 0;
    }
  } else {
    // Right-align the token dims: extents {1, .., e}, strides {0, .., s}.
    space.decompose = true;
    const int pad = kMaxDims - token_dims;
    for (int d = 0; d < kMaxDims; ++d) space.extent[d] = d < pad ? 1 : static_cast<int32_t>(extents[d - pad]);
    for (const auto& [address, view] : tensors) {
      for (int d = 0; d < kMaxDims; ++d) address->token_stride[d] = d < pad ? 0 : view->strides[1 + d - pad];
    }
  }
  set_box_shifts(space);
}

}  // namespace attnkit::cuda::fmha
