# The fused-attention kernel instantiations of the CUDA backend: one row per compiled kernel, from which
# cmake/attnkit_kernel_instances.cmake writes, at configure time, one .cu file per row and the list the
# registries fmha_forward_kernels() and fmha_backward_kernels() expand. Adding a kernel is adding a row.
#
# Columns:
#   direction  forward | backward
#   tier       sm80: the portable kernels (mma.sync, cp.async; any SM80+ device), src/cuda/fmha
#              sm90: the Hopper kernels (wgmma, TMA; compute capability 9.0), src/cuda/fmha_sm90 —
#                    built only when ATTNKIT_CUDA_ARCHS holds 90a
#   dtype      f16 | bf16
#   head_dim   the compiled width (serves any D, Dv up to it)
#   block_m, block_n, warps
#              the tile: query rows, key rows, warps per CTA
#   stages     K/V buffers in flight (forward); "-" for the backward, whose config ids have no stages
#   policy     box (none, causal, neighborhood masks) | list (block and element masks)
#   set        dev: in every build | full: only with -DATTNKIT_KERNEL_SET=full (the default)
#
# A row's name is its config id, exactly as fmha_config_name / fmha_backward_config_name spell it
# (forward bf16_d128_m128_n64_w4_s2_box, backward bwd_bf16_d128_m64_n64_w4_box, Hopper rows end in _sm90):
# the ids live in users' tuner caches and in ATTNKIT_FMHA_CONFIG / ATTNKIT_FMHA_BACKWARD_CONFIG, so a row's
# numbers must be the ones its factory reports (tests/cpp/test_cuda_kernel_registry.cpp checks). The file
# and entry function are named mechanically from the id: fmha_forward_<id>, fmha_backward_<id without bwd_>.
#
# Order is the registries' order, and it matters: a problem's default kernel is the first row of its
# (direction, dtype, head dim, policy) that fits the device. So Hopper rows come first (the default on a
# 9.0 device), then each tier's default tile before its alternatives: the portable forward defaults are
# 128 x 64 x 4 warps up to head dim 128 and 64 x 64 x 4 warps for 256; the 64 x 64 box tiles at head dim
# 128 are an alternative the tuner chooses among (+18 % on na2d 64x64 K13, -18 % on dense, H100;
# docs/perf.md). The dev set keeps head dims 64 and 128 with their default tiles, and the Hopper bf16
# forward and backward at head dim 32 (NAT-style layers). The Hopper rows have a producer warpgroup and one
# consumer warpgroup per 64 query rows (forward: 192, 128 or 64 rows; 192 for dense, causal and 1-D windows) or one
# MMA warpgroup per 64 keys (backward: 128 or 64 keys); the rows of 64 and 192 are alternatives the default rules
# pick (docs/tuner.md); the portable backward runs 64 x 64 x 4 warps for both widths (wider heads are refused with
# the list of widths).
# A call runs on the narrowest width with a row of its dtype and policy that fits the device (fmha_width_on_device,
# fmha_backward_width_on_device): D = 32 on the Hopper D 32 rows on 9.0, else on the portable D 32 forward
# rows (full set) or the 64-wide rows (no portable backward row has D 32).
set(ATTNKIT_FMHA_KERNEL_TABLE
  # direction tier dtype  D    M    N    W   S  policy set
  "forward    sm90  f16   32   128  128  12  2  box    full"
  "forward    sm90  f16   32   128  64   12  2  box    full"
  "forward    sm90  f16   32   64   64   8   2  box    full"
  "forward    sm90  f16   32   128  128  12  2  list   full"
  "forward    sm90  bf16  32   128  128  12  2  box    dev"
  "forward    sm90  bf16  32   128  64   12  2  box    dev"
  "forward    sm90  bf16  32   64   64   8   2  box    dev"
  "forward    sm90  bf16  32   128  128  12  2  list   dev"
  "forward    sm90  f16   64   128  128  12  2  box    dev"
  "forward    sm90  f16   64   128  64   12  2  box    full"
  "forward    sm90  f16   64   64   64   8   2  box    full"
  "forward    sm90  f16   64   128  128  12  2  list   dev"
  "forward    sm90  f16   64   192  128  16  2  box    dev"
  "forward    sm90  f16   128  128  128  12  2  box    dev"
  "forward    sm90  f16   128  64   64   8   2  box    full"
  "forward    sm90  f16   128  128  128  12  2  list   dev"
  "forward    sm90  bf16  64   128  128  12  2  box    dev"
  "forward    sm90  bf16  64   128  64   12  2  box    dev"
  "forward    sm90  bf16  64   64   64   8   2  box    dev"
  "forward    sm90  bf16  64   128  128  12  2  list   dev"
  "forward    sm90  bf16  64   192  128  16  2  box    dev"
  "forward    sm90  bf16  128  128  128  12  2  box    dev"
  "forward    sm90  bf16  128  64   64   8   2  box    dev"
  "forward    sm90  bf16  128  128  128  12  2  list   dev"
  "forward    sm80  f16   64   128  64   4   2  box    dev"
  "forward    sm80  f16   64   128  64   4   2  list   dev"
  "forward    sm80  f16   128  128  64   4   2  box    dev"
  "forward    sm80  f16   128  128  64   4   2  list   dev"
  "forward    sm80  bf16  64   128  64   4   2  box    dev"
  "forward    sm80  bf16  64   128  64   4   2  list   dev"
  "forward    sm80  bf16  128  128  64   4   2  box    dev"
  "forward    sm80  bf16  128  128  64   4   2  list   dev"
  "forward    sm80  f16   32   128  64   4   2  box    full"
  "forward    sm80  f16   32   128  64   4   2  list   full"
  "forward    sm80  f16   256  64   64   4   2  box    full"
  "forward    sm80  f16   256  64   64   4   2  list   full"
  "forward    sm80  bf16  32   128  64   4   2  box    full"
  "forward    sm80  bf16  32   128  64   4   2  list   full"
  "forward    sm80  bf16  256  64   64   4   2  box    full"
  "forward    sm80  bf16  256  64   64   4   2  list   full"
  "forward    sm80  f16   128  64   64   4   2  box    full"
  "forward    sm80  bf16  128  64   64   4   2  box    full"
  "backward   sm90  f16   32   64   128  12  -  box    full"
  "backward   sm90  f16   32   64   128  12  -  list   full"
  "backward   sm90  f16   32   64   64   8   -  box    full"
  "backward   sm90  f16   64   64   128  12  -  box    dev"
  "backward   sm90  f16   64   64   128  12  -  list   dev"
  "backward   sm90  f16   64   64   64   8   -  box    full"
  "backward   sm90  f16   128  64   128  12  -  box    dev"
  "backward   sm90  f16   128  64   128  12  -  list   dev"
  "backward   sm90  bf16  32   64   128  12  -  box    dev"
  "backward   sm90  bf16  32   64   128  12  -  list   dev"
  "backward   sm90  bf16  32   64   64   8   -  box    dev"
  "backward   sm90  bf16  64   64   128  12  -  box    dev"
  "backward   sm90  bf16  64   64   128  12  -  list   dev"
  "backward   sm90  bf16  64   64   64   8   -  box    dev"
  "backward   sm90  bf16  128  64   128  12  -  box    dev"
  "backward   sm90  bf16  128  64   128  12  -  list   dev"
  "backward   sm80  f16   64   64   64   4   -  box    dev"
  "backward   sm80  f16   64   64   64   4   -  list   dev"
  "backward   sm80  f16   128  64   64   4   -  box    dev"
  "backward   sm80  f16   128  64   64   4   -  list   dev"
  "backward   sm80  bf16  64   64   64   4   -  box    dev"
  "backward   sm80  bf16  64   64   64   4   -  list   dev"
  "backward   sm80  bf16  128  64   64   4   -  box    dev"
  "backward   sm80  bf16  128  64   64   4   -  list   dev"
)
