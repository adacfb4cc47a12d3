// The tuner's config spaces of the CUDA chunkwise retention (DESIGN §5, §6.3), forward and backward: the
// shapes retention_jobs.hpp gives a call's jobs, as ChunkShapeChoice values.
//
// Configs (ids stored in cache files; all stable names):
//  - "<family>_block<B>_segfill": value blocks of B columns (each job whose value dim is a multiple of B;
//    the rule's block for the others) and the rule's segments (fill about two CTAs per SM, segments of at
//    least 4 chunks), e.g. chunk64_block64_segfill;
//  - "<family>_block<B>_seg<S>": the same blocks, S segments per sequence (at most one per chunk), for S in
//    kRetentionSegmentCounts, e.g. chunk64_block32_seg8;
//  - forward only, "decode": the recurrent decode kernel, for calls of at most kDecodeMaxTokens tokens with
//    Dv a multiple of 64;
//  - "wgmma_wide_segfill" / "wgmma_wide_seg<S>" and "wgmma_block<B>_segfill" / "wgmma_block<B>_seg<S>":
//    the same shapes on the Hopper wgmma kernel (retention_jobs.hpp's wgmma_chunk_kernel_for, on a compute
//    capability 9.0 device; elsewhere they make the mma.sync launches and are rejected as duplicates), "wide" with
//    CTAs of 128 value columns where Dk is 128 and Dv a multiple of 128 (the rule's block elsewhere).
// The chunk64 configs run the mma.sync kernel (param wgmma 0). <family> and B come from the compiled instances
// (chunk_kernels(): today chunk64 with B = 32 and 64, the chunk fixed at 64 tokens), so new instances add configs.
// A backward config shapes all three jobs (dQ and dK, whose value dim is Dk, and dV) alike. Only calls without
// normalisation or a decay matrix ask: the parallel form's kernels have nothing to choose.
//
// A config resolves, on a problem (B, H, T, Dk, Dv, dtype) and a device (SMs), to the launches its jobs
// make (kernel instance, segments, segment length), with retention_jobs.hpp's own functions
// (chunk_job_shape, decode_kernel_for). Validity: the CUDA retention dtypes (f16, bf16), an instance for
// every job, the device's shared memory and threads, and a launch set no other config makes: a config that
// resolves to the launches of the default, or of an earlier config in the list, is rejected as the same
// launches ("seg8" on a 4-chunk sequence is "seg4"), so the tuner never times one launch set twice. The
// default is the first config (in the order decode, segfill by ascending block then wgmma, seg<S>) whose launches are
// the rule's (ChunkShapeChoice{}): a pure function of the problem and the SM count, and what plans ran
// before the tuner covered retention. The estimate is the roofline (tune/roofline.hpp) of each launch:
// per chunk, Q K^T, the decayed scores times V and the state terms (Q S, K^T V) in FLOPs and the chunk's
// q, k, v and output bytes; segments add the state-only launch (K^T V per chunk, each segment's state
// written) and the segment states the main launch reads (from L2, about one state per CTA); occupancy from
// the instance's shared memory and threads.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "cuda/retention/retention_jobs.hpp"
#include "tune/config_space_registry.hpp"

namespace attnkit::cuda::retention {

inline constexpr std::array<int64_t, 8> kRetentionSegmentCounts{1, 2, 4, 8, 16, 32, 64, 128};

// Params of a config, by name: value_block (0: the rule's), segments (0: the rule's), decode (1: the decode kernel),
// wgmma (1: the wgmma kernel where it runs).
tune::ConfigSpace retention_forward_space();
tune::ConfigSpace retention_backward_space();
void register_retention_spaces(tune::ConfigSpaceRegistry& registry);

// The jobs' shape choice a config of these spaces stands for.
ChunkShapeChoice chunk_shape_of(const tune::Config& config);

}  // namespace attnkit::cuda::retention
