// Hopper 3xTF32 mainloop (sm_90a): fp32 GEMM with fp32-level error on TF32 tensor cores, as a CUTLASS 3.x
// mainloop collective of the warp-specialised cooperative GemmUniversal kernel (gemm_sm90.cuh pairs it with
// CUTLASS's TMA epilogue and persistent scheduler). CUTLASS 4.2 has a 3xTF32 mainloop for SM80 (mma.sync,
// whose operands pass through registers where a thread can split them) but none for wgmma, which reads B, and
// here A too, from shared memory.
//
// Algorithm: x = big + small, big = tf32(x) rounded to nearest, small = tf32(x - big) (x - big is exact in
// fp32, |small| <= 2^-11 |x|); a * b is computed as small_a big_b + big_a small_b + big_a big_b, three TF32
// products accumulated in fp32 (small_a small_b, below 2^-22 |a b|, is dropped, as is small's own rounding, at
// most 2^-22 |x|): about 2^-22 relative error per product, below the fp32 accumulation's over any useful K. wgmma
// adds into its accumulator with truncation, whose bias grows with the number of additions (measured on an H200
// with one accumulator over all of K: 2.9e-5 relative L2 at K 4096, 1e-4 at K 14336); so the wgmma of one K tile
// accumulate into a zeroed tile accumulator, which is then added to the output tile's accumulator with rounded
// fp32 additions.
//
// Per K tile (BLK_K = 16 for the 128 x 128 rows): the producer warp's TMA loads the fp32 tiles of A (BLK_M x
// BLK_K) and B (BLK_N x BLK_K) unconverted (a FLOAT32 tensor map; CUTLASS's TF32 rows use a TFLOAT32 one, which
// rounds) into a pipeline stage, in their global majorness. The 256 threads of the two consumer warp groups split
// the stage together: each reads 16-byte vectors of the loaded tiles and writes the big and small parts into
// K-major swizzled buffers (TF32 wgmma reads K-major shared memory only: MN-major operands are transposed on the
// way), fences them for the tensor cores' async proxy, meets the other warp group at a named barrier, and
// releases the stage to the producer at once. Each warp group then issues 3 x BLK_K / 8 wgmma (64 x BLK_N x 8)
// for its 64 rows. The split parts rotate among three buffers: the split of K tile k + 1 runs while the wgmma of
// tile k execute and overwrites the buffer tile k - 2 was read from; each warp group has waited for its wgmma of
// tile k - 1 (to add their tile accumulator) before the barrier of tile k, so both have finished tile k - 2.
// One barrier per K tile, one more per output tile (the previous tile's wgmma of both warp groups done before
// buffer 0 is rewritten).
//
// Budget (128 x 128 x 16, estimates, not measurements): a K tile's wgmma are 3 x 128 x 128 x 16 multiply-adds,
// about 770 cycles of an SM's TF32 tensor cores; shared memory moves about 120 KB for it (the split reads 16 KB
// and writes 32 KB, the wgmma read 72 KB), about 940 cycles at 128 bytes a cycle. Shared memory bounds the loop
// at about 2 x 128 x 128 x 16 / 940 = 560 useful FLOP a cycle per SM (about 130 TF/s on an H100 at 1.75 GHz),
// against cuBLAS's SGEMM at about 50 TF/s. Shared memory: three split buffers (96 KB), the epilogue's, and as
// many 16 KB loaded stages as fit (Fast32Mainloop::kStages).
#pragma once
#include <cstdint>
#include <type_traits>
#include <utility>

#include "cuda/gemm/gemm_tf32_split.cuh"
#include "cute/arch/cluster_sm90.hpp"
#include "cute/atom/mma_atom.hpp"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"
#include "cutlass/detail/layout.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass/pipeline/pipeline.hpp"

