// Hopper GEMM instances (sm_90a): CUTLASS 3.x collectives built by CollectiveBuilder — a TMA + wgmma
// mainloop with as many smem stages as fit beside the epilogue, a TMA epilogue computing
// alpha * acc + beta * C (C is read only when beta != 0) — in the warp-specialised persistent
// GemmUniversal kernel (one producer warp group issuing TMA loads, one or two consumer warp groups
// issuing wgmma: cooperative splits one tile between two, ping-pong alternates two tiles) over the
// persistent tile scheduler, batched through the L mode (batch stride 0 broadcasts: TMA drops the mode).
// Wide-tile rows (WideTile: 192 x 192, 192 x 96) run the same TMA + wgmma collective in a kernel of our own with three
// consumer warp groups (gemm_sm90_wide_tile.cuh) and the staged epilogue (gemm_sm90_staged_epilogue.cuh: alpha * acc +
// beta * C through shared memory, stored in 16-byte row chunks), whose Params hold C's address, not TMA descriptors.
// Operands are the canonical form of gemm_shape.hpp: C row-major, A and B K- or MN-major by template.
// Types: f16 / bf16 in and out with fp32 accumulation; fp32 on TF32 wgmma (TMA rounds each operand to TF32
// on its way to shared memory; an MN-major A goes through registers, CUTLASS's register-sourced collective,
// and an MN-major B beside an MN-major A is transposed in shared memory; an MN-major B beside a K-major A is
// computed as C^T = B^T A^T with C column-major, see Sm90Gemm); fp32 as 3xTF32 (fp32-level error) with the
// mainloop of gemm_sm90_3xtf32_mainloop.cuh in place of the builder's.
// Split-K rows (gemm_split_k.hpp) run the same mainloop on the K slices of a batch-1 problem as the L mode
// (slice l's A and B start l slices along K) with an epilogue that reads no C and writes fp32 partial sums
// into the workspace, one M x N buffer per slice; the ordered sum of gemm_split_k.hpp then writes C. Swapped
// split-K rows (CooperativeSplitKSwapped) do the same on C^T = B^T A^T for decode-like M: the wide N fills the
// tile's 128 wgmma rows, the few tokens of M its 64 columns (fp32 rows: also in one slice, see there).
//
// What TMA needs is 16-byte aligned base addresses, leading dimensions and batch strides; M and K are free
// (the loads of A and B are bounded by the tensors' extents, zero fill beyond them, and the epilogue bounds
// C's rows). N, C's contiguous extent, is not: the epilogue writes past the end of C's rows when N is not a
// multiple of 16 bytes (an H200 run found such writes with 16-bit types), so the refusal asks for it, and the
// registry stages such problems with N rounded up (gemm_staging.hpp: pad_n). CUTLASS's can_implement also
// asks for the contiguous extents of A and B to be multiples of 16 bytes (it assumes packed tensors, where
// the extent is the leading dimension): the refusal checks the strides itself and asks can_implement about
// M and K rounded up (swapped rows: CUTLASS's A is B^T, whose contiguous extent is N). An operand that
// misses the stride rule is staged too; the 32-bit problem shape is the only hard limit.
//
// A plan makes the runner once: can_implement, the workspace size (0 but for stream-K and split-K), the dynamic
// shared memory attribute (once per kernel and device) and, for stream-K rows, where the barriers that must be
// cleared before each launch lie in the workspace. The kernel Params (TMA descriptors, which embed the operand
// addresses, and the scheduler's) are kept per workspace, alpha and beta (gemm_params_cache.hpp): a run with
// other A, B or C addresses points the kept descriptors at them (cuTensorMapReplaceAddress) instead of encoding
// four new ones, and launches the kernel itself (launch_sm90_gemm: no per-launch attribute calls). A descriptor
// the driver could not encode (CUTLASS prints the error and carries on with a zero descriptor) stops the run with
// an error instead of launching on it.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>

#include "attnkit/error.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/kernel_attributes.hpp"
#include "cuda/common/tensor_map_address.hpp"
#include "cuda/gemm/gemm_kernel.hpp"
#include "cuda/gemm/gemm_params_cache.hpp"
#include "cuda/gemm/gemm_sm90_3xtf32_mainloop.cuh"
#include "cuda/gemm/gemm_sm90_staged_epilogue.cuh"
#include "cuda/gemm/gemm_sm90_wide_tile.cuh"
#include "cuda/gemm/gemm_split_k.hpp"
#include "cuda/gemm/gemm_staging.hpp"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/device_kernel.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

