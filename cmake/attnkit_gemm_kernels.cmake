# The GEMM kernel instantiations of the CUDA backend: one row per compiled kernel, from which
# cmake/attnkit_gemm_instances.cmake writes, at configure time, one .cu file per row and the list the
# registry gemm_kernels() (src/cuda/gemm/gemm_registry.cpp) expands. Adding a kernel is adding a row.
# Every problem also has the SIMT fallback (src/cuda/gemm/gemm_simt.cu), which is not a row, and fp32 decode-like
# problems (M <= 64 against a weight B) the narrow kernel (src/cuda/gemm/gemm_narrow.hpp), listed before the rows.
#
# Columns:
#   tier      sm90: Hopper (CUTLASS 3.x CollectiveBuilder: TMA + wgmma, warp-specialised persistent;
#                   compute capability 9.0 only) — built only when ATTNKIT_CUDA_ARCHS holds 90a
#             sm80: CUTLASS 2.x GemmUniversal (cp.async + mma.sync; any SM80+ device)
#   type      f16 | bf16 (fp32 accumulation, C in the input type) | tf32 (fp32 in and out on TF32 tensor
#             cores, used only with allow_tf32) | 3xtf32 (fp32 in and out, fp32-level error: each operand split
#             into a TF32 big part and a TF32 remainder, three TF32 products; sm90: the mainloop of
#             src/cuda/gemm/gemm_sm90_3xtf32_mainloop.cuh, coop and splitk)
#   a, b      majorness in the canonical form (src/cuda/gemm/gemm_shape.hpp: C row-major): k (the
#             reduction dimension is contiguous) | mn. Row-major A @ row-major B is a=k b=mn; x @ W^T
#             with a row-major weight W is a=k b=k.
#   tile      M x N x K of the CTA tile (CUTLASS's: of C^T, i.e. N x M x K of the problem, on rows that compute the
#             swapped product, swapped_splitk and the TF32 rows of an MN-major B beside a K-major A)
#   grid      sm90: the cluster, M x N CTAs; sm80: the warps, M x N
#   stages    sm90: auto (as many as fit beside the epilogue); sm80: the cp.async pipeline depth
#   schedule  sm90: coop (two consumer warp groups share a tile) | pingpong (they alternate tiles) |
#             streamk (coop with the stream-K scheduler: the K loops of all tiles are split among the
#             CTAs, partial sums reduced through a workspace) | splitk (coop on K slices as a batch, fp32
#             partial sums in the workspace, then an ordered sum into C: src/cuda/gemm/gemm_split_k.hpp;
#             batch-1 problems with small grids and a K that divides into slices) | swapped_splitk (split-K on
#             C^T = B^T A^T: the weight's wide N is wgmma's M, the tile's 128 rows, and decode's few tokens of M
#             its N, a 64-wide tile; C^T stored column-major is C row-major; fp32 rows also in one slice where M
#             fits the 64 columns) | pingpong_swapped_splitk (the same on a 64-row tile of one consumer warp group,
#             the ping-pong mainloop; 16-bit decode of M <= 16 in 2 or more slices, or in one against weights whose
#             64-row tiles fill 0.9 to 2 waves) | wide (src/cuda/gemm/gemm_sm90_wide_tile.cuh: tiles of 192 rows
#             on three consumer warp groups of 64, which CUTLASS's two-warp-group kernels cannot split; f16 / bf16,
#             cluster 1x1); sm80: -
#   set       dev: in every build | full: only with -DATTNKIT_KERNEL_SET=full (the default)
#
# The name of a row (its config id, the plan's TunedConfig name and ATTNKIT_GEMM_CONFIG's value) is
# <tier>_<type>_a<a>_b<b>_<tile>_<c|w><grid>[_s<stages>][_<schedule>], e.g.
# sm90_bf16_ak_bmn_128x256x64_c2x1_coop, sm80_3xtf32_ak_bk_128x128x16_w2x2_s4; the entry function is
# gemm_<name>.
#
# Order is the registry's order, and it matters: the first row of a problem's type and majorness that accepts it
# on the device fixes the tier (and math); among the accepting rows of that tier, a splitk row runs the problem
# whenever it accepts it, else the data-parallel row (coop, pingpong) of the smallest waves estimate (equal
# estimates: the first row), replaced by the first streamk row when its output tiles (times the batch) would
# occupy fewer than half the SMs (choose_gemm_candidate, src/cuda/gemm/gemm_registry.hpp). So sm90 rows come
# first (enforced), and tf32 rows before 3xtf32 rows (with allow_tf32 the faster TF32 is preferred; without it
# tf32 rows never match). Of several accepting split-K rows, the one whose output tiles pad the problem least
# (tiles x tile area) runs, the first of equal ones: the swapped split-K rows (M in steps of 64) take M <= 64 (and
# 129-192); the 16-bit ones are listed before the 128-row split-K rows, so they also take the grids both pad alike
# (M 65-128, 256 x 256 x 65536: 8 tiles x 16 slices, 24.2 us on an H200, against 4 tiles x 32 slices, 27.7 us), while
# the fp32 128-row rows, listed first, keep those (their swapped rows measured slower there: TF32 256 x 256 x 65536
# 74.9 against 57.9 us of cuBLAS). Tile M: a multiple of 128 for
# coop, streamk, splitk and swapped_splitk (two consumer warp groups split it), of 64 for pingpong and
# pingpong_swapped_splitk, 192 for wide (enforced).
# fp32 on Hopper: TF32 rows from CUTLASS's builder in every layout (TF32 wgmma reads K-major shared memory only:
# an MN-major A goes through registers, an MN-major B beside an MN-major A is transposed in shared memory, one
# beside a K-major A is handled by computing C^T = B^T A^T, src/cuda/gemm/gemm_sm90.cuh), K tile 32 (128 bytes of
# fp32, the swizzle's width), 128 x 256 but for a=mn b=mn (128 x 128: with the transposition of B, 128 x 256
# spills registers), and a 128 x 128 a=k b=mn row in a cluster of one (C^T's tile: the problem's is 128 x 128, the
# 128 x 256 row's 256 of M x 128 of N) that the waves model gives grids where the larger tile leaves SMs idle or pads M
# to twice (batched 64 x 128 x 4096 x 128: M 128 on 256-row tiles; 1023 x 1025 x 1027: 36 tiles against 72); 3xTF32
# rows in every layout (their mainloop writes both operands K-major as it splits them), 128 x 128 x 16 in clusters of
# one: three buffers of split parts (96 KB) sit beside the loaded stages and the
# epilogue in shared memory. Split-K rows of both fp32 maths (A K-major, dev set) take the small grids with a long K
# (decode-like M, 256 x 256 x 65536), as the 16-bit ones do. TF32 with B MN-major has a 128 x 256 split-K row (C^T's
# tile: 256 of M x 128 of N) before its 128 x 128 one, so it takes the grids it pads no more: the weight reaches the
# wgmma through registers there, and the wider tile halves those loads per multiply-add (H100, docs/perf.md: 1024 x
# 1024 x 16384 180 -> 123 us against cuBLAS's 129, 256 x 4096 x 16384 182 -> 124; 256 x 256 x 65536 66 -> 71 us).
# The dev set holds every layout of bf16 and f16 on Hopper (about 35-45 s of one core each to compile), the
# 64 x 128 ping-pong rows of the two common layouts (small grids: 1024^3, decode-like M against a wide N), 128 x 192
# cooperative rows of those layouts in clusters of one (grids whose 128 x 256 tiles leave the last wave mostly empty or
# the SMs half idle: 1536^3, 3072^3, 2048 x 3072 x 3072, 3072 x 3072 x 1024; H200, docs/perf.md, session 50), 192 x 192
# wide rows of those layouts (one wave where the 128-row tiles make 1.1 to 1.5: 1536 x 3072, 2048 x 2304, 768 x 6144,
# 6144 x 768; the waves model picks them where their estimate is the least; docs/perf.md, session 52), 192 x 96 wide
# rows of those layouts (one wave where 128 x 192 tiles leave a third of the SMs idle and 64 x 128 ones make two or
# three: 1536^3, 1536 x 1536 x 4096, 768 x 3072 x 2048; docs/perf.md, session 54), the
# stream-K and split-K rows of the two common layouts (a=k b=mn, a=k b=k; the full set adds the A MN-major
# ones, which weight gradients of small grids use), and fp32 (tf32 and 3xtf32) on Hopper and on sm80 for those two
# layouts (sm80: 12-20 s each); fp32 in the other layouts runs on the SIMT fallback in a dev build.
# Decode (M 1-64 tokens against a 16-bit weight of N x K, N about 4096), in the two common layouts (dev set; x @ W is
# a=k b=mn, x @ W^T a=k b=k): M 1-16 on the pingpong_swapped_splitk rows, C^T's tile 64 weight rows x 16 tokens x 64 of
# K (one consumer warp group, about 20 stages of 10 KB), the K split in 2 so that 128 of 132 SMs stream the weight (64
# tiles x 2 slices at N = 4096; one slice where the tiles fill 0.9 to 2 waves, N 7600-16896); M 17-48 on the
# swapped_splitk rows, 128 weight rows x 64 tokens (32 tiles x 4 slices); M 49-64 where 64 x 32 tiles (pingpong,
# clusters of 1 x 2 sharing the tokens' tile) fill one wave (N 3800-4224) on those tiles in one launch, without the
# ordered sum's second one (gemm_token_tile, gemm_registry.hpp; the waves model never picks them). The weight's bytes
# bound these problems: 1 x 4096 x 4096 reads 33.6 MB, 7.8 us at an H200's 4.3 TB/s, plus the ordered sum. Measured
# (H200, docs/perf.md: "Decode on token tiles"), bf16 by CUDA graph against cuBLAS: 1 x 4096 x 4096 12.5 against 13.4 us
# (the 128 x 64 row: 13.4), 16 x 4096 x 4096 13.3 / 13.2 (13.9), 64 x 4096 x 4096 13.3 / 11.5 (14.2, and per call
# 0.87-0.96x against 0.69-0.74x). The 64-row tile of 16 tokens streams the weight faster than the 128 x 64 one wherever
# it sits in L2 (main kernel 7.3-9.0 against 10.3-11.2 us) and as fast from DRAM (11.1-11.3 against 11.2-11.9 us); a
# tile of 64 token rows that lie mostly past M loads slowly (64 x 32 at M = 1: 26.5 us), hence M
# 49-64 only there. They refuse batches (a batch of packed tokens sharing B is folded into M first:
# fold_broadcast_batch, gemm_shape.hpp), K that does not divide into slices of 16-byte multiples, and grids too large
# for split-K: the other rows run those.
# Misaligned problems run on these rows too, with the operands that miss a row's rule copied into aligned
# workspace first (src/cuda/gemm/gemm_staging.hpp): no extra instances.
set(ATTNKIT_GEMM_KERNEL_TABLE
  # tier type    a   b   tile        grid stages schedule set
  "sm90  bf16    k   mn  128x256x64  2x1  auto   coop     dev"
  "sm90  bf16    k   k   128x256x64  2x1  auto   coop     dev"
  "sm90  f16     k   mn  128x256x64  2x1  auto   coop     dev"
  "sm90  f16     k   k   128x256x64  2x1  auto   coop     dev"
  "sm90  bf16    k   mn  128x192x64  1x1  auto   coop     dev"
  "sm90  bf16    k   k   128x192x64  1x1  auto   coop     dev"
  "sm90  f16     k   mn  128x192x64  1x1  auto   coop     dev"
  "sm90  f16     k   k   128x192x64  1x1  auto   coop     dev"
  "sm90  bf16    k   mn  192x192x64  1x1  auto   wide     dev"
  "sm90  bf16    k   k   192x192x64  1x1  auto   wide     dev"
  "sm90  f16     k   mn  192x192x64  1x1  auto   wide     dev"
  "sm90  f16     k   k   192x192x64  1x1  auto   wide     dev"
  "sm90  bf16    k   mn  192x96x64   1x1  auto   wide     dev"
  "sm90  bf16    k   k   192x96x64   1x1  auto   wide     dev"
  "sm90  f16     k   mn  192x96x64   1x1  auto   wide     dev"
  "sm90  f16     k   k   192x96x64   1x1  auto   wide     dev"
  "sm90  bf16    k   mn  64x128x64   1x1  auto   pingpong dev"
  "sm90  bf16    k   k   64x128x64   1x1  auto   pingpong dev"
  "sm90  f16     k   mn  64x128x64   1x1  auto   pingpong dev"
  "sm90  f16     k   k   64x128x64   1x1  auto   pingpong dev"
  "sm90  bf16    mn  mn  128x256x64  2x1  auto   coop     dev"
  "sm90  bf16    mn  k   128x256x64  2x1  auto   coop     dev"
  "sm90  f16     mn  mn  128x256x64  2x1  auto   coop     dev"
  "sm90  f16     mn  k   128x256x64  2x1  auto   coop     dev"
  "sm90  bf16    k   mn  128x128x64  1x1  auto   streamk  dev"
  "sm90  bf16    k   k   128x128x64  1x1  auto   streamk  dev"
  "sm90  f16     k   mn  128x128x64  1x1  auto   streamk  dev"
  "sm90  f16     k   k   128x128x64  1x1  auto   streamk  dev"
  "sm90  bf16    mn  mn  128x128x64  1x1  auto   streamk  full"
  "sm90  bf16    mn  k   128x128x64  1x1  auto   streamk  full"
  "sm90  f16     mn  mn  128x128x64  1x1  auto   streamk  full"
  "sm90  f16     mn  k   128x128x64  1x1  auto   streamk  full"
  "sm90  bf16    k   mn  64x32x64    1x2  auto   pingpong dev"
  "sm90  bf16    k   k   64x32x64    1x2  auto   pingpong dev"
  "sm90  bf16    k   mn  64x16x64    1x1  auto   pingpong_swapped_splitk dev"
  "sm90  bf16    k   k   64x16x64    1x1  auto   pingpong_swapped_splitk dev"
  "sm90  bf16    k   mn  128x64x64   1x1  auto   swapped_splitk dev"
  "sm90  bf16    k   k   128x64x64   1x1  auto   swapped_splitk dev"
  "sm90  f16     k   mn  64x32x64    1x2  auto   pingpong dev"
  "sm90  f16     k   k   64x32x64    1x2  auto   pingpong dev"
  "sm90  f16     k   mn  64x16x64    1x1  auto   pingpong_swapped_splitk dev"
  "sm90  f16     k   k   64x16x64    1x1  auto   pingpong_swapped_splitk dev"
  "sm90  f16     k   mn  128x64x64   1x1  auto   swapped_splitk dev"
  "sm90  f16     k   k   128x64x64   1x1  auto   swapped_splitk dev"
  "sm90  bf16    k   mn  128x128x64  1x1  auto   splitk   dev"
  "sm90  bf16    k   k   128x128x64  1x1  auto   splitk   dev"
  "sm90  f16     k   mn  128x128x64  1x1  auto   splitk   dev"
  "sm90  f16     k   k   128x128x64  1x1  auto   splitk   dev"
  "sm90  bf16    mn  mn  128x128x64  1x1  auto   splitk   full"
  "sm90  bf16    mn  k   128x128x64  1x1  auto   splitk   full"
  "sm90  f16     mn  mn  128x128x64  1x1  auto   splitk   full"
  "sm90  f16     mn  k   128x128x64  1x1  auto   splitk   full"
  "sm90  tf32    k   mn  128x256x32  2x1  auto   coop     dev"
  "sm90  tf32    k   k   128x256x32  2x1  auto   coop     dev"
  "sm90  tf32    k   mn  128x128x32  1x1  auto   coop     dev"
  "sm90  tf32    mn  mn  128x128x32  2x1  auto   coop     full"
  "sm90  tf32    mn  k   128x256x32  2x1  auto   coop     full"
  "sm90  tf32    k   mn  128x256x32  1x1  auto   splitk   dev"
  "sm90  tf32    k   mn  128x128x32  1x1  auto   splitk   dev"
  "sm90  tf32    k   k   128x128x32  1x1  auto   splitk   dev"
  "sm90  tf32    k   mn  128x64x32   1x1  auto   swapped_splitk dev"
  "sm90  tf32    k   k   128x64x32   1x1  auto   swapped_splitk dev"
  "sm90  3xtf32  k   mn  128x128x16  1x1  auto   coop     dev"
  "sm90  3xtf32  k   k   128x128x16  1x1  auto   coop     dev"
  "sm90  3xtf32  mn  mn  128x128x16  1x1  auto   coop     full"
  "sm90  3xtf32  mn  k   128x128x16  1x1  auto   coop     full"
  "sm90  3xtf32  k   mn  128x128x16  1x1  auto   splitk   dev"
  "sm90  3xtf32  k   k   128x128x16  1x1  auto   splitk   dev"
  "sm90  3xtf32  k   mn  128x64x16   1x1  auto   swapped_splitk dev"
  "sm90  3xtf32  k   k   128x64x16   1x1  auto   swapped_splitk dev"
  "sm80  tf32    k   mn  128x128x32  2x2  3      -        dev"
  "sm80  tf32    k   k   128x128x32  2x2  3      -        dev"
  "sm80  tf32    mn  mn  128x128x32  2x2  3      -        full"
  "sm80  tf32    mn  k   128x128x32  2x2  3      -        full"
  "sm80  3xtf32  k   mn  128x128x16  2x2  4      -        dev"
  "sm80  3xtf32  k   k   128x128x16  2x2  4      -        dev"
  "sm80  3xtf32  mn  mn  128x128x16  2x2  4      -        full"
  "sm80  3xtf32  mn  k   128x128x16  2x2  4      -        full"
  "sm80  bf16    k   mn  128x128x32  2x2  4      -        full"
  "sm80  bf16    k   k   128x128x32  2x2  4      -        full"
  "sm80  f16     k   mn  128x128x32  2x2  4      -        full"
  "sm80  f16     k   k   128x128x32  2x2  4      -        full"
)
