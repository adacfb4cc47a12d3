#include "cuda/fmha_sm90/fmha_sm90_tma.hpp"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <array>
#include <string>

#include "attnkit/error.hpp"

namespace attnkit::cuda::fmha_sm90 {
namespace {

constexpr int kChunkColumns = 64;

struct MapShape {
  int rank = 0;
  std::array<cuuint64_t, 5> dims{};
  std::array<cuuint64_t, 5> strides_bytes{};  // of dims 1.. (dims[0] is contiguous)
  std::array<cuuint32_t, 5> box{};
};

bool stride_ok(int64_t stride_elements, int64_t element_bytes) {
  const int64_t bytes = stride_elements * element_bytes;
  return bytes > 0 && bytes % 16 == 0 && bytes < (int64_t{1} << 40);
}

// The (head dim, KV head, tokens innermost first, batch) view of K or V, or rank 0 when TMA cannot
// express it.
MapShape shape_of(const fmha::TensorAddress& a, const fmha::FmhaParams& p, int columns, int block_n,
                  int64_t element_bytes, bool& fold_batch, bool& has_batch) {
  MapShape s;
  const fmha::TokenSpace& space = p.kv_space;
  // A box wider than the tensor is not allowed: D < 64 keeps the cp.async path.
  if (space.decompose || columns < kChunkColumns || reinterpret_cast<uintptr_t>(a.data) % 16 != 0) return {};
  int box_rows = 1;
  for (int d = 0; d < p.dims; ++d) {
    if (p.dilation[d] != 1) return {};
    box_rows *= 1 << space.box_log2[d];
  }
  if (box_rows != block_n) return {};
  const int64_t heads_kv = p.heads_q / p.heads_per_kv;
  auto add = [&](int64_t extent, int64_t stride_elements, int box) {
    // Extent-1 dimensions take any stride: give them one TMA accepts.
    if (extent == 1) stride_elements = 16 / element_bytes;
    if (s.rank > 0 && !stride_ok(stride_elements, element_bytes)) return false;
    s.dims[s.rank] = static_cast<cuuint64_t>(extent);
    if (s.rank > 0) s.strides_bytes[s.rank - 1] = static_cast<cuuint64_t>(stride_elements * element_bytes);
    s.box[s.rank] = static_cast<cuuint32_t>(box);
    ++s.rank;
    return true;
  };
  bool ok = add(columns, 1, kChunkColumns) && add(heads_kv, a.head_stride, 1);
  for (int d = p.dims - 1; d >= 1 && ok; --d) ok = add(space.extent[d], a.token_stride[d], 1 << space.box_log2[d]);
  if (!ok) return {};
  // Outermost token dimension and the batch: separate when a dimension is left, else folded.
  const int64_t outer_extent = space.extent[0];
  const int64_t outer_stride = a.token_stride[0];
  fold_batch = false;
  has_batch = false;
  if (p.batch == 1) {
    ok = add(outer_extent, outer_stride, 1 << space.box_log2[0]);
  } else if (s.rank + 2 <= 5) {
    ok = add(outer_extent, outer_stride, 1 << space.box_log2[0]) && add(p.batch, a.batch_stride, 1);
    has_batch = true;
  } else if (a.batch_stride == outer_extent * outer_stride) {
    ok = add(outer_extent * p.batch, outer_stride, 1 << space.box_log2[0]);
    fold_batch = true;
  } else {
    return {};
  }
  return ok ? s : MapShape{};
}

// The driver's cuTensorMapEncodeTiled, looked up through the runtime: the library does not link
// libcuda itself, so it still loads (and runs on the CPU) on machines without a GPU driver.
PFN_cuTensorMapEncodeTiled_v12000 encode_function() {
  static const PFN_cuTensorMapEncodeTiled_v12000 function = [] {
    void* pointer = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t status =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pointer, 12000, cudaEnableDefault, &found);
    if (status != cudaSuccess || found != cudaDriverEntryPointSuccess) pointer = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(pointer);
  }();
  if (function == nullptr) {
    throw Error(Status::cuda_error, "cuTensorMapEncodeTiled: not found in the CUDA driver (needs a CUDA 12+ driver)");
  }
  return function;
}

void encode(CUtensorMap& map, const MapShape& s, const void* data, DType dtype) {
  std::array<cuuint32_t, 5> element_strides{1, 1, 1, 1, 1};
  const CUresult result =
      encode_function()(&map, dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                        static_cast<cuuint32_t>(s.rank), const_cast<void*>(data), s.dims.data(), s.strides_bytes.data(),
                        s.box.data(), element_strides.data(), CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    throw Error(Status::cuda_error,
                "cuTensorMapEncodeTiled (attention K/V tiles): CUresult " + std::to_string(static_cast<int>(result)));
  }
}

}  // namespace

void make_sm90_kv_maps(const fmha::FmhaParams& p, DType dtype, int head_dim_compiled, int block_n, Sm90KvMaps& maps) {
  maps.enabled = 0;
  if (head_dim_compiled % kChunkColumns != 0) return;
  bool fold_k = false, batch_k = false, fold_v = false, batch_v = false;
  const MapShape k = shape_of(p.k, p, p.head_dim, block_n, 2, fold_k, batch_k);
  const MapShape v = shape_of(p.v, p, p.head_dim_v, block_n, 2, fold_v, batch_v);
  if (k.rank == 0 || v.rank == 0 || k.rank != v.rank || fold_k != fold_v || batch_k != batch_v) return;
  encode(maps.k, k, p.k.data, dtype);
  encode(maps.v, v, p.v.data, dtype);
  maps.rank = k.rank;
  maps.fold_batch = fold_k ? 1 : 0;
  maps.has_batch = batch_k ? 1 : 0;
  maps.enabled = 1;
}

}  // namespace attnkit::cuda::fmha_sm90
