#include "cuda/gemm/gemm_registry.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "attnkit/generated/gemm_kernel_list.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/gemm/gemm_narrow.hpp"
#include "cuda/gemm/gemm_simt.hpp"

namespace attnkit::cuda::gemm {
namespace {

constexpr int kMaxDevices = 64;

int attribute(cudaDeviceAttr what, int device) {
  int value = 0;
  check_cuda(cudaDeviceGetAttribute(&value, what, device), "cudaDeviceGetAttribute");
  return value;
}

GemmDevice read_device(int index) {
  GemmDevice device;
  device.index = index;
  device.capability =
      attribute(cudaDevAttrComputeCapabilityMajor, index) * 10 + attribute(cudaDevAttrComputeCapabilityMinor, index);
  device.multiprocessors = attribute(cudaDevAttrMultiProcessorCount, index);
  device.max_shared_bytes_optin = attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, index);
  return device;
}

std::string names_of_entries() {
  std::string names;
  for (const GemmKernel* kernel : gemm_kernels()) names += (names.empty() ? "" : ", ") + std::string(kernel->name);
  return names;
}

int64_t output_tiles(int64_t m, int64_t n, int64_t batch, int tile_m, int tile_n) {
  const int64_t tm = std::max(tile_m, 1), tn = std::max(tile_n, 1);
  return (m + tm - 1) / tm * ((n + tn - 1) / tn) * std::max<int64_t>(batch, 1);
}

}  // namespace

// The per-tile efficiency factors of the waves cost model, all in one place: the fraction of the tensor cores'
// peak a tile of this output area sustains, relative to the 128 x 256 cooperative tile (the large-shape rows:
// >= 0.98 of cuBLAS on an H200). Smaller tiles load more operand bytes from shared memory per multiply-add
// (wgmma with a 64- or 128-wide N), issue more TMA loads per flop, and spend a larger share of their time in the
// prologue and epilogue. Estimates, to refine from bench measurements; what matters is their order and the
// large-shape crossover: with 0.8 for 64 x 128, 4096^3 and 8192^3 keep 128 x 256 (equal or nearly equal
// waves x work, so the factor decides), 1024^3 (one wave of 128 tiles against a quarter-full wave) and
// decode-like grids take 64 x 128.
double gemm_tile_efficiency(int tile_m, int tile_n) {
  const int64_t area = static_cast<int64_t>(tile_m) * tile_n;
  if (area >= 128 * 256) return 1.0;
  if (area >= 128 * 192) return 0.95;  // measured 0.87-0.96 of 128 x 256 per wave on bf16 squares (H200, session 50)
  if (area >= 128 * 128) return 0.9;
  if (area >= 64 * 128) return 0.8;  // 64 x 128 ping-pong, 128 x 64 cooperative
  return 0.65;
}

double gemm_row_efficiency(const GemmKernel& kernel) {
  const bool register_b =
      kernel.tier == GemmTier::sm90 && kernel.math == GemmMath::tf32 && kernel.a_k_major == 1 && kernel.b_k_major == 0;
  return register_b && kernel.tile_m < 256 ? 0.62 : 1.0;
}

double gemm_tile_cost(int64_t m, int64_t n, int64_t k, int64_t batch, int tile_m, int tile_n, int multiprocessors,
                      bool overlaps_epilogue, double row_efficiency, bool staged_epilogue) {
  const int64_t tiles = output_tiles(m, n, batch, tile_m, tile_n);
  const int64_t slots = std::max(multiprocessors, 1);
  const int64_t tiles_per_sm = (tiles + slots - 1) / slots;
  if (overlaps_epilogue && k > kGemmPingPongShortK) {
    const double pairs = static_cast<double>(tiles_per_sm / 2) * 2.0 / gemm_tile_efficiency(tile_m, tile_n);
    const double lone = static_cast<double>(tiles_per_sm % 2) / kGemmPingPongLoneEfficiency;
    return (pairs + lone) * tile_m * tile_n * static_cast<double>(k + kGemmPingPongTileDepth) / row_efficiency;
  }
  const auto waves = static_cast<double>(tiles_per_sm);
  const int64_t epilogue = overlaps_epilogue ? 0 : staged_epilogue ? kGemmStagedEpilogueDepth : kGemmEpilogueDepth;
  const int64_t depth = std::max<int64_t>(k, 1) + epilogue;
  const double tile_work = static_cast<double>(tile_m) * tile_n * static_cast<double>(depth);
  return waves * tile_work / (gemm_tile_efficiency(tile_m, tile_n) * row_efficiency);
}