namespace attnkit::cuda::gemm::sm90 {

// TileShape: (BLK_M, BLK_N, BLK_K); AKMajor / BKMajor: the operands' majorness in global memory (the canonical
// form's, gemm_shape.hpp); EpilogueBytes: the epilogue's shared memory, which the stages leave room for.
template <class TileShape_, class ClusterShape_, bool AKMajor, bool BKMajor, int EpilogueBytes>
struct Fast32Mainloop {
  using TileShape = TileShape_;
  using ClusterShape = ClusterShape_;
  static constexpr int kTileM = cute::size<0>(TileShape{});
  static constexpr int kTileN = cute::size<1>(TileShape{});
  static constexpr int kTileK = cute::size<2>(TileShape{});
  static_assert(cute::size(ClusterShape{}) == 1, "3xTF32 mainloop: clusters of one CTA (no TMA multicast)");
  static_assert(kTileM % 128 == 0, "3xTF32 mainloop: two consumer warp groups of 64-row wgmma split tile M");
  static_assert(kTileK % 8 == 0 && kTileK <= 32,
                "3xTF32 mainloop: K tile a multiple of 8 (the TF32 wgmma's K) "
                "and at most 32 (128 bytes of fp32, the widest swizzle)");

  static constexpr int kConsumerThreads = 2 * cutlass::NumThreadsPerWarpGroup;
  static constexpr int kBuffers = 3;  // split parts in flight: see above
  static constexpr int kSplitBytes = kBuffers * 2 * (kTileM + kTileN) * kTileK * static_cast<int>(sizeof(float));
  static constexpr int kStageBytes = (kTileM + kTileN) * kTileK * static_cast<int>(sizeof(float));
  // Loaded stages: what fits beside the split buffers and the epilogue (1 KB left for the kernel's barriers and
  // scheduler state), each with its pipeline's two 8-byte barriers; more than 8 buys nothing (the stages are
  // released as soon as they are split).
  static constexpr int kStagesFitting = (cutlass::gemm::collective::detail::sm90_smem_capacity_bytes -
                                         (EpilogueBytes + 127) / 128 * 128 - kSplitBytes - 1024) /
                                        (kStageBytes + 16);
  static constexpr int kStages = kStagesFitting < 8 ? kStagesFitting : 8;
  static_assert(kStages >= 2, "3xTF32 mainloop: fewer than two loaded stages fit in shared memory");

  using DispatchPolicy =
      cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<kStages, ClusterShape,
                                                        cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using ArchTag = typename DispatchPolicy::ArchTag;
  using ElementA = float;
  using ElementB = float;
  using ElementAccumulator = float;
  using StrideA = cutlass::gemm::TagToStrideA_t<
      std::conditional_t<AKMajor, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>>;
  using StrideB = cutlass::gemm::TagToStrideB_t<
      std::conditional_t<BKMajor, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>>;
  // Two warp groups along M, each issuing 64 x BLK_N x 8 wgmma on K-major TF32 operands in shared memory.
  using TiledMma =
      decltype(cute::make_tiled_mma(cute::GMMA::ss_op_selector<cutlass::tfloat32_t, cutlass::tfloat32_t, float,
                                                               TileShape, cute::GMMA::Major::K, cute::GMMA::Major::K>(),
                                    cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>{}));
  static_assert(cute::size(TiledMma{}) == kConsumerThreads);

  using MainloopPipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = cutlass::PipelineState<kStages>;
  using PipelineParams = typename MainloopPipeline::Params;
  static constexpr int NumProducerThreadEvents = 1;

  using GmemTiledCopyA = cute::SM90_TMA_LOAD;
  using GmemTiledCopyB = cute::SM90_TMA_LOAD;

