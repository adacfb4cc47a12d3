// The 16 query columns a thread holds of a 64-column wgmma score accumulator, picked out of a 64-column
// row of mask bits in a few shifts and masks instead of a test per column.
//
// Layout: the thread holds columns col0 + 8 m + e (m < 8, e < 2; col0 = 2 (lane % 4), so even and below 8),
// its column j = 2 m + e. Shifted right by col0, the row has the thread's bits at 8 m + e, the two low bits of
// every byte; three folds then move byte m's pair to bits 2 m, 2 m + 1: pairs of bytes into 4-bit groups of
// each 16-bit half (shift 6), 16-bit halves into bytes of each 32-bit half (shift 12), 32-bit halves into the
// low 16 bits (shift 24).
#pragma once
#include <cstdint>

#include "core/host_device.hpp"

namespace attnkit::cuda {

// Bit 2 m + e of the result: bit col0 + 8 m + e of the 64-bit row (lo: bits 0-31, hi: bits 32-63).
ATTNKIT_HOST_DEVICE uint32_t column_pair_bits(uint32_t lo, uint32_t hi, int col0) {
  uint64_t x = ((static_cast<uint64_t>(hi) << 32 | lo) >> col0) & 0x0303030303030303ull;
  x = (x | (x >> 6)) & 0x000F000F000F000Full;
  x = (x | (x >> 12)) & 0x000000FF000000FFull;
  return static_cast<uint32_t>((x | (x >> 24)) & 0xFFFFu);
}

}  // namespace attnkit::cuda
