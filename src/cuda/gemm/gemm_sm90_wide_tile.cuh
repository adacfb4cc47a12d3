// A Hopper GEMM kernel of three consumer warp groups, for tiles of 192 rows (192 x 192 x 64: one wave of tiles on
// grids that 128 x 256 and 128 x 192 tiles fill to 1.1-1.5 waves, e.g. 1536 x 3072, 2048 x 2304, 768 x 6144; 192 x 96
// x 64: one wave where 128 x 192 tiles leave a third of the SMs idle, e.g. 1536^3, 768 x 3072).
// CUTLASS 4.2's cooperative kernel runs exactly two consumer warp groups, which cannot split 192 rows into whole
// 64-row wgmma steps; splitting N instead (each warp group 192 x 96) leaves each wgmma so narrow that shared-memory
// reads of A bound it (H200: 0.98 us per 64-deep K step of a 192 x 192 tile against cuBLAS's 0.79).
//
// Algorithm. Persistent CTAs of four warp groups walk the output tiles in a static order (tile t, t + grid, ...;
// M fastest, then N, then the batch). Warp group 0 is the producer: one warp issues the TMA loads of A and B for
// every K step of every tile of the CTA into a ring of shared-memory stages (CUTLASS's Hopper TMA + wgmma
// collective and its full / empty barriers). Warp groups 1-3 are the consumers: each owns 64 rows of the tile and
// runs the collective's wgmma main loop on them (one m64nNk16 wgmma a 16-deep K slice, N the tile's), then the staged
// epilogue (gemm_sm90_staged_epilogue.cuh) writes its rows to C while the producer already loads the next tile's
// first stages. Registers: the producer gives its own back (40 a thread), the consumers take 152 (96 of them the
// fp32 accumulator at N = 192, 48 at 96). Clusters of one CTA only (no multicast).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/arch/reg_reconfig.h"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/pipeline/sm90_pipeline.hpp"

namespace attnkit::cuda::gemm::sm90 {

template <class Mainloop, class Epilogue>
class WideTileGemmKernel {
 public:
  using ProblemShape = cute::Shape<int, int, int, int>;
  using CollectiveMainloop = Mainloop;
  using CollectiveEpilogue = Epilogue;
  using TileShape = typename Mainloop::TileShape;
  using TiledMma = typename Mainloop::TiledMma;
  using StrideA = typename Mainloop::StrideA;
  using StrideB = typename Mainloop::StrideB;
  using StrideC = typename Epilogue::StrideC;
  using StrideD = typename Epilogue::StrideD;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using Pipeline = typename Mainloop::MainloopPipeline;
  using PipelineState = typename Mainloop::PipelineState;

  static constexpr int kWarpGroupThreads = 128;
  static constexpr int kConsumerWarpGroups = cute::size(TiledMma{}) / kWarpGroupThreads;
  static constexpr int kConsumerThreads = kConsumerWarpGroups * kWarpGroupThreads;
  static constexpr uint32_t MaxThreadsPerBlock = (kConsumerWarpGroups + 1) * kWarpGroupThreads;
  static constexpr uint32_t MinBlocksPerMultiprocessor = 1;
  static constexpr uint32_t kProducerRegisters = 40;
  // The register file (64 K) less the producer's, shared by the consumers, in the multiples of 8 setmaxnreg takes.
  static constexpr uint32_t kConsumerRegisters =
      (65536 - kProducerRegisters * kWarpGroupThreads) / kConsumerThreads / 8 * 8;
  static_assert(kConsumerWarpGroups == 3, "three consumer warp groups of 64 rows each");
  static_assert(kConsumerRegisters >= 152, "the consumers need 152 registers (a 64 x 192 fp32 accumulator)");

  struct SharedStorage {
    struct Tensors {
      typename Mainloop::TensorStorage mainloop;
      typename Epilogue::SharedStorage epilogue;
    } tensors;
    alignas(16) typename Mainloop::PipelineStorage pipeline;
  };
  static constexpr int SharedStorageSize = sizeof(SharedStorage);

  struct Arguments {
    cutlass::gemm::GemmUniversalMode mode{};
    ProblemShape problem_shape{};
    typename Mainloop::Arguments mainloop{};
    typename Epilogue::Arguments epilogue{};
    cutlass::KernelHardwareInfo hw_info{};
  };
  struct Params {
    ProblemShape problem_shape{};
    typename Mainloop::Params mainloop{};
    typename Epilogue::Params epilogue{};
    int tiles_m = 0;
    int tiles_n = 0;
    int tiles = 0;  // tiles_m x tiles_n x batch
    int ctas = 0;
  };

  // Output tiles along M (mode 0) or N (mode 1) of a problem.
  template <int Mode>
  static int64_t tiles_along(const ProblemShape& problem) {
    constexpr int64_t kTile = cute::size<Mode>(TileShape{});
    return (int64_t{cute::get<Mode>(problem)} + kTile - 1) / kTile;
  }