  // Loaded tiles: the swizzled layout TMA writes for the global majorness (MN-major tiles step along K first, as
  // CUTLASS's collectives do, for the largest TMA box).
  template <bool KMajor, int Rows>
  using LoadedLayout = decltype(cute::tile_to_shape(
      cutlass::gemm::collective::detail::ss_smem_selector < KMajor ? cute::GMMA::Major::K : cute::GMMA::Major::MN,
      float, cute::Int<Rows>, cute::Int < kTileK >> (),
      cute::make_shape(cute::Int<Rows>{}, cute::Int<kTileK>{}, cute::Int<kStages>{}),
      std::conditional_t<KMajor, cute::Step<cute::_1, cute::_2, cute::_3>,
                         cute::Step<cute::_2, cute::_1, cute::_3>>{}));
  // Split parts: K-major, as the wgmma reads them.
  template <int Rows>
  using SplitLayout = decltype(cute::tile_to_shape(
      cutlass::gemm::collective::detail::ss_smem_selector<cute::GMMA::Major::K, cutlass::tfloat32_t, cute::Int<Rows>,
                                                          cute::Int<kTileK>>(),
      cute::make_shape(cute::Int<Rows>{}, cute::Int<kTileK>{}, cute::Int<kBuffers>{})));
  using LoadedLayoutA = LoadedLayout<AKMajor, kTileM>;
  using LoadedLayoutB = LoadedLayout<BKMajor, kTileN>;
  using SplitLayoutA = SplitLayout<kTileM>;
  using SplitLayoutB = SplitLayout<kTileN>;
  // Swizzled buffers start at a multiple of the widest swizzle's period (8 rows of 128 bytes), so that the
  // layouts' offsets swizzle as TMA's and the wgmma's shared memory addresses do.
  static constexpr size_t kAlignment = 1024;

  struct SharedStorage {
    struct TensorStorage : cute::aligned_struct<static_cast<int>(kAlignment), cute::_0> {
      cute::array_aligned<float, cute::cosize_v<LoadedLayoutA>, kAlignment> loaded_a;
      cute::array_aligned<float, cute::cosize_v<LoadedLayoutB>, kAlignment> loaded_b;
      cute::array_aligned<cutlass::tfloat32_t, cute::cosize_v<SplitLayoutA>, kAlignment> big_a;
      cute::array_aligned<cutlass::tfloat32_t, cute::cosize_v<SplitLayoutA>, kAlignment> small_a;
      cute::array_aligned<cutlass::tfloat32_t, cute::cosize_v<SplitLayoutB>, kAlignment> big_b;
      cute::array_aligned<cutlass::tfloat32_t, cute::cosize_v<SplitLayoutB>, kAlignment> small_b;
    } tensors;
    using PipelineStorage = typename MainloopPipeline::SharedStorage;
    PipelineStorage pipeline;
  };
  using TensorStorage = typename SharedStorage::TensorStorage;
  using PipelineStorage = typename SharedStorage::PipelineStorage;

  struct Arguments {
    const float* ptr_A = nullptr;
    StrideA dA{};
    const float* ptr_B = nullptr;
    StrideB dB{};
  };

  static constexpr uint32_t kTransactionBytes = static_cast<uint32_t>(kStageBytes);

  struct Params {
    using TmaA = decltype(cute::make_tma_copy_A_sm90(
        GmemTiledCopyA{},
        cute::make_tensor(static_cast<const float*>(nullptr), cute::repeat_like(StrideA{}, int32_t(0)), StrideA{}),
        LoadedLayoutA{}(cute::_, cute::_, cute::Int<0>{}), TileShape{}, ClusterShape{}));
    using TmaB = decltype(cute::make_tma_copy_B_sm90(
        GmemTiledCopyB{},
        cute::make_tensor(static_cast<const float*>(nullptr), cute::repeat_like(StrideB{}, int32_t(0)), StrideB{}),
        LoadedLayoutB{}(cute::_, cute::_, cute::Int<0>{}), TileShape{}, ClusterShape{}));
    TmaA tma_load_a;
    TmaB tma_load_b;
    uint32_t tma_transaction_bytes = kTransactionBytes;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(const ProblemShape& problem_shape, const Arguments& args, void*) {
    const auto [m, n, k, l] = cute::append<4>(problem_shape, 1);
    const auto a = cute::make_tensor(args.ptr_A, cute::make_layout(cute::make_shape(m, k, l), args.dA));
    const auto b = cute::make_tensor(args.ptr_B, cute::make_layout(cute::make_shape(n, k, l), args.dB));
    return {cute::make_tma_copy_A_sm90(GmemTiledCopyA{}, a, LoadedLayoutA{}(cute::_, cute::_, cute::Int<0>{}),
                                       TileShape{}, ClusterShape{}),
            cute::make_tma_copy_B_sm90(GmemTiledCopyB{}, b, LoadedLayoutB{}(cute::_, cute::_, cute::Int<0>{}),
                                       TileShape{}, ClusterShape{}),
            kTransactionBytes};
  }

