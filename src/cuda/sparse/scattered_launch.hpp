// Launchers of the scattered-sparse kernels, called by scattered_attention.cpp once the arguments are
// checked: the mask packers, the backward's preprocess, and the forward / dQ / dK-dV kernels for one
// dtype and one compiled width (the smallest of kScatteredWidths that holds max(D, Dv)).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "attnkit/dtype.hpp"
#include "cuda/common/mask_bits_by_key.hpp"  // MaskBytes
#include "cuda/sparse/scattered_params.hpp"

namespace attnkit::cuda::sparse {

inline constexpr int kScatteredWidths[] = {32, 64, 128};

// 0 when no compiled width holds max(head_dim, head_dim_v).
inline int scattered_width(int64_t head_dim, int64_t head_dim_v) {
  const int64_t widest = head_dim > head_dim_v ? head_dim : head_dim_v;
  for (int width : kScatteredWidths) {
    if (widest <= width) return width;
  }
  return 0;
}

ATTNKIT_SPARSE_HOST_DEVICE int32_t words_for(int32_t bits) { return (bits + 31) / 32; }

// Columns per staged tile of the kernels of one compiled width (kScatteredTile): 256 up to width 64, else
// 128. The union lists are built for the same tile.
inline int scattered_tile_columns(int width) { return width <= 64 ? 256 : 128; }

// The layout of the union lists of `mask` (whose rows have `columns` columns) in tiles of `tile_columns`
// (128 or 256), entries and lengths at the given addresses (TileLists).
TileLists tile_lists_layout(const PackedMask& mask, int32_t columns, int tile_columns, const uint32_t* entries,
                            const uint32_t* lengths);
// Writes every list of `lists` (entries and lengths) from the packed `mask` (scattered_tile_lists.cu).
void launch_build_tile_lists(const PackedMask& mask, const TileLists& lists, cudaStream_t stream);

// words[slice][row][words_for(columns)] (see PackedMask).
void launch_pack_mask(const MaskBytes& mask, uint32_t* words, cudaStream_t stream);
// words[slice][column][words_for(rows)]: the transpose (launch_mask_bits_by_key).
void launch_pack_mask_transposed(const MaskBytes& mask, uint32_t* words, cudaStream_t stream);
// p.lse_log2 and p.delta for every (batch, query head, query); rows past seq_q up to row_pitch get 0.
void launch_scattered_backward_preprocess(const ScatteredBackwardParams& p, DType dtype, cudaStream_t stream);

// `hopper`: the device is sm_90, where width 64 stages K and V with TMA when the layout allows
// (scattered_tma_maps.hpp), else with cp.async.
void launch_scattered_forward_f16(const ScatteredForwardParams& p, int32_t batch, int width, bool hopper,
                                  cudaStream_t stream);
void launch_scattered_forward_bf16(const ScatteredForwardParams& p, int32_t batch, int width, bool hopper,
                                   cudaStream_t stream);
// What the backward's launches need of the device: `hopper` as for the forward (the dQ kernel's K and V and the dK/dV
// kernel's Q and dO: TMA where the layout allows and the grid fills the waves, scattered_tma_fills_waves); the opt-in
// shared memory per block, which decides the dK/dV kernel's warps (scattered_dkdv_warps); the multiprocessors.
struct ScatteredDevice {
  bool hopper = false;
  int max_shared_bytes = 0;
  int multiprocessors = 0;
};
void launch_scattered_backward_f16(const ScatteredBackwardParams& p, int width, const ScatteredDevice& device,
                                   cudaStream_t stream);
void launch_scattered_backward_bf16(const ScatteredBackwardParams& p, int width, const ScatteredDevice& device,
                                    cudaStream_t stream);

// Whether a backward kernel's producer-warp form (15 walking warps: 240 rows a CTA) runs `ctas_tma` CTAs in waves
// filled at least kTmaWaveFill as well as the cp.async form's `ctas_cp_async` (256 rows a CTA), one CTA per
// multiprocessor. The TMA form's walk is faster (its warps do not meet at every tile), its grid up to 7 % larger: on an
// H200 (B1 H16 D64, fwd+bwd minus fwd) the TMA dQ kernel took 5-6 % off S16384 1 % and S8192 0.1 % and 2 % off S8192
// 1 % (waves filled 0.96 and 0.88 as well) but lost 1 % at S8192 3 % and 2 % at S4096 1 % (0.75); the TMA dK/dV
// kernel on top took 6 % off S16384 1 %, 5 % off S8192 0.1 %, 2 % off 1 % and lost 2 % at 3 %.
inline constexpr double kTmaWaveFill = 0.85;
bool scattered_tma_fills_waves(int64_t ctas_tma, int64_t ctas_cp_async, int multiprocessors);

// The warps per CTA of the dK/dV kernel of `width` on a device of `max_shared_bytes` opt-in shared memory per block:
// 16 up to width 64 where their shared memory fits (SM90: 227 KiB), else 8 (SM80's 163 KiB at width 64: the 16-warp
// kernel needs 164 KiB); 8 at width 128.
int scattered_dkdv_warps(int width, int max_shared_bytes);
// The least shared memory per block the forward (the cp.async kernel, 16 warps up to width 64) or the backward (dQ
// and the dK/dV kernel of 8 warps) kernels of `width` need: devices with less cannot run the path at that width.
int scattered_least_shared_bytes(int width, bool backward);

}  // namespace attnkit::cuda::sparse
