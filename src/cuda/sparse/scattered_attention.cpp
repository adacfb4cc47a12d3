// Host entry of the scattered-sparse path: capability checks (each a sentence naming the argument, the
// value and what is allowed), the workspace layout, and the launches: pack the mask to bits, build its
// union lists (once per mask slice), then the forward kernel, or the preprocess, dQ and dK/dV kernels.
//
// Workspace (each part 256-byte aligned): forward = mask words, list entries, list lengths; backward =
// mask words, transposed mask words, the lists of both (entries, lengths), lse2 and delta rows
// [B][Hq][row_pitch] fp32. List entries take slices * ceil(rows / 16) * ceil(columns / tile) * tile * 4
// bytes (a quarter of the bool mask's size), lengths 4 bytes per list.
#include "cuda/sparse/scattered_attention.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "attnkit/error.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/sparse/scattered_launch.hpp"
#include "cuda/sparse/scattered_params.hpp"

namespace attnkit::cuda::sparse {
namespace {

constexpr int64_t kMaxTokens = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxGridYZ = 65535;

int64_t align_256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// Slices of a [B|1, H|1, rows, cols] mask along `dim`: 1 where it broadcasts (extent 1 or stride 0).
int32_t mask_slices(const TensorView& mask, int dim) {
  return mask.strides[dim] == 0 ? 1 : static_cast<int32_t>(mask.extents[dim]);
}

std::string check_dtype(const TensorView& view, const char* name, DType expected) {
  if (view.dtype == DType::f16 || view.dtype == DType::bf16) {
    if (view.dtype == expected) return {};
    return std::string(name) + ".dtype: " + std::string(dtype_name(view.dtype)) +
           "; the scattered sparse path needs every tensor in q's dtype (" + std::string(dtype_name(expected)) + ")";
  }
  return std::string(name) + ".dtype: " + std::string(dtype_name(view.dtype)) +
         " is not supported by the scattered sparse CUDA path; allowed: float16, bfloat16 (use the dense masked "
         "path or the CPU backend for float32)";
}

std::string check_layout(const TensorView& view, const char* name) {
  for (int d = 0; d + 1 < view.rank; ++d) {
    if (view.strides[d] % 8 != 0) {
      return std::string(name) + ".strides[" + std::to_string(d) + "]: " + std::to_string(view.strides[d]) +
             " elements; allowed on the scattered sparse path: a multiple of 8 elements (16 bytes) in every dim but "
             "the last (make the tensor contiguous)";
    }
  }
  if (reinterpret_cast<std::uintptr_t>(view.data) % 16 != 0) {
    std::ostringstream hex;
    hex << std::hex << "0x" << reinterpret_cast<std::uintptr_t>(view.data);
    return std::string(name) + ": data pointer " + hex.str() +
           " is not 16-byte aligned; allowed on the scattered sparse path: a 16-byte aligned address";
  }
  return {};
}

// What the scattered path needs to know of the current device, read once per device: its compute capability major
// (-1 without a usable device), the dynamic shared memory a block may opt in to and its multiprocessors.
struct DeviceFacts {
  int major = -1;
  int max_shared_bytes = 0;
  int multiprocessors = 0;
};

std::atomic<int> shared_memory_limit{0};  // set_scattered_shared_memory_limit

DeviceFacts device_facts() {
  // major << 48 | multiprocessors << 32 | max shared bytes; 0: not read yet
  static std::array<std::atomic<int64_t>, 64> known{};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  const bool cached = device >= 0 && device < static_cast<int>(known.size());
  if (cached) {
    if (const int64_t packed = known[static_cast<size_t>(device)].load(std::memory_order_relaxed); packed != 0) {
      return DeviceFacts{static_cast<int>(packed >> 48), static_cast<int>(packed & 0xffffffff),
                         static_cast<int>((packed >> 32) & 0xffff)};
    }
  }
  DeviceFacts facts;
  if (cudaDeviceGetAttribute(&facts.major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&facts.max_shared_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&facts.multiprocessors, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  if (cached) {
    known[static_cast<size_t>(device)].store(
        (int64_t{facts.major} << 48) | (int64_t{facts.multiprocessors & 0xffff} << 32) | facts.max_shared_bytes,
        std::memory_order_relaxed);
  }
  return facts;
}

DeviceFacts current_device_facts() {
  DeviceFacts facts = device_facts();
  const int limit = shared_memory_limit.load(std::memory_order_relaxed);
  if (limit > 0) {
    facts.max_shared_bytes = std::min(facts.max_shared_bytes, limit);
    facts.major = std::min(facts.major, 8);  // a smaller device has no sm_90 forms
  }
  return facts;
}

// The device's shared memory per block against what the direction's kernels of the call's width need at least.
std::string check_shared_memory(const detail::AttentionShape& shape, bool backward) {
  const int width = scattered_width(shape.head_dim, shape.head_dim_v);
  const DeviceFacts device = current_device_facts();
  if (width == 0 || device.major < 0) return {};  // check_shape names those
  const int needed = scattered_least_shared_bytes(width, backward);
  if (needed <= device.max_shared_bytes) return {};
  return std::string("device: ") + std::to_string(device.max_shared_bytes) +
         " bytes of shared memory per block; the scattered sparse path's " + (backward ? "backward" : "forward") +
         " kernels of head dims up to " + std::to_string(width) + " need " + std::to_string(needed) +
         "; allowed: devices with that much (compute capability 8.0, 9.0)";
}

std::string check_shape(const AttentionMask& mask, const detail::AttentionShape& shape) {
  if (mask.kind != MaskKind::element) {
    return "mask.kind: " + std::to_string(static_cast<int>(mask.kind)) +
           "; the scattered sparse path takes element masks only (kind 4, element)";
  }
  if (mask.rpb.defined()) return "mask.rpb: given; the scattered sparse path takes no positional bias";
  for (const int64_t d : {shape.head_dim, shape.head_dim_v}) {
    if (d % 8 != 0 || scattered_width(shape.head_dim, shape.head_dim_v) == 0) {
      return "head_dim: D = " + std::to_string(shape.head_dim) + ", Dv = " + std::to_string(shape.head_dim_v) +
             "; allowed on the scattered sparse path: D and Dv multiples of 8 up to 128 (compiled widths 32, 64, "
             "128)";
    }
  }
  if (shape.seq_q > kMaxTokens || shape.seq_k > kMaxTokens) {
    return "tokens: Sq = " + std::to_string(shape.seq_q) + ", Sk = " + std::to_string(shape.seq_k) +
           "; allowed on the scattered sparse path: at most " + std::to_string(kMaxTokens);
  }
  if (shape.heads_q > kMaxGridYZ || shape.batch > kMaxGridYZ) {
    return "batch " + std::to_string(shape.batch) + ", heads " + std::to_string(shape.heads_q) +
           "; allowed on the scattered sparse path: at most " + std::to_string(kMaxGridYZ) + " each";
  }
  const TensorView& m = mask.element_mask;
  if (int64_t{mask_slices(m, 0)} * mask_slices(m, 1) > kMaxGridYZ) {
    return "mask.element_mask: " + std::to_string(int64_t{mask_slices(m, 0)} * mask_slices(m, 1)) +
           " (batch, head) slices; allowed on the scattered sparse path: at most " + std::to_string(kMaxGridYZ);
  }
  const int major = current_device_facts().major;
  if (major < 0) {
    return "device: no usable CUDA device; the scattered sparse path runs on compute capability 8.0 or newer";
  }
  if (major < 8) {
    return "device: compute capability " + std::to_string(major) +
           ".x; allowed on the scattered sparse path: 8.0 or newer (tensor-core mma.sync, ldmatrix, cp.async)";
  }
  return {};
}

template <class... Named>
std::string first_problem(Named... messages) {
  std::string result;
  ((result.empty() ? (void)(result = messages) : (void)0), ...);
  return result;
}

SequenceTensor sequence_tensor(const TensorView& view, int32_t token_dims) {
  SequenceTensor t;
  t.data = view.data;
  t.batch_stride = view.strides[0];
  t.head_stride = view.strides[token_dims + 1];
  // Collapse the token dims into one stride when their strides nest.
  int64_t stride = 0;
  int64_t expected = -1;
  bool collapses = true;
  for (int d = token_dims - 1; d >= 0; --d) {
    const int64_t extent = view.extents[1 + d];
    if (extent == 1) continue;
    if (expected < 0) {
      stride = view.strides[1 + d];
    } else if (view.strides[1 + d] != expected) {
      collapses = false;
    }
    expected = (expected < 0 ? stride : expected) * extent;
  }
  if (collapses) {
    t.token_dims = 1;
    t.token_stride[0] = stride;
    return t;
  }
  t.token_dims = token_dims;
  for (int d = 0; d < token_dims; ++d) {
    t.token_stride[d] = view.strides[1 + d];
    t.extent[d] = static_cast<int32_t>(view.extents[1 + d]);
  }
  return t;
}

MaskBytes mask_bytes(const TensorView& m, int64_t rows, int64_t columns) {
  MaskBytes bytes;
  bytes.data = static_cast<const uint8_t*>(m.data);
  for (int d = 0; d < 4; ++d) bytes.stride[d] = m.strides[d];
  bytes.batches = mask_slices(m, 0);
  bytes.heads = mask_slices(m, 1);
  bytes.rows = static_cast<int32_t>(rows);
  bytes.columns = static_cast<int32_t>(columns);
  return bytes;
}

PackedMask packed_mask(const MaskBytes& bytes, const uint32_t* words) {
  PackedMask packed;
  packed.words = words;
  packed.rows = bytes.rows;
  packed.words_per_row = words_for(bytes.columns);
  packed.mask_batches = bytes.batches;
  packed.mask_heads = bytes.heads;
  return packed;
}

int64_t words_bytes(const TensorView& m, int64_t rows, int64_t columns) {
  return int64_t{mask_slices(m, 0)} * mask_slices(m, 1) * rows * ((columns + 31) / 32) * 4;
}

// Bytes of the list entries and of the list lengths of a [slices, rows, columns] mask in tiles of
// `tile_columns`.
struct ListBytes {
  int64_t entries = 0;
  int64_t lengths = 0;
  int64_t total() const { return align_256(entries) + align_256(lengths); }
};

ListBytes list_bytes(const TensorView& m, int64_t rows, int64_t columns, int tile_columns) {
  const int64_t lists = int64_t{mask_slices(m, 0)} * mask_slices(m, 1) * ((rows + 15) / 16) *
                        ((columns + tile_columns - 1) / tile_columns);
  return {lists * tile_columns * 4, lists * 4};
}

int tile_columns_of(const detail::AttentionShape& shape) {
  return scattered_tile_columns(scattered_width(shape.head_dim, shape.head_dim_v));
}

// Lays out the lists of `words` at `cursor` (advanced past them) and launches their pre-pass.
TileLists build_lists(const PackedMask& words, int32_t columns, const ListBytes& bytes, int tile_columns, char*& cursor,
                      cudaStream_t stream) {
  const auto* entries = reinterpret_cast<const uint32_t*>(cursor);
  const auto* lengths = reinterpret_cast<const uint32_t*>(cursor + align_256(bytes.entries));
  cursor += bytes.total();
  const TileLists lists = tile_lists_layout(words, columns, tile_columns, entries, lengths);
  launch_build_tile_lists(words, lists, stream);
  return lists;
}

int32_t row_pitch(const detail::AttentionShape& shape) { return static_cast<int32_t>((shape.seq_q + 3) / 4 * 4); }

void set_sizes(ScatteredSizes& sizes, const detail::AttentionShape& shape) {
  sizes.seq_q = static_cast<int32_t>(shape.seq_q);
  sizes.seq_k = static_cast<int32_t>(shape.seq_k);
  sizes.heads_q = static_cast<int32_t>(shape.heads_q);
  sizes.heads_per_kv = static_cast<int32_t>(shape.heads_q / shape.heads_kv);
  sizes.head_dim = static_cast<int32_t>(shape.head_dim);
  sizes.head_dim_v = static_cast<int32_t>(shape.head_dim_v);
  sizes.scale_log2 = static_cast<float>(shape.scale * 1.4426950408889634);
}

// Stream-ordered scratch when the caller passes none.
class Scratch {
 public:
  Scratch(void* given, int64_t bytes, cudaStream_t stream) : stream_(stream) {
    data_ = given;
    if (data_ == nullptr && bytes > 0) {
      check_cuda(cudaMallocAsync(&data_, static_cast<size_t>(bytes), stream), "cudaMallocAsync (scattered workspace)");
      owned_ = true;
    }
  }
  ~Scratch() {
    if (owned_) cudaFreeAsync(data_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  char* bytes() const { return static_cast<char*>(data_); }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
  bool owned_ = false;
};

}  // namespace

std::string scattered_forward_unsupported(const AttentionForward& problem, const detail::AttentionShape& shape) {
  const DType dtype = problem.q.dtype;
  return first_problem(check_dtype(problem.q, "q", dtype), check_dtype(problem.k, "k", dtype),
                       check_dtype(problem.v, "v", dtype), check_dtype(problem.out, "out", dtype),
                       check_layout(problem.q, "q"), check_layout(problem.k, "k"), check_layout(problem.v, "v"),
                       check_layout(problem.out, "out"), check_shape(problem.mask, shape),
                       check_shared_memory(shape, false));
}

std::string scattered_backward_unsupported(const AttentionBackward& problem, const detail::AttentionShape& shape) {
  const DType dtype = problem.q.dtype;
  if (!problem.lse.defined()) return "lse: missing; the scattered sparse backward needs the forward's lse";
  return first_problem(
      check_dtype(problem.q, "q", dtype), check_dtype(problem.k, "k", dtype), check_dtype(problem.v, "v", dtype),
      check_dtype(problem.out, "out", dtype), check_dtype(problem.grad_out, "grad_out", dtype),
      check_dtype(problem.grad_q, "grad_q", dtype), check_dtype(problem.grad_k, "grad_k", dtype),
      check_dtype(problem.grad_v, "grad_v", dtype), check_layout(problem.q, "q"), check_layout(problem.k, "k"),
      check_layout(problem.v, "v"), check_layout(problem.out, "out"), check_layout(problem.grad_out, "grad_out"),
      check_layout(problem.grad_q, "grad_q"), check_layout(problem.grad_k, "grad_k"),
      check_layout(problem.grad_v, "grad_v"),
      problem.grad_rpb.defined() ? "grad_rpb: given; the scattered sparse path takes no positional bias" : "",
      check_shape(problem.mask, shape), check_shared_memory(shape, true));
}

int64_t scattered_forward_workspace_bytes(const AttentionForward& problem, const detail::AttentionShape& shape) {
  const TensorView& m = problem.mask.element_mask;
  return align_256(words_bytes(m, shape.seq_q, shape.seq_k)) +
         list_bytes(m, shape.seq_q, shape.seq_k, tile_columns_of(shape)).total();
}

int64_t scattered_backward_workspace_bytes(const AttentionBackward& problem, const detail::AttentionShape& shape) {
  const TensorView& m = problem.mask.element_mask;
  const int64_t rows = shape.batch * shape.heads_q * row_pitch(shape) * 4;
  const int tile = tile_columns_of(shape);
  return align_256(words_bytes(m, shape.seq_q, shape.seq_k)) + align_256(words_bytes(m, shape.seq_k, shape.seq_q)) +
         list_bytes(m, shape.seq_q, shape.seq_k, tile).total() + list_bytes(m, shape.seq_k, shape.seq_q, tile).total() +
         2 * align_256(rows);
}

void run_scattered_forward(const AttentionForward& problem, const detail::AttentionShape& shape, void* workspace,
                           void* stream) {
  if (const std::string why = scattered_forward_unsupported(problem, shape); !why.empty()) {
    throw Error(Status::unsupported, why);
  }
  if (shape.batch == 0 || shape.heads_q == 0 || shape.seq_q == 0) return;
  DeviceGuard guard(problem.q.device.index);
  auto* cuda_stream = static_cast<cudaStream_t>(stream);
  Scratch scratch(workspace, scattered_forward_workspace_bytes(problem, shape), cuda_stream);
  const TensorView& m = problem.mask.element_mask;
  const MaskBytes bytes = mask_bytes(m, shape.seq_q, shape.seq_k);
  char* cursor = scratch.bytes();
  auto* words = reinterpret_cast<uint32_t*>(cursor);
  cursor += align_256(words_bytes(m, shape.seq_q, shape.seq_k));
  launch_pack_mask(bytes, words, cuda_stream);
  const int tile = tile_columns_of(shape);

  ScatteredForwardParams p;
  p.q = sequence_tensor(problem.q, shape.token_dims);
  p.out = sequence_tensor(problem.out, shape.token_dims);
  if (problem.lse.defined()) p.lse = sequence_tensor(problem.lse, shape.token_dims);
  p.k = sequence_tensor(problem.k, shape.token_dims_kv);
  p.v = sequence_tensor(problem.v, shape.token_dims_kv);
  p.lists = build_lists(packed_mask(bytes, words), bytes.columns, list_bytes(m, shape.seq_q, shape.seq_k, tile), tile,
                        cursor, cuda_stream);
  set_sizes(p, shape);
  const int width = scattered_width(shape.head_dim, shape.head_dim_v);
  const auto batch = static_cast<int32_t>(shape.batch);
  const bool hopper = current_device_facts().major == 9;
  if (problem.q.dtype == DType::f16) {
    launch_scattered_forward_f16(p, batch, width, hopper, cuda_stream);
  } else {
    launch_scattered_forward_bf16(p, batch, width, hopper, cuda_stream);
  }
}

void run_scattered_backward(const AttentionBackward& problem, const detail::AttentionShape& shape, void* workspace,
                            void* stream) {
  if (const std::string why = scattered_backward_unsupported(problem, shape); !why.empty()) {
    throw Error(Status::unsupported, why);
  }
  if (shape.batch == 0 || shape.heads_q == 0 || (shape.seq_q == 0 && shape.seq_k == 0)) return;
  DeviceGuard guard(problem.q.device.index);
  auto* cuda_stream = static_cast<cudaStream_t>(stream);
  Scratch scratch(workspace, scattered_backward_workspace_bytes(problem, shape), cuda_stream);
  const TensorView& m = problem.mask.element_mask;
  const MaskBytes bytes = mask_bytes(m, shape.seq_q, shape.seq_k);
  MaskBytes transposed = bytes;
  transposed.rows = bytes.columns;
  transposed.columns = bytes.rows;
  char* cursor = scratch.bytes();
  auto* words = reinterpret_cast<uint32_t*>(cursor);
  cursor += align_256(words_bytes(m, shape.seq_q, shape.seq_k));
  auto* words_transposed = reinterpret_cast<uint32_t*>(cursor);
  cursor += align_256(words_bytes(m, shape.seq_k, shape.seq_q));
  const int64_t row_bytes = align_256(shape.batch * shape.heads_q * row_pitch(shape) * 4);
  char* list_cursor = cursor;
  const int tile = tile_columns_of(shape);
  const ListBytes lists_bytes = list_bytes(m, shape.seq_q, shape.seq_k, tile);
  const ListBytes lists_transposed_bytes = list_bytes(m, shape.seq_k, shape.seq_q, tile);
  cursor += lists_bytes.total() + lists_transposed_bytes.total();
  auto* lse_log2 = reinterpret_cast<float*>(cursor);
  auto* delta = reinterpret_cast<float*>(cursor + row_bytes);

  ScatteredBackwardParams p;
  p.q = sequence_tensor(problem.q, shape.token_dims);
  p.out = sequence_tensor(problem.out, shape.token_dims);
  p.grad_out = sequence_tensor(problem.grad_out, shape.token_dims);
  p.grad_q = sequence_tensor(problem.grad_q, shape.token_dims);
  p.lse = sequence_tensor(problem.lse, shape.token_dims);
  p.k = sequence_tensor(problem.k, shape.token_dims_kv);
  p.v = sequence_tensor(problem.v, shape.token_dims_kv);
  p.grad_k = sequence_tensor(problem.grad_k, shape.token_dims_kv);
  p.grad_v = sequence_tensor(problem.grad_v, shape.token_dims_kv);
  p.lse_log2 = lse_log2;
  p.delta = delta;
  p.row_pitch = row_pitch(shape);
  p.batch = static_cast<int32_t>(shape.batch);
  set_sizes(p, shape);
  p.scale = static_cast<float>(shape.scale);

  launch_pack_mask(bytes, words, cuda_stream);
  launch_pack_mask_transposed(bytes, words_transposed, cuda_stream);
  p.lists = build_lists(packed_mask(bytes, words), bytes.columns, lists_bytes, tile, list_cursor, cuda_stream);
  p.lists_transposed = build_lists(packed_mask(transposed, words_transposed), transposed.columns,
                                   lists_transposed_bytes, tile, list_cursor, cuda_stream);
  launch_scattered_backward_preprocess(p, problem.q.dtype, cuda_stream);
  const int width = scattered_width(shape.head_dim, shape.head_dim_v);
  const DeviceFacts facts = current_device_facts();
  const ScatteredDevice device{facts.major == 9, facts.max_shared_bytes, facts.multiprocessors};
  if (problem.q.dtype == DType::f16) {
    launch_scattered_backward_f16(p, width, device, cuda_stream);
  } else {
    launch_scattered_backward_bf16(p, width, device, cuda_stream);
  }
}

void set_scattered_shared_memory_limit(int bytes) { shared_memory_limit.store(bytes, std::memory_order_relaxed); }

}  // namespace attnkit::cuda::sparse