namespace attnkit::cuda::gemm::sm90 {

// Schedules: the persistent data-parallel scheduler (one CTA per output tile at a time), stream-K (the K
// loop of the tiles is split among all CTAs, partial sums reduced through the workspace), which keeps every
// SM busy when a problem has fewer tiles than SMs (decode-like M, small N), or split-K (data-parallel over
// the tiles of every K slice, fp32 partials, gemm_split_k.hpp).
struct Cooperative {
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using Scheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kStreamK = false;
  static constexpr bool kSplitK = false;
  static constexpr bool kSwapped = false;
  static constexpr bool kOverlapsEpilogue = false;
};
struct PingPong {
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
  using Scheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kStreamK = false;
  static constexpr bool kSplitK = false;
  static constexpr bool kSwapped = false;
  // One consumer warp group's epilogue runs while the other's mainloop does (the choice's cost model).
  static constexpr bool kOverlapsEpilogue = true;
};
struct CooperativeStreamK {
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using Scheduler = cutlass::gemm::StreamKScheduler;
  static constexpr bool kStreamK = true;
  static constexpr bool kSplitK = false;
  static constexpr bool kSwapped = false;
  static constexpr bool kOverlapsEpilogue = false;
};
struct CooperativeSplitK {
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using Scheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kStreamK = false;
  static constexpr bool kSplitK = true;
  static constexpr bool kSwapped = false;
  static constexpr bool kOverlapsEpilogue = false;
};
// Split-K on the swapped product C^T = B^T A^T, for decode-like problems (M 1-64 tokens against a weight of
// N x K, N in the thousands): the weight's N is wgmma's M (the tile's 128 rows, two consumer warp groups of 64)
// and the tokens' M is wgmma's N (a 64-wide tile: M = 1 pads to 64 columns of a wgmma instead of 128 rows of
// two), C^T is written column-major, which is C row-major. A K-major A is then CUTLASS's K-major B; the weight
// B is CUTLASS's A, K-major (x @ W^T) or MN-major (x @ W), both of which 16-bit wgmma reads from shared memory.
// These problems are bound by the weight's bytes, not by the multiply-adds: the output tiles (32 for N = 4096)
// times the K slices (4) keep 128 of 132 SMs streaming it, each 128 x 64 16-bit weight tile (16 KB, with 8 KB
// of A^T per stage) in a pipeline of as many stages as fit (about 8: 128 KB of weight in flight per SM, several
// times what one SM needs to cover DRAM latency at its share of the bandwidth).
// Floor (H200, about 4.3 TB/s copy rate): 1 x 4096 x 4096 16-bit reads the 32 MiB weight, 8 KiB of A and writes
// 64 KiB of fp32 partials and 8 KiB of C: about 33.6 MB, 7.8 us of DRAM time, plus the ordered sum (a second
// launch). 64 x 4096 x 4096: the weight, 512 KiB of A, 4 MiB of partials written and read back (mostly from L2),
// 512 KiB of C (twice with beta): about 34.5 MB of DRAM, 8 us, plus the sum; the wgmma work (2.1 GFLOP, no padding
// at M = 64) takes about 3 us of the 128 SMs' tensor cores and overlaps the loads. Measured (docs/perf.md, GEMM
// decode rows): 13.4 us and 14.5 us per call in a CUDA graph, both launches included (cuBLAS 13.2 and 11.7).
// fp32 rows (TF32 tile 128 x 64 x 32, 3xTF32 128 x 64 x 16; A K-major): A^T is the K-major B that TF32 wgmma reads
// from shared memory; the weight, CUTLASS's A, is read from shared memory when K-major (x @ W^T) and through registers
// when MN-major (x @ W: CUTLASS's register-sourced TF32 collective); the 3xTF32 mainloop writes both operands K-major
// as it splits them.
// They also run in one slice where M fits the 64 columns and the weight's tiles alone fill the grid
// (gemm_swapped_split_k_slices): fp32 decode against N 14336-16384 ran on 128-row tiles (TF32 128 x 256: M = 16
// padded to 256 rows, 0.40-0.45x cuBLAS-TF32 on an H200; 3xTF32 128 x 128: M = 64 padded to 128, 0.56x SGEMM).
// Floor of TF32 16 x 16384 x 4096 (estimates): the 256 MiB weight at about 4.3 TB/s, 62 us; its padded wgmma work,
// 2 x 64 x 16384 x 4096 = 8.6 GFLOP, about 20 us at the TF32 rate of 128 SMs: bandwidth-bound.
struct CooperativeSplitKSwapped {
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using Scheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kStreamK = false;
  static constexpr bool kSplitK = true;
  static constexpr bool kSwapped = true;
  static constexpr bool kOverlapsEpilogue = false;
  static constexpr int kLeastSlices = kMinSplitKSlices;
};
// Swapped split-K on 64 weight rows a tile (one wgmma warp group, the ping-pong mainloop), for the fewest tokens
// (M within the tile's 16 columns): at N = 4096 its 64 weight tiles in 2 K slices put 128 CTAs on the weight, each
// streaming 64 rows of half of K through about 20 stages of 8 KB of weight. Its CTAs stream faster than the 128-row
// tile's where the weight sits in L2 and as fast from DRAM (H200: bf16 1-16 x 4096 x 4096 main kernel 7.3-9.0
// against 10.3-11.2 us, 11.1-11.3 against 11.2-11.9 with eight weights in turn), so it runs M <= 16 (the least
// padded split-K row there). Against wider weights whose 64-row tiles fill 0.9 to 2 waves (N 7600-16896) it runs
// them in one slice (fp32 partials, then the sum): 16 x 16384 x 4096 37.0 against the 64 x 128 ping-pong row's 38.9
// us (cuBLAS 33.2), 8 x 14336 x 4096 34.1 against 37.1.
struct PingPongSplitKSwapped {
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
  using Scheduler = cutlass::gemm::PersistentScheduler;
  static constexpr bool kStreamK = false;
  static constexpr bool kSplitK = true;
  static constexpr bool kSwapped = true;
  static constexpr bool kOverlapsEpilogue = false;
  static constexpr int kLeastSlices = 2;
};

// Tiles of 192 rows on the wide-tile kernel (gemm_sm90_wide_tile.cuh): three consumer warp groups of 64 rows, the
// staged epilogue; clusters of one, 16-bit types, data-parallel over the tiles. Cooperative's flags; its CUTLASS
// schedules are named beside the kernel's own types but not used by it.
struct WideTile : Cooperative {};

// The operand tag of the 3xTF32 rows: fp32 in and out with fp32-level error, computed by the mainloop of
// gemm_sm90_3xtf32_mainloop.cuh (CUTLASS 4.2 has no Hopper 3xTF32 collective).
struct Fast32 {};

// The mainloop collective of a row: CUTLASS's CollectiveBuilder, or the 3xTF32 mainloop for Fast32 rows.
template <bool IsFast32, class Element, class LayoutA, class LayoutB, int Alignment, bool AKMajor, bool BKMajor,
          class TileShape, class ClusterShape, int EpilogueBytes, class Schedule>
struct Sm90Mainloop {
  using type = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA, Alignment, Element, LayoutB, Alignment,
      float, TileShape, ClusterShape, cutlass::gemm::collective::StageCountAutoCarveout<EpilogueBytes>,
      typename Schedule::Mainloop>::CollectiveOp;
};
template <class Element, class LayoutA, class LayoutB, int Alignment, bool AKMajor, bool BKMajor, class TileShape,
          class ClusterShape, int EpilogueBytes, class Schedule>
struct Sm90Mainloop<true, Element, LayoutA, LayoutB, Alignment, AKMajor, BKMajor, TileShape, ClusterShape,
                    EpilogueBytes, Schedule> {
  static_assert(std::is_same_v<Schedule, Cooperative> || std::is_same_v<Schedule, CooperativeSplitK> ||
                    std::is_same_v<Schedule, CooperativeSplitKSwapped>,
                "3xTF32 rows: the cooperative schedule only, data-parallel or on K slices, swapped or not (its two "
                "consumer warp groups split the operands together, gemm_sm90_3xtf32_mainloop.cuh)");
  using type = Fast32Mainloop<TileShape, ClusterShape, AKMajor, BKMajor, EpilogueBytes>;
};

// The wide-tile rows' mainloop: CUTLASS's Hopper TMA + wgmma collective with the builder's shared-memory layouts
// and copies, on a TiledMma of one 64-row warp group per band of the tile's rows.
template <class Element, class LayoutA, class LayoutB, class TileShape, int EpilogueBytes>
struct WideTileMainloop {
  static constexpr cute::GMMA::Major kMajorA =
      cutlass::gemm::collective::detail::gmma_ss_tag_to_major_A<Element, LayoutA>();
  static constexpr cute::GMMA::Major kMajorB =
      cutlass::gemm::collective::detail::gmma_ss_tag_to_major_B<Element, LayoutB>();
  static constexpr int kWarpGroups = cute::size<0>(TileShape{}) / 64;
  using TiledMma = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<
          Element, Element, float,
          cute::Shape<cute::_64, decltype(cute::get<1>(TileShape{})), decltype(cute::get<2>(TileShape{}))>, kMajorA,
          kMajorB>(),
      cute::Layout<cute::Shape<cute::Int<kWarpGroups>, cute::_1, cute::_1>>{}));
  using SmemLayoutAtomA =
      decltype(cutlass::gemm::collective::detail::ss_smem_selector<
               kMajorA, Element, decltype(cute::get<0>(TileShape{})), decltype(cute::get<2>(TileShape{}))>());
  using SmemLayoutAtomB =
      decltype(cutlass::gemm::collective::detail::ss_smem_selector<
               kMajorB, Element, decltype(cute::get<1>(TileShape{})), decltype(cute::get<2>(TileShape{}))>());
  static constexpr int kStages = cutlass::gemm::collective::detail::compute_stage_count_or_override<
      cutlass::gemm::collective::detail::sm90_smem_capacity_bytes, Element, Element, TileShape>(
      cutlass::gemm::collective::StageCountAutoCarveout<EpilogueBytes>{});
  using type = cutlass::gemm::collective::CollectiveMma<
      cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<kStages, cute::Shape<cute::_1, cute::_1, cute::_1>,
                                                        cutlass::gemm::KernelTmaWarpSpecializedCooperative>,
      TileShape, Element, cutlass::detail::TagToStrideA_t<LayoutA>, Element, cutlass::detail::TagToStrideB_t<LayoutB>,
      TiledMma, cute::SM90_TMA_LOAD, SmemLayoutAtomA, void, cute::identity, cute::SM90_TMA_LOAD, SmemLayoutAtomB, void,
      cute::identity>;
};
template <class Element, class TileShape>
struct WideTileEpilogue {
  using CollectiveOp = StagedRowEpilogue<Element, TileShape, cute::size<0>(TileShape{}) / 64>;
};