  // As CUTLASS's collectives: the contiguous extents of A and B multiples of 16 bytes (as if the tensors were
  // packed; gemm_sm90.cuh checks the strides themselves and asks about extents rounded up).
  template <class ProblemShape>
  static bool can_implement(const ProblemShape& problem_shape, const Arguments&) {
    const auto [m, n, k, l] = cute::append<4>(problem_shape, 1);
    constexpr int kElements = 16 / static_cast<int>(sizeof(float));
    return cutlass::detail::check_alignment<kElements>(cute::make_shape(m, k, l), StrideA{}) &&
           cutlass::detail::check_alignment<kElements>(cute::make_shape(n, k, l), StrideB{});
  }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(const Params& params) {
    cute::prefetch_tma_descriptor(params.tma_load_a.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_load_b.get_tma_descriptor());
  }

  // The kernel's contract: A tiled as (BLK_M, BLK_K, m, k, l) and B as (BLK_N, BLK_K, n, k, l), TMA coordinates.
  template <class ProblemShapeMNKL>
  CUTLASS_DEVICE auto load_init(const ProblemShapeMNKL& problem_shape, const Params& params) const {
    using X = cute::Underscore;
    const auto [m, n, k, l] = problem_shape;
    const auto a = params.tma_load_a.get_tma_tensor(cute::make_shape(m, k, l));
    const auto b = params.tma_load_b.get_tma_tensor(cute::make_shape(n, k, l));
    return cute::make_tuple(cute::local_tile(a, TileShape{}, cute::make_coord(cute::_, cute::_, cute::_),
                                             cute::Step<cute::_1, X, cute::_1>{}),
                            cute::local_tile(b, TileShape{}, cute::make_coord(cute::_, cute::_, cute::_),
                                             cute::Step<X, cute::_1, cute::_1>{}));
  }

  // Producer: one elected thread issues the TMA loads of the output tile's K tiles, one stage each.
  template <class TensorA, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(const Params& params, MainloopPipeline pipeline, PipelineState write,
                           const cute::tuple<TensorA, TensorB>& load_inputs, const BlockCoord& block,
                           KTileIterator k_tile, int k_tile_count, int, uint32_t, TensorStorage& storage) {
    if (!cute::elect_one_sync()) return;
    using cute::_;
    const auto loaded_a = cute::as_position_independent_swizzle_tensor(
        cute::make_tensor(cute::make_smem_ptr(storage.loaded_a.data()), LoadedLayoutA{}));
    const auto loaded_b = cute::as_position_independent_swizzle_tensor(
        cute::make_tensor(cute::make_smem_ptr(storage.loaded_b.data()), LoadedLayoutB{}));
    const auto [m, n, k, l] = block;
    const auto tma_a = params.tma_load_a.get_slice(0);
    const auto tma_b = params.tma_load_b.get_slice(0);
    const auto global_a = tma_a.partition_S(cute::get<0>(load_inputs)(_, _, m, _, l));  // (TMA, TMA_M, TMA_K, k)
    const auto global_b = tma_b.partition_S(cute::get<1>(load_inputs)(_, _, n, _, l));  // (TMA, TMA_N, TMA_K, k)
    auto shared_a = tma_a.partition_D(loaded_a);                                        // (TMA, TMA_M, TMA_K, PIPE)
    auto shared_b = tma_b.partition_D(loaded_b);                                        // (TMA, TMA_N, TMA_K, PIPE)
    for (; k_tile_count > 0; --k_tile_count, ++k_tile, ++write) {
      pipeline.producer_acquire(write);
      auto* barrier = pipeline.producer_get_barrier(write);
      const int stage = write.index();
      cute::copy(params.tma_load_a.with(*barrier), global_a(_, _, _, *k_tile), shared_a(_, _, _, stage));
      cute::copy(params.tma_load_b.with(*barrier), global_b(_, _, _, *k_tile), shared_b(_, _, _, stage));
    }
  }

