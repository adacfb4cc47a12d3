// A bool element mask packed key-major into 32-bit words: words[slice][key][query_bit_words(rows)], bit b of word w
// of key k set when query 32 * w + b attends key k (its mask byte is nonzero), zero past the queries. The fused
// backward (fmha_backward_launch.cuh, BackwardTileLists::key_bits) and the scattered backward's dK/dV kernel
// (scattered_mask_pack.cu) both read this layout; mask_bits_by_key.cu writes it.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/host_device.hpp"

namespace attnkit::cuda {

// A bool [batches, heads, rows, columns] mask as stored, strides in bytes (a broadcast dimension has extent 1
// here). Slice s is (batch s / heads, head s % heads); rows are queries, columns keys.
struct MaskBytes {
  const uint8_t* data = nullptr;
  int64_t stride[4] = {0, 0, 0, 1};
  int32_t batches = 1;
  int32_t heads = 1;
  int32_t rows = 0;
  int32_t columns = 0;
};

// Words per key: ceil(rows / 32).
ATTNKIT_HOST_DEVICE int32_t query_bit_words(int32_t rows) { return (rows + 31) / 32; }

// Writes all batches * heads * columns * query_bit_words(rows) words on `stream`; returns the launch's status.
cudaError_t launch_mask_bits_by_key(const MaskBytes& mask, uint32_t* words, cudaStream_t stream);

}  // namespace attnkit::cuda