// Operand: the element type (cutlass::half_t, cutlass::bfloat16_t; float: TF32, each operand rounded to TF32
// by TMA on its way to shared memory) or Fast32.
template <class Operand, bool AKMajor, bool BKMajor, int TileM, int TileN, int TileK, int ClusterM, int ClusterN,
          class Schedule>
struct Sm90Gemm {
  static constexpr bool kFast32 = std::is_same_v<Operand, Fast32>;
  using Element = std::conditional_t<kFast32, float, Operand>;
  static constexpr bool kAKMajor = AKMajor;
  static constexpr bool kBKMajor = BKMajor;
  // TF32 wgmma reads K-major shared memory only. CUTLASS's builder keeps K-major operands there, loads an MN-major
  // A into registers (its register-sourced collective) and transposes an MN-major B in shared memory when A is
  // MN-major too; an MN-major B beside a K-major A it exchanges with A, which its TMA epilogue does not follow (it
  // would store C^T's tiles into C). Such rows exchange the operands here instead: C^T = B^T A^T, C column-major,
  // B^T the MN-major A of CUTLASS's problem (registers) and A^T its K-major B. Swapped split-K rows
  // (CooperativeSplitKSwapped: decode-like problems) exchange them in every layout of 16-bit types, with A K-major
  // for TF32 (A^T is then the K-major B its wgmma needs), in every layout for 3xTF32 (its mainloop transposes).
  static_assert(!Schedule::kSwapped || sizeof(Element) == 2 || kFast32 || AKMajor,
                "swapped split-K TF32 rows: A K-major only (A^T is CUTLASS's B, which TF32 wgmma reads K-major)");
  static constexpr bool kSwapped = Schedule::kSwapped || (!kFast32 && sizeof(Element) == 4 && AKMajor && !BKMajor);
  // CUTLASS's A and B: ours, or B^T and A^T when swapped (B^T is K-major where B is, A^T where A is).
  static constexpr bool kCutlassAKMajor = kSwapped ? BKMajor : AKMajor;
  static constexpr bool kCutlassBKMajor = kSwapped ? AKMajor : BKMajor;
  using LayoutA = std::conditional_t<kCutlassAKMajor, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
  using LayoutB = std::conditional_t<kCutlassBKMajor, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using LayoutC = std::conditional_t<kSwapped, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr int kAlignment = 16 / static_cast<int>(sizeof(Element));
  static constexpr bool kSplitK = Schedule::kSplitK;
  // Split-K: fp32 partial sums out, no C read (the ordered sum applies alpha and beta).
  using ElementD = std::conditional_t<kSplitK, float, Element>;
  using ElementC = std::conditional_t<kSplitK, void, Element>;
  static constexpr int kAlignmentD = 16 / static_cast<int>(sizeof(ElementD));
  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::Int<TileK>>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::_1>;

