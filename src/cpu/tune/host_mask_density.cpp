#include "cpu/tune/host_mask_density.hpp"

#include <algorithm>

namespace attnkit::tune {
namespace {

// Masks with more entries are counted on every step-th row only: the key needs the density to within
// a power of two, and a call's dispatch should not read a 4096 x 4096 element mask twice.
constexpr int64_t kEntriesCountedAtMost = int64_t{1} << 20;

}  // namespace

double host_mask_density(const AttentionMask& mask) {
  if (mask.kind != MaskKind::block && mask.kind != MaskKind::element) return 1.0;
  const TensorView& m = mask.kind == MaskKind::block ? mask.block_mask : mask.element_mask;
  if (!m.defined() || m.rank != 4) return 1.0;
  const int64_t rows = m.extents[0] * m.extents[1] * m.extents[2];
  const int64_t cols = m.extents[3];
  if (rows * cols == 0) return 1.0;
  const int64_t step = std::max<int64_t>(1, rows * cols / kEntriesCountedAtMost);
  const auto* data = static_cast<const unsigned char*>(m.data);
  int64_t attended = 0;
  int64_t counted = 0;
  for (int64_t row = 0; row < rows; row += step) {
    const int64_t r = row % m.extents[2];
    const int64_t h = (row / m.extents[2]) % m.extents[1];
    const int64_t b = row / (m.extents[2] * m.extents[1]);
    const unsigned char* line = data + b * m.strides[0] + h * m.strides[1] + r * m.strides[2];
    for (int64_t c = 0; c < cols; ++c) attended += line[c * m.strides[3]] != 0;
    counted += cols;
  }
  // An all-false mask still has to be described by a valid density (0 < density <= 1).
  return std::max(static_cast<double>(attended) / static_cast<double>(counted), 1e-6);
}

}  // namespace attnkit::tune