double gemm_stream_k_cost(int64_t m, int64_t n, int64_t k, int64_t batch, int tile_m, int tile_n, int multiprocessors) {
  const auto tiles = static_cast<double>(output_tiles(m, n, batch, tile_m, tile_n));
  const double tile_work =
      static_cast<double>(tile_m) * tile_n * static_cast<double>(std::max<int64_t>(k, 1) + kGemmEpilogueDepth);
  return kStreamKOverhead * tiles * tile_work / gemm_tile_efficiency(tile_m, tile_n) / std::max(multiprocessors, 1);
}

bool gemm_token_tile(const GemmKernel& kernel) {
  return kernel.tier == GemmTier::sm90 && !kernel.split_k && !kernel.stream_k &&
         int64_t{kernel.tile_m} * kernel.tile_n < 64 * 128;
}

bool gemm_token_tile_fills_one_wave(int64_t m, int64_t n, int64_t batch, int tile_m, int tile_n, int multiprocessors) {
  if (batch != 1 || m > tile_m || 4 * m <= 3 * int64_t{tile_m}) return false;
  const int64_t tiles = output_tiles(m, n, batch, tile_m, tile_n);
  return tiles <= multiprocessors && 10 * tiles >= 9 * int64_t{multiprocessors};
}

int choose_gemm_candidate(int64_t m, int64_t n, int64_t k, int64_t batch, const std::vector<GemmCandidate>& accepted,
                          int multiprocessors) {
  int split_k = -1, stream_k = -1, data_parallel = -1;
  double best = 0.0;
  int64_t split_k_area = 0;
  for (int i = 0; i < static_cast<int>(accepted.size()); ++i) {
    const GemmCandidate& c = accepted[static_cast<size_t>(i)];
    if (c.token_tile && gemm_token_tile_fills_one_wave(m, n, batch, c.tile_m, c.tile_n, multiprocessors)) {
      return i;
    }
  }
  for (int i = 0; i < static_cast<int>(accepted.size()); ++i) {
    const GemmCandidate& c = accepted[static_cast<size_t>(i)];
    if (c.split_k) {
      // Split-K problems are bound by the operands' bytes and the SMs the slices occupy, not by the tiles'
      // efficiency: the row that pads the output least (decode's M = 1: a 64-column swapped tile, not 128 rows).
      const int64_t area = output_tiles(m, n, batch, c.tile_m, c.tile_n) * c.tile_m * c.tile_n;
      if (split_k < 0 || area < split_k_area) split_k = i, split_k_area = area;
    } else if (c.stream_k) {
      if (stream_k < 0) stream_k = i;
    } else if (!c.token_tile) {
      const double cost = gemm_tile_cost(m, n, k, batch, c.tile_m, c.tile_n, multiprocessors, c.overlaps_epilogue,
                                         c.efficiency, c.staged_epilogue);
      if (data_parallel < 0 || cost < best) data_parallel = i, best = cost;
    }
  }
  // Split-K's own rule (its refusal, gemm_split_k.hpp) admits only small grids with a long K: it runs them.
  if (split_k >= 0) return split_k;
  if (data_parallel < 0) return stream_k;
  // Fewer output tiles than half the SMs, even on the chosen tile: stream-K spreads the K loops over the device.
  const GemmCandidate& chosen = accepted[static_cast<size_t>(data_parallel)];
  const bool small_grid = 2 * output_tiles(m, n, batch, chosen.tile_m, chosen.tile_n) < multiprocessors;
  if (small_grid && stream_k >= 0) return stream_k;
  if (stream_k >= 0) {
    const GemmCandidate& c = accepted[static_cast<size_t>(stream_k)];
    const int64_t stream_k_tiles = output_tiles(m, n, batch, c.tile_m, c.tile_n);
    if (k >= kStreamKOneWaveMinK && 2 * stream_k_tiles > multiprocessors && stream_k_tiles <= multiprocessors &&
        output_tiles(m, n, batch, chosen.tile_m, chosen.tile_n) > multiprocessors) {
      return stream_k;
    }
    if (stream_k_tiles >= kStreamKMinTilesPerSm * int64_t{multiprocessors} &&
        gemm_stream_k_cost(m, n, k, batch, c.tile_m, c.tile_n, multiprocessors) < best) {
      // A data-parallel row whose tiles fill kStreamKYieldingWaves to 2 waves runs instead (the cheapest such row).
      int filling = -1;
      double filling_cost = 0.0;
      for (int i = 0; i < static_cast<int>(accepted.size()); ++i) {
        const GemmCandidate& d = accepted[static_cast<size_t>(i)];
        if (d.split_k || d.stream_k || d.token_tile) continue;
        const auto waves = static_cast<double>(output_tiles(m, n, batch, d.tile_m, d.tile_n)) / multiprocessors;
        if (waves < kStreamKYieldingWaves || waves > 2.0) continue;
        const double cost = gemm_tile_cost(m, n, k, batch, d.tile_m, d.tile_n, multiprocessors, d.overlaps_epilogue,
                                           d.efficiency, d.staged_epilogue);
        if (filling < 0 || cost < filling_cost) filling = i, filling_cost = cost;
      }
      return filling >= 0 ? filling : stream_k;
    }
  }
  return data_parallel;
}