  static constexpr bool kWideTile = std::is_same_v<Schedule, WideTile>;
  static_assert(!kWideTile || (sizeof(Element) == 2 && !kFast32 && ClusterM * ClusterN == 1),
                "wide-tile rows: 16-bit types in clusters of one");
  using CollectiveEpilogue = typename std::conditional_t<
      kWideTile, WideTileEpilogue<Element, TileShape>,
      cutlass::epilogue::collective::CollectiveBuilder<cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape,
                                                       ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto,
                                                       float, float, ElementC, LayoutC, kAlignmentD, ElementD, LayoutC,
                                                       kAlignmentD, typename Schedule::Epilogue>>::CollectiveOp;
  static constexpr int kEpilogueBytes = static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage));
  using CollectiveMainloop = typename std::conditional_t<
      kWideTile, WideTileMainloop<Element, LayoutA, LayoutB, TileShape, kEpilogueBytes>,
      Sm90Mainloop<kFast32, Element, LayoutA, LayoutB, kAlignment, kCutlassAKMajor, kCutlassBKMajor, TileShape,
                   ClusterShape, kEpilogueBytes, Schedule>>::type;
  using Kernel = typename std::conditional_t<
      kWideTile, std::type_identity<WideTileGemmKernel<CollectiveMainloop, CollectiveEpilogue>>,
      std::type_identity<cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                              CollectiveEpilogue, typename Schedule::Scheduler>>>::type;
  // The 3xTF32 mainloop sizes its stages itself (the builder's rows are sized by CUTLASS).
  static_assert(!kFast32 || Kernel::SharedStorageSize <= cutlass::gemm::collective::detail::sm90_smem_capacity_bytes,
                "3xTF32 row: its shared memory exceeds the Hopper opt-in limit");
  // TileM x TileN is CUTLASS's tile, of C^T on swapped rows; the problem's (C's) tile is its transpose there.
  static constexpr int kTileM = TileM;
  static constexpr int kTileN = TileN;
  static constexpr int kTileK = TileK;
  static constexpr int kProblemTileM = kSwapped ? TileN : TileM;
  static constexpr int kProblemTileN = kSwapped ? TileM : TileN;
  static constexpr bool kStreamK = Schedule::kStreamK;
  static constexpr bool kOverlapsEpilogue = Schedule::kOverlapsEpilogue;
  static constexpr bool kSwappedSplitK = Schedule::kSwapped;
  static constexpr int kLeastSlices = [] {
    if constexpr (Schedule::kSwapped) return Schedule::kLeastSlices;
    return kMinSplitKSlices;
  }();
};

// The K slices of a split-K row for `s` (0: the row refuses it): the swapped rows' rule (one slice for fp32 M within
// the 64 columns) or the common one (gemm_split_k.hpp).
template <class Gemm>
int split_k_slices_of(const GemmShape& s, const GemmDevice& device) {
  if constexpr (Gemm::kSwappedSplitK) {
    return gemm_swapped_split_k_slices(s, Gemm::kProblemTileM, Gemm::kProblemTileN, Gemm::kTileK,
                                       device.multiprocessors, Gemm::kLeastSlices);
  } else {
    return gemm_split_k_slices(s, Gemm::kProblemTileM, Gemm::kProblemTileN, Gemm::kTileK, device.multiprocessors);
  }
}

