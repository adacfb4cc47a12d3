"""attnkit: fused attention kernels (dense, neighborhood, sparse), retention and GEMM over a C ABI."""

from ._capi import load_library
