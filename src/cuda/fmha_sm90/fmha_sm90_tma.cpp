#include "cuda/fmha_sm90/fmha_sm90_tma.hpp"

#include <cudaTypedefs.h>

#include <array>
#include <string>

#include "attnkit/error.hpp"
#include "cuda/common/driver_entry_point.hpp"

namespace attnkit::cuda::fmha_sm90 {
namespace {

struct MapShape {
  int rank = 0;
  int swizzle_bytes = 128;  // a box's row: 128 or 64 bytes, swizzled with the pattern of that width
  std::array<cuuint64_t, 5> dims{};
  std::array<cuuint64_t, 5> strides_bytes{};    // of dims 1.. (dims[0] is contiguous)
  std::array<cuuint32_t, 5> box{};              // elements the box spans (element_strides times those it loads)
  std::array<cuuint32_t, 5> element_strides{};  // a dilated token dimension loads every dilation-th token
};

bool stride_ok(int64_t stride_elements, int64_t element_bytes) {
  const int64_t bytes = stride_elements * element_bytes;
  return bytes > 0 && bytes % 16 == 0 && bytes < (int64_t{1} << 40);
}

// What a tile tensor map describes besides the tensor's own strides: the token grid its tiles are
// boxes of, the head count, the batch and how many columns each row holds.
struct TileGrid {
  const fmha::TokenSpace* space = nullptr;
  int dims = 1;
  const int32_t* dilation = nullptr;
  int64_t heads = 1;
  int64_t batch = 1;
  int64_t columns = 0;  // per row (columns past it are out of bounds)
  int box_columns = 0;  // per box: 128 (or 64) bytes, swizzled with the pattern of that width
  int block_rows = 0;   // tokens per tile
  int64_t element_bytes = 2;
  // Dilation as TMA element strides (tile loads); false refuses dilated grids (the dQ reductions).
  bool dilation_as_strides = false;
};

// TMA traverses at most 8 elements apart and spans at most 256 per box dimension.
constexpr int kMaxElementStride = 8;
constexpr int kMaxBoxSpan = 256;

// The (columns, head, tokens innermost first, batch) view of a [B, tokens..., H, columns] tensor whose
// tiles are boxes of g.space, or rank 0 when TMA cannot express it.
MapShape shape_of(const fmha::TensorAddress& a, const TileGrid& g, bool& fold_batch, bool& has_batch) {
  MapShape s;
  s.swizzle_bytes = static_cast<int>(g.box_columns * g.element_bytes);
  if (s.swizzle_bytes != 128 && s.swizzle_bytes != 64) return {};
  const fmha::TokenSpace& space = *g.space;
  // A box wider than the tensor is not allowed: narrower rows keep the cp.async path.
  if (space.decompose || g.columns < g.box_columns || reinterpret_cast<uintptr_t>(a.data) % 16 != 0) return {};
  int box_rows = 1;
  for (int d = 0; d < g.dims; ++d) {
    const int box = 1 << space.box_log2[d];
    if (g.dilation[d] != 1 &&
        (!g.dilation_as_strides || g.dilation[d] > kMaxElementStride || box * g.dilation[d] > kMaxBoxSpan)) {
      return {};
    }
    box_rows *= box;
  }
  // A flat side's tile may hold fewer rows than its box (192-row query tiles in a box of 256): its boxes load
  // block_rows tokens.
  const bool flat_tile = g.dims == 1 && g.block_rows < box_rows;
  if (box_rows != g.block_rows && !flat_tile) return {};
  const int64_t element_bytes = g.element_bytes;
  // A dimension of `extent` elements `stride_elements` apart whose boxes load `box` of them, every `step`-th.
  auto add = [&](int64_t extent, int64_t stride_elements, int box, int step) {
    // Extent-1 dimensions take any stride: give them one TMA accepts.
    if (extent == 1) stride_elements = 16 / element_bytes;
    if (s.rank > 0 && !stride_ok(stride_elements, element_bytes)) return false;
    s.dims[s.rank] = static_cast<cuuint64_t>(extent);
    if (s.rank > 0) s.strides_bytes[s.rank - 1] = static_cast<cuuint64_t>(stride_elements * element_bytes);
    s.box[s.rank] = static_cast<cuuint32_t>(box * step);
    s.element_strides[s.rank] = static_cast<cuuint32_t>(step);
    ++s.rank;
    return true;
  };
  bool ok = add(g.columns, 1, g.box_columns, 1) && add(g.heads, a.head_stride, 1, 1);
  for (int d = g.dims - 1; d >= 1 && ok; --d) {
    ok = add(space.extent[d], a.token_stride[d], 1 << space.box_log2[d], g.dilation[d]);
  }
  if (!ok) return {};
  // Outermost token dimension and the batch: separate when a dimension is left, else folded.
  const int64_t outer_extent = space.extent[0];
  const int64_t outer_stride = a.token_stride[0];
  fold_batch = false;
  has_batch = false;
  const int outer_box = flat_tile ? g.block_rows : 1 << space.box_log2[0];
  const int outer_step = g.dilation[0];
  if (g.batch == 1) {
    ok = add(outer_extent, outer_stride, outer_box, outer_step);
  } else if (s.rank + 2 <= 5) {
    ok = add(outer_extent, outer_stride, outer_box, outer_step) && add(g.batch, a.batch_stride, 1, 1);
    has_batch = true;
  } else if (a.batch_stride == outer_extent * outer_stride) {
    ok = add(outer_extent * g.batch, outer_stride, outer_box, outer_step);
    fold_batch = true;
  } else {
    return {};
  }
  return ok ? s : MapShape{};
}

// The driver's cuTensorMapEncodeTiled, or an error saying it is missing.
PFN_cuTensorMapEncodeTiled_v12000 encode_function() {
  const auto function = tensor_map_encode_tiled();
  if (function == nullptr) {
    throw Error(Status::cuda_error, "cuTensorMapEncodeTiled: not found in the CUDA driver (needs a CUDA 12+ driver)");
  }
  return function;
}

void encode(CUtensorMap& map, const MapShape& s, const void* data, CUtensorMapDataType type, const char* what) {
  const CUresult result =
      encode_function()(&map, type, static_cast<cuuint32_t>(s.rank), const_cast<void*>(data), s.dims.data(),
                        s.strides_bytes.data(), s.box.data(), s.element_strides.data(), CU_TENSOR_MAP_INTERLEAVE_NONE,
                        s.swizzle_bytes == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    throw Error(Status::cuda_error, std::string("cuTensorMapEncodeTiled (") + what + "): CUresult " +
                                        std::to_string(static_cast<int>(result)));
  }
}

}  // namespace

void make_sm90_tile_maps(const fmha::FmhaParams& p, DType dtype, int box_columns, int block_m, int block_n,
                         Sm90TileMaps& maps) {
  maps.enabled = 0;
  maps.q_enabled = 0;
  const CUtensorMapDataType type =
      dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  TileGrid g;
  g.space = &p.kv_space;
  g.dims = p.dims;
  g.dilation = p.dilation;
  g.heads = p.heads_q / p.heads_per_kv;
  g.batch = p.batch;
  g.box_columns = box_columns;
  g.block_rows = block_n;
  g.element_bytes = 2;
  g.dilation_as_strides = true;
  bool fold_k = false, batch_k = false, fold_v = false, batch_v = false;
  g.columns = p.head_dim;
  const MapShape k = shape_of(p.k, g, fold_k, batch_k);
  g.columns = p.head_dim_v;
  const MapShape v = shape_of(p.v, g, fold_v, batch_v);
  if (k.rank == 0 || v.rank == 0 || k.rank != v.rank || fold_k != fold_v || batch_k != batch_v) return;
  encode(maps.k, k, p.k.data, type, "attention K tiles");
  encode(maps.v, v, p.v.data, type, "attention V tiles");
  maps.rank = k.rank;
  maps.fold_batch = fold_k ? 1 : 0;
  maps.has_batch = batch_k ? 1 : 0;
  maps.enabled = 1;
  // Q by TMA only together with K and V (the producer's TMA path).
  g.space = &p.q_space;
  g.heads = p.heads_q;
  g.columns = p.head_dim;
  g.block_rows = block_m;
  bool fold_q = false, batch_q = false;
  const MapShape q = shape_of(p.q, g, fold_q, batch_q);
  if (q.rank != 0) {
    encode(maps.q, q, p.q.data, type, "attention Q tiles");
    maps.q_rank = q.rank;
    maps.q_fold_batch = fold_q ? 1 : 0;
    maps.q_has_batch = batch_q ? 1 : 0;
    maps.q_enabled = 1;
  }
}

void make_sm90_dq_map(const fmha::FmhaBackwardParams& p, int block_m, Sm90DqMap& map) {
  map.enabled = 0;
  if (!p.accumulate_dq) return;
  TileGrid g;
  g.space = &p.q_space;
  g.dims = p.dims;
  g.dilation = p.dilation;
  g.heads = p.heads_q;
  g.batch = p.batch;
  g.columns = p.head_dim;
  g.box_columns = kDqBoxColumns;
  g.block_rows = block_m;
  g.element_bytes = 4;
  bool fold = false, has_batch = false;
  const MapShape s = shape_of(p.dq_accum, g, fold, has_batch);
  if (s.rank == 0) return;
  encode(map.map, s, p.dq_accum.data, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, "backward dQ accumulator tiles");
  map.rank = s.rank;
  map.fold_batch = fold ? 1 : 0;
  map.has_batch = has_batch ? 1 : 0;
  map.enabled = 1;
}

}  // namespace attnkit::cuda::fmha_sm90