// Strides of a CUTLASS operand in its (MN, K, L) modes: `mn` the stride along M (or N), `k` along K.
template <class Stride, bool KMajor>
Stride operand_stride(int64_t mn, int64_t k, int64_t batch) {
  Stride stride{};
  if constexpr (KMajor) {
    stride = cute::make_stride(mn, cute::Int<1>{}, batch);
  } else {
    stride = cute::make_stride(cute::Int<1>{}, k, batch);
  }
  return stride;
}

// The kernel's arguments for `s`. Split-K rows: `slices` K slices as the L mode, partial sums to `partials`
// (alpha and beta are the ordered sum's). Swapped rows: the problem C^T = B^T A^T (see Sm90Gemm).
template <class Gemm>
typename Gemm::Kernel::Arguments arguments_of(const GemmShape& s, float alpha, float beta, const GemmDevice& device,
                                              int slices = 1, float* partials = nullptr) {
  using Element = typename Gemm::Element;
  using Kernel = typename Gemm::Kernel;
  using StrideA = typename Kernel::StrideA;
  using StrideB = typename Kernel::StrideB;
  using StrideC = typename Kernel::StrideC;
  // B's modes are (N, K, L).
  StrideA stride_a{};
  StrideB stride_b{};
  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  if constexpr (Gemm::kSwapped) {
    stride_a = operand_stride<StrideA, Gemm::kBKMajor>(s.b_col, s.b_row, s.b_batch);
    stride_b = operand_stride<StrideB, Gemm::kAKMajor>(s.a_row, s.a_col, s.a_batch);
    args.mainloop.ptr_A = static_cast<const Element*>(s.b);
    args.mainloop.ptr_B = static_cast<const Element*>(s.a);
  } else {
    stride_a = operand_stride<StrideA, Gemm::kAKMajor>(s.a_row, s.a_col, s.a_batch);
    stride_b = operand_stride<StrideB, Gemm::kBKMajor>(s.b_col, s.b_row, s.b_batch);
    args.mainloop.ptr_A = static_cast<const Element*>(s.a);
    args.mainloop.ptr_B = static_cast<const Element*>(s.b);
  }
  if constexpr (Gemm::kSplitK) {
    // Slice l of A and B starts l * slice along K (the batch mode's stride); slice l's partial sums are the
    // l-th packed M x N fp32 matrix.
    // Swapped rows compute the column-major C^T [N x M], whose storage is the same row-major M x N matrix.
    const int64_t slice = s.k / slices;
    const int64_t a_slice = slice * (Gemm::kAKMajor ? 1 : s.a_col), b_slice = slice * (Gemm::kBKMajor ? 1 : s.b_row);
    cute::get<2>(stride_a) = Gemm::kSwapped ? b_slice : a_slice;
    cute::get<2>(stride_b) = Gemm::kSwapped ? a_slice : b_slice;
    StrideC stride_d{};
    if constexpr (Gemm::kSwapped) {
      stride_d = cute::make_stride(cute::Int<1>{}, s.n, s.m * s.n);
      args.problem_shape = {static_cast<int>(s.n), static_cast<int>(s.m), static_cast<int>(slice), slices};
    } else {
      stride_d = cute::make_stride(s.n, cute::Int<1>{}, s.m * s.n);
      args.problem_shape = {static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(slice), slices};
    }
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    args.epilogue.ptr_C = nullptr;
    args.epilogue.dC = stride_d;
    args.epilogue.ptr_D = partials;
    args.epilogue.dD = stride_d;
    (void)alpha, (void)beta;
  } else {
    StrideC stride_c{};
    if constexpr (Gemm::kSwapped) {
      stride_c = cute::make_stride(cute::Int<1>{}, s.c_row, s.c_batch);  // C^T [N x M], column-major
      args.problem_shape = {static_cast<int>(s.n), static_cast<int>(s.m), static_cast<int>(s.k),
                            static_cast<int>(s.batch)};
    } else {
      stride_c = cute::make_stride(s.c_row, cute::Int<1>{}, s.c_batch);
      args.problem_shape = {static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k),
                            static_cast<int>(s.batch)};
    }
    args.epilogue.thread.alpha = alpha;
    args.epilogue.thread.beta = beta;
    args.epilogue.ptr_C = static_cast<const Element*>(s.c);
    args.epilogue.dC = stride_c;
    args.epilogue.ptr_D = static_cast<Element*>(s.c);
    args.epilogue.dD = stride_c;
  }
  args.mainloop.dA = stride_a;
  args.mainloop.dB = stride_b;
  args.hw_info.device_id = device.index;
  args.hw_info.sm_count = device.multiprocessors;  // else CUTLASS queries the device on every call
  return args;
}