  static Params to_underlying_arguments(const Arguments& args, void* workspace) {
    Params params;
    params.problem_shape = args.problem_shape;
    params.mainloop = Mainloop::to_underlying_arguments(args.problem_shape, args.mainloop, workspace);
    params.epilogue = Epilogue::to_underlying_arguments(args.problem_shape, args.epilogue, workspace);
    params.tiles_m = static_cast<int>(tiles_along<0>(args.problem_shape));
    params.tiles_n = static_cast<int>(tiles_along<1>(args.problem_shape));
    params.tiles = params.tiles_m * params.tiles_n * cute::get<3>(args.problem_shape);
    const int multiprocessors = args.hw_info.sm_count > 0 ? args.hw_info.sm_count : 1;
    params.ctas = params.tiles < multiprocessors ? params.tiles : multiprocessors;
    return params;
  }

  static bool can_implement(const Arguments& args) {
    return args.mode == cutlass::gemm::GemmUniversalMode::kGemm &&
           tiles_along<0>(args.problem_shape) * tiles_along<1>(args.problem_shape) * cute::get<3>(args.problem_shape) <=
               INT32_MAX &&
           Mainloop::can_implement(args.problem_shape, args.mainloop) &&
           Epilogue::can_implement(args.problem_shape, args.epilogue);
  }

  static size_t get_workspace_size(const Arguments&) { return 0; }

  static dim3 get_grid_shape(const Params& params) { return dim3(params.ctas > 0 ? params.ctas : 1, 1, 1); }
  static dim3 get_block_shape() { return dim3(MaxThreadsPerBlock, 1, 1); }

  CUTLASS_DEVICE void operator()(const Params& params, char* smem) {
    using namespace cute;
    auto& shared = *reinterpret_cast<SharedStorage*>(smem);
    const int thread = static_cast<int>(threadIdx.x);
    const int warp_group = __shfl_sync(0xffffffff, thread / kWarpGroupThreads, 0);
    const int warp_in_group = __shfl_sync(0xffffffff, (thread / 32) % 4, 0);

    if (warp_group == 0 && warp_in_group == 0 && cute::elect_one_sync()) {
      Mainloop::prefetch_tma_descriptors(params.mainloop);
    }
    typename Pipeline::Params pipeline_params;
    if (warp_group == 0 && warp_in_group == 0) pipeline_params.role = Pipeline::ThreadCategory::Producer;
    if (warp_group > 0) pipeline_params.role = Pipeline::ThreadCategory::Consumer;
    pipeline_params.is_leader = thread % kWarpGroupThreads == 0;
    pipeline_params.num_consumers = kConsumerThreads;
    pipeline_params.transaction_bytes = params.mainloop.tma_transaction_bytes;
    Pipeline pipeline(shared.pipeline, pipeline_params, ClusterShape{});
    __syncthreads();  // the barriers are initialised before anyone waits on them

    Mainloop mainloop;
    const auto problem = params.problem_shape;
    const int k_tiles = (cute::get<2>(problem) + cute::size<2>(TileShape{}) - 1) / cute::size<2>(TileShape{});
    const int tiles_mn = params.tiles_m * params.tiles_n;
    auto tile_of = [&](int t) {
      const int batch = t / tiles_mn, rest = t % tiles_mn;
      return cute::make_coord(rest % params.tiles_m, rest / params.tiles_m, cute::_, batch);
    };

    if (warp_group == 0) {
      cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
      if (warp_in_group != 0) return;
      auto inputs = mainloop.load_init(problem, params.mainloop);
      PipelineState write = cutlass::make_producer_start_state<Pipeline>();
      for (int t = static_cast<int>(blockIdx.x); t < params.tiles; t += static_cast<int>(gridDim.x)) {
        auto k_tile_iter = cute::make_coord_iterator(cute::shape<3>(cute::get<0>(inputs)));
        mainloop.load(params.mainloop, pipeline, write, inputs, tile_of(t), k_tile_iter, k_tiles, thread % 32, 0,
                      shared.tensors.mainloop);
        write.advance(k_tiles);
      }
      mainloop.load_tail(pipeline, write);
    } else {
      cutlass::arch::warpgroup_reg_alloc<kConsumerRegisters>();
      const int mma_thread = thread - kWarpGroupThreads;
      Epilogue epilogue(params.epilogue);
      TiledMma tiled_mma;
      PipelineState read;
      for (int t = static_cast<int>(blockIdx.x); t < params.tiles; t += static_cast<int>(gridDim.x)) {
        auto accumulators = cute::partition_fragment_C(tiled_mma, cute::take<0, 2>(TileShape{}));
        mainloop.mma(pipeline, read, accumulators, k_tiles, mma_thread, shared.tensors.mainloop, params.mainloop);
        mainloop.mma_tail(pipeline, read, k_tiles);
        read.advance(k_tiles);
        epilogue(problem, TileShape{}, tile_of(t), accumulators, tiled_mma, cute::_0{}, mma_thread,
                 reinterpret_cast<char*>(&shared.tensors.epilogue));
      }
    }
  }
};

}  // namespace attnkit::cuda::gemm::sm90