  // Producer: waits until the consumers released every stage, so that the CTA does not exit under its loads.
  CUTLASS_DEVICE void load_tail(MainloopPipeline pipeline, PipelineState write) {
    if (cute::elect_one_sync()) pipeline.producer_tail(write);
  }

  // Splits one loaded tile (Rows x BLK_K of one stage) into its big and small parts (Rows x BLK_K, K-major, of
  // one buffer); `thread` of the consumers' 256. Each thread moves 16-byte vectors along the loaded tile's
  // contiguous dimension. K-major tiles: the vector is four K of one row, in the parts too (same swizzle
  // family). MN-major tiles: four rows of one K, written as four elements; consecutive threads take consecutive
  // K, which keeps the 16-byte reads of a quarter warp in distinct swizzled chunks.
  template <bool KMajor, class Loaded, class Part>
  CUTLASS_DEVICE static void split_tile(const Loaded& loaded, Part&& big, Part&& small, int thread) {
    constexpr int kRows = decltype(cute::size<0>(std::declval<const Loaded&>()))::value;
    constexpr int kVectors = kRows * kTileK / 4;
    static_assert(kVectors % kConsumerThreads == 0, "3xTF32 mainloop: a tile splits into whole rounds of threads");
    CUTLASS_PRAGMA_UNROLL
    for (int round = 0; round < kVectors / kConsumerThreads; ++round) {
      const int vector = thread + round * kConsumerThreads;
      if constexpr (KMajor) {
        const int row = vector / (kTileK / 4), k = vector % (kTileK / 4) * 4;
        const float4 x = *reinterpret_cast<const float4*>(&loaded(row, k));
        float4 hi, lo;
        split_tf32(x.x, hi.x, lo.x);
        split_tf32(x.y, hi.y, lo.y);
        split_tf32(x.z, hi.z, lo.z);
        split_tf32(x.w, hi.w, lo.w);
        *reinterpret_cast<float4*>(&big(row, k)) = hi;
        *reinterpret_cast<float4*>(&small(row, k)) = lo;
      } else {
        const int row = vector / kTileK * 4, k = vector % kTileK;
        const float4 x = *reinterpret_cast<const float4*>(&loaded(row, k));
        split_tf32(x.x, big(row, k), small(row, k));
        split_tf32(x.y, big(row + 1, k), small(row + 1, k));
        split_tf32(x.z, big(row + 2, k), small(row + 2, k));
        split_tf32(x.w, big(row + 3, k), small(row + 3, k));
      }
    }
  }