template <class Gemm>
std::string refusal(const GemmShape& s, const GemmDevice& device) {
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  if (s.m > kMaxInt || s.n > kMaxInt || s.k > kMaxInt || s.batch > kMaxInt) {
    return "an extent beyond 2^31 - 1 (its problem shape is 32-bit)";
  }
  if (!gemm_n_aligned(s)) {
    return "N (the length of C's rows) must be a multiple of 16 bytes (8 16-bit or 4 fp32 elements): the epilogue "
           "writes whole 16-byte vectors of C's rows";
  }
  if (!tma_addressable(s)) {
    return "TMA needs 16-byte aligned base addresses, leading dimensions and batch strides";
  }
  if (static_cast<int>(Gemm::Kernel::SharedStorageSize) > device.max_shared_bytes_optin) {
    return "its shared memory exceeds the device's";
  }
  int slices = 1;
  if constexpr (Gemm::kSplitK) {
    slices = split_k_slices_of<Gemm>(s, device);
    if (slices == 0) {
      return "split-K runs batch-1 problems with fewer output tiles than a third of the SMs (half for fp32) and a "
             "K that divides into at least 3 slices (2 for fp32) of at least 4 K tiles, each a multiple of 16 bytes "
             "(swapped fp32 rows: also one slice for M within the tile's 64 columns and K a multiple of 4; the "
             "64-row ping-pong swapped rows: M within their 16 token columns, 2 slices or more, or one where their "
             "tiles fill 0.9 to 2 waves)";
    }
  }
  // M and K rounded up for CUTLASS's packed-tensor alignment check (see above): TMA bounds the loads of A and
  // B and the epilogue bounds C's rows. N is a multiple of kAlignment here (checked above).
  GemmShape rounded = s;
  auto round = [](int64_t x) { return (x + Gemm::kAlignment - 1) / Gemm::kAlignment * Gemm::kAlignment; };
  rounded.m = round(s.m), rounded.k = round(s.k);
  if (rounded.m > kMaxInt || rounded.n > kMaxInt || rounded.k > kMaxInt) {
    return "an extent beyond 2^31 - 1 (its problem shape is 32-bit)";
  }
  if constexpr (Gemm::kSplitK) rounded.k = s.k;  // slices of a multiple of kAlignment (the rule above)
  if (!Gemm::Kernel::can_implement(arguments_of<Gemm>(rounded, 1.0f, 0.0f, device, slices))) {
    return "CUTLASS can_implement refused the problem";
  }
  return "";
}

// Whether the driver encoded a TMA descriptor (a failed cuTensorMapEncodeTiled leaves CUTLASS's
// zero-initialised one as it was).
inline bool descriptor_encoded(const void* descriptor, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(descriptor);
  for (size_t i = 0; i < bytes; ++i) {
    if (p[i] != 0) return true;
  }
  return false;
}

// The region of a stream-K kernel's workspace that must be zero before each launch: its tile barriers (peers
// of a split tile count up in them and wait on the count; the kernel does not reset them, so every launch
// starts from zeros). CUTLASS's initialize_workspace computes the region's place on every call and clears it;
// here it is computed once per runner, with the calls and arguments of the kernel's and the stream-K
// scheduler's initialize_workspace (CUTLASS 4.2: the epilogue's workspace first, then the scheduler's, whose
// reduction buffers precede its barriers), and a run only clears it. `exact` is false where that layout does
// not hold (an epilogue with a workspace of its own): runs then call initialize_workspace as CUTLASS does.
struct BarrierRegion {
  size_t offset = 0;
  size_t bytes = 0;
  bool exact = false;
};

template <class Gemm>
BarrierRegion stream_k_barrier_region(const typename Gemm::Kernel::Arguments& args, size_t kernel_workspace_bytes) {
  using Kernel = typename Gemm::Kernel;
  using Scheduler = typename Kernel::TileScheduler;
  using SchedulerParams = typename Scheduler::Params;
  BarrierRegion region;
  if (Kernel::CollectiveEpilogue::get_workspace_size(args.problem_shape, args.epilogue) != 0) return region;
  const auto problem_mnkl = cute::append<4>(args.problem_shape, 1);
  const typename Gemm::TileShape tile_shape{};
  const typename Gemm::ClusterShape cluster_shape{};
  const dim3 problem_blocks = Scheduler::get_tiled_cta_shape_mnl(problem_mnkl, tile_shape, cluster_shape);
  const auto k_tiles = static_cast<uint32_t>(
      cute::size(cute::ceil_div(cute::shape<2>(problem_mnkl), cute::shape<2>(typename Gemm::TileShape{}))));
  size_t barrier_bytes = 0, reduction_bytes = 0;
  SchedulerParams::get_workspace_component_sizes(
      problem_blocks, k_tiles, cutlass::gemm::to_gemm_coord(tile_shape), cutlass::gemm::to_gemm_coord(cluster_shape),
      barrier_bytes, reduction_bytes, args.hw_info, args.scheduler.splits, args.scheduler.max_swizzle_size,
      args.scheduler.raster_order, args.scheduler.decomposition_mode, args.scheduler.reduction_mode,
      Kernel::NumMmaWarpGroups, cutlass::sizeof_bits<typename Scheduler::BarrierType>::value,
      cutlass::sizeof_bits<typename Kernel::ElementAccumulator>::value,
      Kernel::CollectiveEpilogue::get_store_pipe_increment(typename Gemm::TileShape{}), 1);
  if (reduction_bytes + barrier_bytes > kernel_workspace_bytes) return region;  // not the layout above
  region.offset = reduction_bytes;
  region.bytes = barrier_bytes;
  region.exact = true;
  return region;
}

