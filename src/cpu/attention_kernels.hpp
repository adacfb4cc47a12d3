// The CPU attention kernels of one instruction set: tile math, forward and backward drivers.
// Included once by each attention_kernels_<isa>.cpp after it has defined
//   ATTNKIT_CPU_ISA_NAMESPACE  the namespace (inside attnkit::cpu) the copy lives in,
//   ATTNKIT_CPU_TILE_ROWS      query rows per tile (at most kMaxTileRows),
//   ATTNKIT_CPU_SPLIT          interleaved accumulator sets per tile product,
// and, for a wider set, switched the compiler target (see attention_isa.hpp). Hence no include
// guard. Every header included here that lives outside the namespace must already have been
// included by the including file before its target switch.
// In this order: the drivers use the tile math.
// clang-format off
#include "cpu/attention_tile_math.hpp"
#include "cpu/attention_tile_bias.hpp"
#include "cpu/attention_forward_impl.hpp"
#include "cpu/attention_backward_impl.hpp"
// clang-format on