  // Consumers: the K loop of one output tile into `accum` (see above). Every stage is released here.
  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState read, FrgTensorC& accum, int k_tile_count,
                          int thread_idx, TensorStorage& storage, const Params&) {
    using cute::_;
    static_assert(cute::is_rmem<FrgTensorC>::value, "3xTF32 mainloop: accumulators in registers");
    if (k_tile_count <= 0) return;
    const auto loaded_a = cute::make_tensor(cute::make_smem_ptr(storage.loaded_a.data()), LoadedLayoutA{});
    const auto loaded_b = cute::make_tensor(cute::make_smem_ptr(storage.loaded_b.data()), LoadedLayoutB{});
    // The parts as fp32 words (written by the split) and as TF32 operands (read by the wgmma).
    auto words = [](cutlass::tfloat32_t* data) { return cute::make_smem_ptr(reinterpret_cast<float*>(data)); };
    const auto big_a = cute::make_tensor(words(storage.big_a.data()), SplitLayoutA{});
    const auto small_a = cute::make_tensor(words(storage.small_a.data()), SplitLayoutA{});
    const auto big_b = cute::make_tensor(words(storage.big_b.data()), SplitLayoutB{});
    const auto small_b = cute::make_tensor(words(storage.small_b.data()), SplitLayoutB{});

    TiledMma tiled_mma;
    const int warp_group = __shfl_sync(0xffffffff, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    const auto group_threads = cute::make_layout(cute::Int<kConsumerThreads / cutlass::NumThreadsPerWarpGroup>{},
                                                 cute::Int<cutlass::NumThreadsPerWarpGroup>{});
    const auto group = tiled_mma.get_slice(group_threads(warp_group));
    auto operand_a = [&](cutlass::tfloat32_t* data) {
      return group.make_fragment_A(group.partition_A(cute::make_tensor(cute::make_smem_ptr(data), SplitLayoutA{})));
    };
    auto operand_b = [&](cutlass::tfloat32_t* data) {
      return group.make_fragment_B(group.partition_B(cute::make_tensor(cute::make_smem_ptr(data), SplitLayoutB{})));
    };
    auto mma_big_a = operand_a(storage.big_a.data());  // (MMA, MMA_M, MMA_K, BUFFER) descriptors
    auto mma_small_a = operand_a(storage.small_a.data());
    auto mma_big_b = operand_b(storage.big_b.data());  // (MMA, MMA_N, MMA_K, BUFFER)
    auto mma_small_b = operand_b(storage.small_b.data());
    static_assert(decltype(cute::size<2>(mma_big_a))::value == kTileK / 8);

    const cutlass::arch::NamedBarrier consumers(kConsumerThreads, kSplitBarrier);
    // Splits the next loaded stage into `buffer`, hands it to the tensor cores and the stage back to the producer.
    auto split_next = [&](int buffer) {
      pipeline.consumer_wait(read);
      const int stage = read.index();
      split_tile<AKMajor>(loaded_a(_, _, stage), big_a(_, _, buffer), small_a(_, _, buffer), thread_idx);
      split_tile<BKMajor>(loaded_b(_, _, stage), big_b(_, _, buffer), small_b(_, _, buffer), thread_idx);
      cutlass::arch::fence_view_async_shared();
      consumers.arrive_and_wait();
      pipeline.consumer_release(read);
      ++read;
    };

    // Both warp groups finished the previous output tile's wgmma (mma_tail) before buffer 0 is rewritten.
    consumers.arrive_and_wait();
    split_next(0);
    // wgmma adds into its accumulator with truncation: over a long K the bias grew to 2.9e-5 (K 4096) and 1e-4
    // (K 14336) relative L2 on an H200, where fp32 wants about 1e-6. So each K tile's products go into a zeroed
    // tile accumulator, added to `accum` with rounded fp32 additions once they are done (the next tile's split
    // still overlaps them).
    auto tile_accum = cute::make_fragment_like(accum);
    cute::clear(accum);
    CUTLASS_PRAGMA_NO_UNROLL
    for (int k_tile = 0; k_tile < k_tile_count; ++k_tile) {
      const int buffer = k_tile % kBuffers;
      tiled_mma.accumulate_ = cute::GMMA::ScaleOut::Zero;
      cute::warpgroup_fence_operand(tile_accum);
      cute::warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < kTileK / 8; ++k_block) {
        // The small products first: the big one, the largest term, is added last.
        cute::gemm(tiled_mma, mma_small_a(_, _, k_block, buffer), mma_big_b(_, _, k_block, buffer), tile_accum);
        tiled_mma.accumulate_ = cute::GMMA::ScaleOut::One;
        cute::gemm(tiled_mma, mma_big_a(_, _, k_block, buffer), mma_small_b(_, _, k_block, buffer), tile_accum);
        cute::gemm(tiled_mma, mma_big_a(_, _, k_block, buffer), mma_big_b(_, _, k_block, buffer), tile_accum);
      }
      cute::warpgroup_commit_batch();
      if (k_tile + 1 < k_tile_count) split_next((k_tile + 1) % kBuffers);  // while the wgmma run
      cute::warpgroup_wait<0>();
      cute::warpgroup_fence_operand(tile_accum);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < cute::size(accum); ++i) accum(i) += tile_accum(i);
    }
  }

  // Consumers: the output tile's wgmma complete before the epilogue reads the accumulators (the stages are
  // already released).
  CUTLASS_DEVICE void mma_tail(MainloopPipeline, PipelineState, int) { cute::warpgroup_wait<0>(); }

 private:
  // The consumers' named barrier (CUTLASS reserves the ids below its user ids; 0 is the first user id).
  static constexpr uint32_t kSplitBarrier = 0;
};

}  // namespace attnkit::cuda::gemm::sm90