// Launches `params` on the kernel's grid: through the runtime's extended launch with the cluster as a launch
// attribute (what CUTLASS's device adapter does, without its per-launch cudaFuncSetAttribute: clusters of up
// to 8 CTAs are portable, so NonPortableClusterSizeAllowed is never needed, and the dynamic shared memory limit
// is raised once when the runner is made).
template <class Gemm>
cudaError_t launch_sm90_gemm(typename Gemm::Kernel::Params& params, dim3 grid, cudaStream_t stream) {
  using Kernel = typename Gemm::Kernel;
  static constexpr unsigned kClusterM = cute::size<0>(typename Gemm::ClusterShape{});
  static constexpr unsigned kClusterN = cute::size<1>(typename Gemm::ClusterShape{});
  static_assert(kClusterM * kClusterN <= 8, "a cluster beyond the portable 8 CTAs needs NonPortableClusterSizeAllowed");
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = Kernel::get_block_shape();
  config.dynamicSmemBytes = Kernel::SharedStorageSize;
  config.stream = stream;
  cudaLaunchAttribute cluster{};
  if constexpr (kClusterM * kClusterN > 1) {
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = kClusterM;
    cluster.val.clusterDim.y = kClusterN;
    cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = 1;
  }
  void* arguments[] = {&params};
  return cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(cutlass::device_kernel<Kernel>), arguments);
}

template <class Gemm>
class Sm90Runner final : public GemmRunner {
  using Params = typename Gemm::Kernel::Params;

 public:
  // The kernel's Params with the grid they launch on (a function of the problem and the device only).
  struct Launch {
    Params params{};
    dim3 grid{};
  };

  Sm90Runner(const GemmShape& shape, const GemmDevice& device) : device_(device) {
    if constexpr (Gemm::kSplitK) {
      slices_ = split_k_slices_of<Gemm>(shape, device);
      if (slices_ == 0) throw Error(Status::internal, "sm90 split-K gemm: made for a shape it refuses");
      partial_bytes_ = gemm_split_k_partial_bytes(shape, slices_);
    }
    const auto args = arguments_of<Gemm>(shape, 1.0f, 0.0f, device, slices_);
    kernel_workspace_bytes_ = static_cast<int64_t>(Gemm::Kernel::get_workspace_size(args));
    workspace_bytes_ = partial_bytes_ + kernel_workspace_bytes_;
    if constexpr (Gemm::kStreamK) {
      barriers_ = stream_k_barrier_region<Gemm>(args, static_cast<size_t>(kernel_workspace_bytes_));
    }
    check_cuda(raise_dynamic_shared_memory_once(cutlass::device_kernel<typename Gemm::Kernel>,
                                                static_cast<int>(Gemm::Kernel::SharedStorageSize)),
               "cudaFuncSetAttribute (sm90 gemm)");
  }

  int64_t workspace_bytes() const override { return workspace_bytes_; }

  // Workspace: the split-K partial sums (partial_bytes_, 0 for other rows), then CUTLASS's own.
  void run(const GemmShape& shape, float alpha, float beta, void* workspace, cudaStream_t stream) const override {
    // A row without workspace ignores the caller's (any address): its Params do not depend on it.
    if (workspace_bytes_ == 0) workspace = nullptr;
    auto* partials = static_cast<float*>(workspace);
    void* kernel_workspace =
        kernel_workspace_bytes_ > 0 ? static_cast<unsigned char*>(workspace) + partial_bytes_ : nullptr;
    // Split-K kernels compute alpha = 1, beta = 0 into the partials; the sum applies the call's.
    const GemmParamsKey key =
        Gemm::kSplitK ? GemmParamsKey{workspace, 1.0f, 0.0f} : GemmParamsKey{workspace, alpha, beta};
    const GemmOperandAddresses operands = operand_addresses(shape);
    if constexpr (Gemm::kStreamK) clear_barriers(shape, alpha, beta, partials, kernel_workspace, stream);
    Launch launch = cache_.get(
        key, operands,
        [&] { return build(arguments_of<Gemm>(shape, alpha, beta, device_, slices_, partials), kernel_workspace); },
        [](Launch& l, const GemmOperandAddresses& from, const GemmOperandAddresses& to) { patch(l.params, from, to); });
    check_cuda(launch_sm90_gemm<Gemm>(launch.params, launch.grid, stream), "sm90 gemm launch");
    // The split-K rows' generated files define CUTLASS_ENABLE_GDC_FOR_SM90 (cmake/attnkit_gemm_instances.cmake):
    // each consumer warp group signals launch_dependents once its last tile's main loop is done, so the ordered sum,
    // launched as a programmatic dependent, is scheduled during the GEMM's tail (its griddepcontrol.wait holds its
    // reads until the GEMM grid has finished).
    if constexpr (Gemm::kSplitK) {
      sum_split_k_slices(shape, partials, slices_, alpha, beta, device_.multiprocessors, stream, true);
    }
  }

  // How many Params were built and patched (tests).
  int64_t params_builds() const { return cache_.builds(); }
  int64_t params_patches() const { return cache_.patches(); }

 private:
  // The addresses the kernel's TMA descriptors point at: CUTLASS's A and B (B^T and A^T on swapped rows), and C,
  // which both the C load and the D store address (split-K rows store to the partial sums, part of the key).
  static GemmOperandAddresses operand_addresses(const GemmShape& s) {
    GemmOperandAddresses o;
    o.a = Gemm::kSwapped ? s.b : s.a;
    o.b = Gemm::kSwapped ? s.a : s.b;
    o.c = Gemm::kSplitK ? nullptr : s.c;
    return o;
  }

  // Params built by CUTLASS (the driver encodes the TMA descriptors here), checked.
  static Launch build(const typename Gemm::Kernel::Arguments& args, void* kernel_workspace) {
    Launch launch;
    launch.params = Gemm::Kernel::to_underlying_arguments(args, kernel_workspace);
    check_descriptors(launch.params);
    launch.grid = Gemm::Kernel::get_grid_shape(launch.params);
    return launch;
  }