#define ATTNKIT_GEMM_ENTRY(function, id) &function(),
const std::vector<const GemmKernel*>& gemm_kernels() {
  static const std::vector<const GemmKernel*> kernels = [] {
    std::vector<const GemmKernel*> list{&narrow_3xtf32_gemm_kernel(false, 32),
                                        &narrow_3xtf32_gemm_kernel(false, 64),
                                        &narrow_gemm_kernel(),
                                        &narrow_exact_gemm_kernel(),
                                        &narrow_3xtf32_gemm_kernel(true, 32),
                                        &narrow_3xtf32_gemm_kernel(true, 64),
                                        &narrow_k_major_gemm_kernel(),
                                        &narrow_k_major_exact_gemm_kernel(),
                                        &narrow_16_bit_gemm_kernel(DType::bf16),
                                        &narrow_16_bit_gemm_kernel(DType::f16),
                                        ATTNKIT_GEMM_KERNELS(ATTNKIT_GEMM_ENTRY)};
    for (DType dtype : {DType::f16, DType::bf16, DType::f32}) list.push_back(&simt_gemm_kernel(dtype));
    return list;
  }();
  return kernels;
}
#undef ATTNKIT_GEMM_ENTRY

const GemmDevice& gemm_device(int index) {
  static std::array<GemmDevice, kMaxDevices> devices;
  static std::array<std::once_flag, kMaxDevices> once;
  if (index < 0 || index >= kMaxDevices) {
    throw Error(Status::invalid_argument, "device: index " + std::to_string(index) + "; allowed: 0 to 63");
  }
  const auto i = static_cast<size_t>(index);
  std::call_once(once[i], [&] { devices[i] = read_device(index); });
  return devices[i];
}

bool gemm_architecture_runs_on(int architecture, int capability) {
  if (architecture == 90) return capability == 90;
  return capability >= architecture;
}

bool gemm_kernel_matches(const GemmKernel& kernel, const GemmShape& shape, bool allow_tf32) {
  if (kernel.dtype != shape.dtype) return false;
  if (kernel.math == GemmMath::tf32 && !allow_tf32) return false;
  if (kernel.a_k_major >= 0 && (kernel.a_k_major == 1) != shape.a_k_major()) return false;
  if (kernel.b_k_major >= 0 && (kernel.b_k_major == 1) != shape.b_k_major()) return false;
  return true;
}

bool gemm_kernel_transposes_b(const GemmKernel& kernel, const GemmShape& shape, bool allow_tf32) {
  return kernel.tier == GemmTier::sm90 && kernel.math == GemmMath::tf32 && allow_tf32 && kernel.dtype == shape.dtype &&
         kernel.b_k_major == 1 && !shape.b_k_major() &&
         (kernel.a_k_major < 0 || (kernel.a_k_major == 1) == shape.a_k_major());
}

std::string GemmChoice::name() const { return std::string(kernel->name) + (staging.any() ? "+staged" : ""); }

std::string gemm_kernel_refusal(const GemmKernel& kernel, const GemmShape& shape, const GemmDevice& device,
                                GemmStaging* staging) {
  *staging = GemmStaging{};
  if (gemm_kernel_transposes_b(kernel, shape, true)) {
    const GemmStaging transposed = transposed_b_staging(shape);
    std::string why = kernel.refusal(staged_shape(shape, transposed), device);
    if (why.empty()) *staging = transposed;
    return why;
  }
  std::string why = kernel.refusal(shape, device);
  if (why.empty() || kernel.tier == GemmTier::simt || kernel.tier == GemmTier::narrow) return why;
  // Staged: TMA rows copy the operands whose strides miss its rule, SM80 rows also pad the extents.
  const GemmStaging staged = kernel.tier == GemmTier::sm90 ? tma_staging(shape) : padded_staging(shape);
  if (!staged.any() || !kernel.refusal(staged_shape(shape, staged), device).empty()) return why;
  *staging = staged;
  return "";
}

