#include "cuda/sparse/scattered_tma_maps.hpp"

#include <array>
#include <cstdint>

#include "cuda/common/driver_entry_point.hpp"

namespace attnkit::cuda::sparse {
namespace {

constexpr int64_t kElementBytes = 2;

bool multiple_of_16(int64_t bytes) { return bytes > 0 && bytes % 16 == 0; }

// One map of a [B, tokens, H, X] tensor with X `columns` (bf16 / fp16), `heads` heads, `tokens` tokens.
bool encode(CUtensorMap& map, const SequenceTensor& t, int32_t batch, int32_t heads, int32_t tokens, int32_t columns,
            int rank) {
  if (t.token_dims != 1 || reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  const int64_t head_bytes = t.head_stride * kElementBytes;
  const int64_t token_bytes = t.token_stride[0] * kElementBytes;
  const int64_t batch_bytes = t.batch_stride * kElementBytes;
  if (!multiple_of_16(head_bytes) || !multiple_of_16(token_bytes)) return false;
  if (rank == 4 && !multiple_of_16(batch_bytes)) return false;
  std::array<cuuint64_t, 4> dims{static_cast<cuuint64_t>(columns), static_cast<cuuint64_t>(heads),
                                 static_cast<cuuint64_t>(tokens), static_cast<cuuint64_t>(batch)};
  std::array<cuuint64_t, 3> strides{static_cast<cuuint64_t>(head_bytes), static_cast<cuuint64_t>(token_bytes),
                                    static_cast<cuuint64_t>(batch_bytes)};
  std::array<cuuint32_t, 4> box{kTmaTileColumns, 1, kTmaTileKeys, 1};
  std::array<cuuint32_t, 4> element_strides{1, 1, 1, 1};
  const auto function = tensor_map_encode_tiled();
  if (function == nullptr) return false;
  const CUresult result =
      function(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, static_cast<cuuint32_t>(rank), const_cast<void*>(t.data),
               dims.data(), strides.data(), box.data(), element_strides.data(), CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS;
}

// One map of a backward's workspace rows: `rows` rows of `pitch` floats per (batch, head), 256 of them a box.
bool encode_rows(CUtensorMap& map, const float* rows, int32_t batch, int32_t heads, int32_t pitch) {
  if (reinterpret_cast<uintptr_t>(rows) % 16 != 0 || pitch <= 0 || pitch % 4 != 0) return false;
  std::array<cuuint64_t, 3> dims{static_cast<cuuint64_t>(pitch), static_cast<cuuint64_t>(heads),
                                 static_cast<cuuint64_t>(batch)};
  std::array<cuuint64_t, 2> strides{static_cast<cuuint64_t>(pitch) * 4, static_cast<cuuint64_t>(pitch) * 4 * heads};
  std::array<cuuint32_t, 3> box{kTmaTileKeys, 1, 1};
  std::array<cuuint32_t, 3> element_strides{1, 1, 1};
  const auto function = tensor_map_encode_tiled();
  if (function == nullptr) return false;
  const CUresult result =
      function(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, const_cast<float*>(rows), dims.data(), strides.data(),
               box.data(), element_strides.data(), CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return result == CUDA_SUCCESS;
}

}  // namespace

bool make_scattered_query_maps(const ScatteredBackwardParams& p, ScatteredTmaKeyParams& out) {
  if (p.head_dim > kTmaTileColumns || p.head_dim_v > kTmaTileColumns || p.batch <= 0) return false;
  out.rank = p.batch == 1 ? 3 : 4;
  out.base = p;
  return encode(out.q, p.q, p.batch, p.heads_q, p.seq_q, p.head_dim, out.rank) &&
         encode(out.grad_out, p.grad_out, p.batch, p.heads_q, p.seq_q, p.head_dim_v, out.rank) &&
         encode_rows(out.lse_log2, p.lse_log2, p.batch, p.heads_q, p.row_pitch) &&
         encode_rows(out.delta, p.delta, p.batch, p.heads_q, p.row_pitch);
}

bool make_scattered_key_value_maps(const ScatteredSizes& sizes, const SequenceTensor& k, const SequenceTensor& v,
                                   int32_t batch, CUtensorMap& k_map, CUtensorMap& v_map, int32_t& rank) {
  if (sizes.head_dim > kTmaTileColumns || sizes.head_dim_v > kTmaTileColumns || sizes.heads_per_kv <= 0) return false;
  const int32_t kv_heads = sizes.heads_q / sizes.heads_per_kv;
  rank = batch == 1 ? 3 : 4;
  return encode(k_map, k, batch, kv_heads, sizes.seq_k, sizes.head_dim, rank) &&
         encode(v_map, v, batch, kv_heads, sizes.seq_k, sizes.head_dim_v, rank);
}

}  // namespace attnkit::cuda::sparse