  // Points the descriptors of Params built for `from` at `to`. Nothing else in the Params depends on A, B or C:
  // the mainloops' Params are their TMA descriptors and transaction sizes, the epilogue's its descriptors and
  // alpha / beta, the scheduler's the problem's tiling and the workspace.
  static void patch(Params& params, const GemmOperandAddresses& from, const GemmOperandAddresses& to) {
    if (from.a != to.a) replace_tensor_map_address(descriptor(params.mainloop.tma_load_a), to.a, "sm90 gemm A");
    if (from.b != to.b) replace_tensor_map_address(descriptor(params.mainloop.tma_load_b), to.b, "sm90 gemm B");
    if constexpr (Gemm::kWideTile) {  // the staged epilogue stores through pointers
      params.epilogue.ptr_C = static_cast<decltype(params.epilogue.ptr_C)>(to.c);
      params.epilogue.ptr_D = static_cast<decltype(params.epilogue.ptr_D)>(const_cast<void*>(to.c));
    } else if constexpr (!Gemm::kSplitK) {
      if (from.c != to.c) {
        replace_tensor_map_address(descriptor(params.epilogue.tma_load_c), to.c, "sm90 gemm C");
        replace_tensor_map_address(descriptor(params.epilogue.tma_store_d), to.c, "sm90 gemm D");
      }
    }
  }

  // The descriptor inside a TMA copy of our own copy of the Params (CUTLASS hands it out const).
  template <class TmaCopy>
  static void* descriptor(TmaCopy& copy) {
    return const_cast<cute::TmaDescriptor*>(copy.get_tma_descriptor());
  }

  // Stream-K: the barriers start every launch at zero (see BarrierRegion).
  void clear_barriers(const GemmShape& shape, float alpha, float beta, float* partials, void* kernel_workspace,
                      cudaStream_t stream) const {
    if (kernel_workspace_bytes_ == 0) return;
    if (barriers_.exact) {
      if (barriers_.bytes == 0) return;
      check_cuda(
          cudaMemsetAsync(static_cast<unsigned char*>(kernel_workspace) + barriers_.offset, 0, barriers_.bytes, stream),
          "cudaMemsetAsync (sm90 stream-K gemm barriers)");
      return;
    }
    const auto args = arguments_of<Gemm>(shape, alpha, beta, device_, slices_, partials);
    if (Gemm::Kernel::initialize_workspace(args, kernel_workspace, stream, nullptr) != cutlass::Status::kSuccess) {
      throw Error(Status::cuda_error, "sm90 gemm: initializing the workspace failed");
    }
  }

  static void check_descriptors(const Params& params) {
    bool encoded = descriptor_encoded(params.mainloop.tma_load_a.get_tma_descriptor(), sizeof(cute::TmaDescriptor)) &&
                   descriptor_encoded(params.mainloop.tma_load_b.get_tma_descriptor(), sizeof(cute::TmaDescriptor));
    if constexpr (!Gemm::kWideTile) {  // the staged epilogue has no descriptors
      encoded = encoded &&
                (Gemm::kSplitK ||  // split-K rows read no C
                 descriptor_encoded(params.epilogue.tma_load_c.get_tma_descriptor(), sizeof(cute::TmaDescriptor))) &&
                descriptor_encoded(params.epilogue.tma_store_d.get_tma_descriptor(), sizeof(cute::TmaDescriptor));
    }
    if (!encoded) {
      throw Error(Status::cuda_error,
                  "sm90 gemm: the CUDA driver could not encode a TMA descriptor (cuTensorMapEncodeTiled failed; "
                  "see the error CUTLASS printed on stderr), so the kernel was not launched");
    }
  }

  GemmDevice device_;
  int slices_ = 1;  // split-K rows: the K slices
  int64_t partial_bytes_ = 0;
  int64_t kernel_workspace_bytes_ = 0;
  int64_t workspace_bytes_ = 0;
  BarrierRegion barriers_;  // stream-K rows
  GemmParamsCache<Launch> cache_;
};

template <class Gemm>
std::unique_ptr<GemmRunner> make_runner(const GemmShape& shape, const GemmDevice& device) {
  return std::make_unique<Sm90Runner<Gemm>>(shape, device);
}

template <class Gemm>
const GemmKernel& kernel_entry(const char* name, DType dtype, GemmMath math) {
  static const GemmKernel kernel = [&] {
    GemmKernel k;
    k.name = name;
    k.tier = GemmTier::sm90;
    k.dtype = dtype;
    k.math = math;
    k.a_k_major = Gemm::kAKMajor ? 1 : 0;
    k.b_k_major = Gemm::kBKMajor ? 1 : 0;
    k.architecture = 90;
    k.tile_m = Gemm::kProblemTileM;  // the problem's tile (C's), for the choice and the tuner's estimate
    k.tile_n = Gemm::kProblemTileN;
    k.stream_k = Gemm::kStreamK;
    k.split_k = Gemm::kSplitK;
    k.overlaps_epilogue = Gemm::kOverlapsEpilogue;
    k.staged_epilogue = Gemm::kWideTile;
    k.refusal = &refusal<Gemm>;
    k.make_runner = &make_runner<Gemm>;
    return k;
  }();
  return kernel;
}

}  // namespace attnkit::cuda::gemm::sm90