GemmChoice select_gemm_kernel(const GemmShape& shape, const GemmDevice& device, bool allow_tf32) {
  if (const char* forced = std::getenv(kForcedGemmConfigVariable); forced != nullptr && forced[0] != '\0') {
    for (const GemmKernel* kernel : gemm_kernels()) {
      if (std::string(kernel->name) != forced) continue;
      std::string why;
      GemmStaging staging;
      if (kernel->dtype != shape.dtype) {
        why = "its dtype is " + std::string(dtype_name(kernel->dtype)) + ", the call's " +
              std::string(dtype_name(shape.dtype));
      } else if (!gemm_architecture_runs_on(kernel->architecture, device.capability)) {
        why = "it is built for sm_" + std::to_string(kernel->architecture) + ", the device is compute capability " +
              std::to_string(device.capability);
      } else if (!shape.product_zero && !gemm_kernel_matches(*kernel, shape, true) &&
                 !gemm_kernel_transposes_b(*kernel, shape, true)) {
        why = "its A / B majorness differ from the call's";
      } else if (!shape.product_zero) {
        why = gemm_kernel_refusal(*kernel, shape, device, &staging);
      }
      if (!why.empty()) {
        throw Error(Status::unsupported, std::string(kForcedGemmConfigVariable) + "=" + forced +
                                             ": that kernel cannot run this problem (" + why +
                                             "); allowed: unset it, or name a kernel that fits");
      }
      if (shape.product_zero) return {&simt_gemm_kernel(shape.dtype), {}};
      return {kernel, staging};
    }
    throw Error(Status::unsupported, std::string(kForcedGemmConfigVariable) + "=" + forced +
                                         ": no such kernel in this build; allowed: " + names_of_entries());
  }
  if (shape.product_zero) return {&simt_gemm_kernel(shape.dtype), {}};
  // The accepting rows of the first accepting row's tier and math, in table order.
  std::vector<GemmChoice> accepted;
  std::vector<GemmCandidate> candidates;
  // Where B's transposition pays, the TF32 Hopper rows are the K-major-B ones on a transposed B, not the MN-major-B
  // ones that move B through registers.
  const bool transpose_b = allow_tf32 && device.capability == 90 && gemm_transposed_b_pays(shape);
  for (const GemmKernel* kernel : gemm_kernels()) {
    if (kernel->tier == GemmTier::simt) continue;
    const bool transposes = transpose_b && gemm_kernel_transposes_b(*kernel, shape, allow_tf32);
    if (!transposes && !gemm_kernel_matches(*kernel, shape, allow_tf32)) continue;
    if (transpose_b && !transposes && kernel->tier == GemmTier::sm90 && kernel->math == GemmMath::tf32) continue;
    // Exact-only entries (the SIMT narrow 33-64-row ones), the narrow kernel above narrow_tf32_max_rows with TF32
    // allowed, its 16-bit entries outside narrow_16_bit_automatic and its 3xTF32 entries outside
    // narrow_3xtf32_automatic measured slower than (or level with) the tensor-core rows: only a forced config or the
    // tuner runs them.
    const bool narrow = kernel->tier == GemmTier::narrow;
    if (kernel->exact_only || (narrow && allow_tf32 && shape.m > narrow_tf32_max_rows(device.capability)) ||
        (narrow && kernel->dtype != DType::f32 && !narrow_16_bit_automatic(shape)) ||
        (narrow && kernel->math == GemmMath::fast_f32 && !narrow_3xtf32_automatic(shape))) {
      continue;
    }
    if (!gemm_architecture_runs_on(kernel->architecture, device.capability)) continue;
    if (!accepted.empty() &&
        (kernel->tier != accepted.front().kernel->tier || kernel->math != accepted.front().kernel->math)) {
      continue;
    }
    GemmStaging staging;
    if (!gemm_kernel_refusal(*kernel, shape, device, &staging).empty()) continue;
    accepted.push_back({kernel, staging});
    candidates.push_back({kernel->tile_m, kernel->tile_n, kernel->split_k, kernel->stream_k, kernel->overlaps_epilogue,
                          gemm_token_tile(*kernel), gemm_row_efficiency(*kernel), kernel->staged_epilogue});
  }
  const int chosen = choose_gemm_candidate(shape.m, shape.n, shape.k, shape.batch, candidates, device.multiprocessors);
  if (chosen >= 0) return accepted[static_cast<size_t>(chosen)];
  return {&simt_gemm_kernel(shape.dtype), {}};
}

}  // namespace attnkit::cuda::gemm
