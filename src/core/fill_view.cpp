#include "core/fill_view.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "attnkit/error.hpp"
#include "core/float_convert.hpp"
#include "core/zero_size.hpp"

#if ATTNKIT_WITH_CUDA
#include <cuda.h>  // driver types only: the functions come from cudaGetDriverEntryPointByVersion
#include <cuda_runtime_api.h>

#include "cuda/common/cuda_check.hpp"
#endif

namespace attnkit::detail {
namespace {

// The bytes of `value` stored as one element of `dtype`, in the first dtype_size(dtype) bytes (copied, not
// stored through a pointer of another type, which the optimizer may ignore).
uint64_t element_bits(DType dtype, double value) {
  uint64_t bits = 0;
  const auto copy = [&bits](const auto& element) { std::memcpy(&bits, &element, sizeof(element)); };
  switch (dtype) {
    case DType::f32: copy(static_cast<float>(value)); break;
    case DType::f64: copy(value); break;
    case DType::f16: copy(float_to_half(static_cast<float>(value))); break;
    case DType::bf16: copy(float_to_bf16(static_cast<float>(value))); break;
    case DType::boolean: copy(value != 0.0); break;
  }
  return bits;
}

// Calls visit(offset) with the element offset of every index of the first `outer_dims` dimensions
// (row-major order); every extent is >= 1.
template <class Visit>
void for_each_outer_index(const TensorView& view, int32_t outer_dims, Visit&& visit) {
  std::array<int64_t, kMaxRank> index{};
  int64_t offset = 0;
  while (true) {
    visit(offset);
    int d = outer_dims - 1;
    for (; d >= 0; --d) {
      offset += view.strides[d];
      if (++index[d] < view.extents[d]) break;
      offset -= view.strides[d] * view.extents[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

void fill_on_cpu(const TensorView& view, uint64_t bits) {
  const std::size_t size = dtype_size(view.dtype);
  const int64_t width = view.extents[view.rank - 1];
  auto* base = static_cast<unsigned char*>(view.data);
  for_each_outer_index(view, view.rank - 1, [&](int64_t offset) {
    unsigned char* row = base + offset * static_cast<int64_t>(size);
    for (int64_t i = 0; i < width; ++i) std::memcpy(row + i * static_cast<int64_t>(size), &bits, size);
  });
}

#if ATTNKIT_WITH_CUDA

void check_driver(CUresult status, const char* what) {
  if (status == CUDA_SUCCESS) return;
  throw Error(Status::cuda_error,
              std::string(what) + ": CUDA driver error " + std::to_string(static_cast<int>(status)));
}

// A driver function looked up through the CUDA runtime, so the library links no libcuda (a CPU-only machine
// loads it without a driver); the memsets below are the driver's only 16- and 32-bit fills.
template <class Function>
Function driver_function(const char* name) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  cuda::check_cuda(cudaGetDriverEntryPointByVersion(name, &function, 12000, cudaEnableDefault, &found), name);
  if (found != cudaDriverEntryPointSuccess || function == nullptr) {
    throw Error(Status::cuda_error, std::string(name) + ": not found in this CUDA driver");
  }
  return reinterpret_cast<Function>(function);
}

using MemsetD2D8 = CUresult (*)(CUdeviceptr, std::size_t, unsigned char, std::size_t, std::size_t, CUstream);
using MemsetD2D16 = CUresult (*)(CUdeviceptr, std::size_t, unsigned short, std::size_t, std::size_t, CUstream);
using MemsetD2D32 = CUresult (*)(CUdeviceptr, std::size_t, unsigned int, std::size_t, std::size_t, CUstream);

bool bytes_all_equal(uint64_t bits, std::size_t size) {
  unsigned char bytes[8];
  std::memcpy(bytes, &bits, sizeof(bytes));
  for (std::size_t i = 1; i < size; ++i) {
    if (bytes[i] != bytes[0]) return false;
  }
  return true;
}

// One memset of `height` rows of `width` elements, `pitch` bytes apart: by bytes when every byte of
// the element is the same (zeros), else by 16- or 32-bit words.
void memset_block(CUdeviceptr row, std::size_t pitch, uint64_t bits, std::size_t size, std::size_t width,
                  std::size_t height, CUstream stream) {
  if (bytes_all_equal(bits, size)) {
    unsigned char byte = 0;
    std::memcpy(&byte, &bits, 1);
    static const auto memset8 = driver_function<MemsetD2D8>("cuMemsetD2D8Async");
    check_driver(memset8(row, pitch, byte, width * size, height, stream), "cuMemsetD2D8Async");
  } else if (size == 2) {
    uint16_t word = 0;
    std::memcpy(&word, &bits, 2);
    static const auto memset16 = driver_function<MemsetD2D16>("cuMemsetD2D16Async");
    check_driver(memset16(row, pitch, word, width, height, stream), "cuMemsetD2D16Async");
  } else if (size == 4) {
    uint32_t word = 0;
    std::memcpy(&word, &bits, 4);
    static const auto memset32 = driver_function<MemsetD2D32>("cuMemsetD2D32Async");
    check_driver(memset32(row, pitch, word, width, height, stream), "cuMemsetD2D32Async");
  } else {
    throw Error(Status::internal, "fill_view: no memset writes this " + std::to_string(size) + "-byte value");
  }
}

void fill_on_cuda(const TensorView& view, uint64_t bits, const RunOptions& options) {
  const cuda::DeviceGuard guard(view.device.index);
  // The driver memsets need the device's primary context current; cudaSetDevice makes it so and, unlike a
  // cudaFree(nullptr), is allowed while the stream is being captured into a graph.
  cuda::check_cuda(cudaSetDevice(view.device.index), "cudaSetDevice");

  const std::size_t size = dtype_size(view.dtype);
  const auto width = static_cast<std::size_t>(view.extents[view.rank - 1]);
  const std::size_t row_bytes = width * size;
  // Blocks of the last two dimensions; rows that overlap (a pitch shorter than a row) one by one.
  int32_t outer_dims = view.rank - 1;
  std::size_t height = 1;
  std::size_t pitch = row_bytes;
  if (view.rank >= 2 && view.extents[view.rank - 2] > 1 &&
      static_cast<std::size_t>(view.strides[view.rank - 2]) * size >= row_bytes) {
    outer_dims = view.rank - 2;
    height = static_cast<std::size_t>(view.extents[view.rank - 2]);
    pitch = static_cast<std::size_t>(view.strides[view.rank - 2]) * size;
  }
  auto* base = static_cast<unsigned char*>(view.data);
  auto stream = static_cast<CUstream>(options.stream);
  for_each_outer_index(view, outer_dims, [&](int64_t offset) {
    const auto row = reinterpret_cast<CUdeviceptr>(base + offset * static_cast<int64_t>(size));
    memset_block(row, pitch, bits, size, width, height, stream);
  });
}

#endif

}  // namespace

void fill_view(const TensorView& view, double value, const RunOptions& options) {
  if (has_no_elements(view)) return;
  const uint64_t bits = element_bits(view.dtype, value);
  if (view.device.type == DeviceType::cpu) {
    fill_on_cpu(view, bits);
    return;
  }
#if ATTNKIT_WITH_CUDA
  fill_on_cuda(view, bits, options);
#else
  (void)options;
  throw Error(Status::unsupported,
              "backend: this libattnkit was built without CUDA; rebuild with -DATTNKIT_WITH_CUDA=ON or run on CPU "
              "tensors");
#endif
}

}  // namespace attnkit::detail
