#include "fuzz_tensors.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "attnkit/dtype.hpp"
#include "core/float_convert.hpp"

namespace attnkit::fuzz {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

// Arithmetic on values earlier corruptions may have pushed to the limits, wrapping instead of overflowing.
int64_t wrap(uint64_t value) { return static_cast<int64_t>(value); }
int32_t wrap32(uint32_t value) { return static_cast<int32_t>(value); }
int64_t plus(int64_t a, int64_t b) { return wrap(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }

// splitmix64: the fill values of one input come from a seed the input holds.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

bool valid_dtype(int32_t dtype) { return dtype >= ATTNKIT_FLOAT32 && dtype <= ATTNKIT_BOOL; }
bool floating(int32_t dtype) { return dtype >= ATTNKIT_FLOAT32 && dtype <= ATTNKIT_FLOAT64; }

void store(unsigned char* element, int32_t dtype, double value) { store_element(element, dtype, value); }

// Element-sized chunks from `start`, each filled by `fill`; a partial chunk at the end gets 0xA5 bytes.
template <class F>
void fill_chunks(unsigned char* start, std::size_t bytes, std::size_t element, F&& fill) {
  std::size_t at = 0;
  for (; element > 0 && at + element <= bytes; at += element) fill(start + at);
  std::memset(start + at, 0xA5, bytes - at);
}

}  // namespace

// Through an aligned copy: the fuzzer lays out misaligned tensors on purpose.
double load_element(const unsigned char* element, int32_t dtype) {
  alignas(8) unsigned char copy[8];
  std::memcpy(copy, element, static_cast<std::size_t>(dtype_bytes(dtype)));
  return detail::load_as_double(copy, static_cast<DType>(dtype), 0);
}

void store_element(unsigned char* element, int32_t dtype, double value) {
  alignas(8) unsigned char copy[8];
  detail::store_from_double(copy, static_cast<DType>(dtype), 0, value);
  std::memcpy(element, copy, static_cast<std::size_t>(dtype_bytes(dtype)));
}

int64_t dtype_bytes(int32_t dtype) {
  return valid_dtype(dtype) ? static_cast<int64_t>(dtype_size(static_cast<DType>(dtype))) : 0;
}

void write_poison(unsigned char* element, int32_t dtype) {
  switch (dtype) {
    case ATTNKIT_FLOAT32: {
      const uint32_t bits = 0x7fc0deadu;  // a quiet NaN no computation produces
      std::memcpy(element, &bits, sizeof(bits));
      break;
    }
    case ATTNKIT_FLOAT64: {
      const uint64_t bits = 0x7ff8dead0000beefull;
      std::memcpy(element, &bits, sizeof(bits));
      break;
    }
    case ATTNKIT_FLOAT16: {
      const uint16_t bits = 0x7e5au;
      std::memcpy(element, &bits, sizeof(bits));
      break;
    }
    case ATTNKIT_BFLOAT16: {
      const uint16_t bits = 0x7fdau;
      std::memcpy(element, &bits, sizeof(bits));
      break;
    }
    default: *element = 0xA5;
  }
}

void describe(attnkit_tensor& tensor, int32_t dtype, std::span<const int64_t> extents, bool is_output, ByteSource& in) {
  tensor = attnkit_tensor{};
  tensor.dtype = dtype;
  tensor.device_type = ATTNKIT_DEVICE_CPU;
  const int rank = static_cast<int>(extents.size());
  tensor.rank = rank;
  std::copy(extents.begin(), extents.end(), tensor.extents);
  if (rank == 0) return;
  const int choice = in.byte() % 10;
  Layout layout = choice < 6 ? Layout::contiguous : choice < 8 ? Layout::padded : Layout::permuted;
  if (choice == 9 && !is_output) layout = Layout::broadcast;
  // Memory order, outermost first; the last dim stays innermost (it must be contiguous).
  std::vector<int> order(static_cast<std::size_t>(rank));
  std::iota(order.begin(), order.end(), 0);
  if (layout == Layout::permuted) {
    for (int i = rank - 2; i > 0; --i) std::swap(order[i], order[in.range(0, i)]);
  }
  int64_t running = 1;
  for (int i = rank - 1; i >= 0; --i) {
    const int d = order[i];
    tensor.strides[d] = running;
    const int64_t pad = layout == Layout::contiguous || layout == Layout::broadcast ? 0 : in.range(0, 2);
    running *= std::max<int64_t>(extents[d], 1) + pad;
  }
  if (layout == Layout::broadcast && rank > 1) tensor.strides[in.range(0, rank - 2)] = 0;
}

bool span_bytes(const attnkit_tensor& tensor, int64_t* bytes) {
  *bytes = 0;
  const int64_t element = dtype_bytes(tensor.dtype);
  if (tensor.rank < 0 || tensor.rank > ATTNKIT_MAX_RANK || element == 0) return false;
  int64_t last = 0;
  bool empty = false;
  for (int d = 0; d < tensor.rank; ++d) {
    if (tensor.extents[d] < 0 || tensor.strides[d] < 0) return false;
    empty = empty || tensor.extents[d] == 0;
  }
  if (empty) return true;
  for (int d = 0; d < tensor.rank; ++d) {
    int64_t term = 0;
    if (__builtin_mul_overflow(tensor.extents[d] - 1, tensor.strides[d], &term) ||
        __builtin_add_overflow(last, term, &last)) {
      return false;
    }
  }
  if (__builtin_add_overflow(last, 1, &last) || __builtin_mul_overflow(last, element, bytes)) return false;
  return *bytes <= kMaxTensorBytes;
}

TensorSlot& TensorSet::add(std::string name, attnkit_tensor* field, Role role, bool present) {
  TensorSlot& slot = slots_.emplace_back();
  slot.name = std::move(name);
  slot.field = field;
  slot.role = role;
  slot.present = present;
  if (!present) *field = attnkit_tensor{};
  return slot;
}

TensorSlot* TensorSet::find(const std::string& name) {
  for (auto& slot : slots_) {
    if (slot.name == name) return &slot;
  }
  return nullptr;
}

std::string TensorSet::corrupt(ByteSource& in, bool& huge_used) {
  std::vector<TensorSlot*> present;
  for (auto& slot : slots_) {
    if (slot.present) present.push_back(&slot);
  }
  if (present.empty()) return "none";
  TensorSlot& slot = *present[static_cast<std::size_t>(in.range(0, static_cast<int64_t>(present.size()) - 1))];
  attnkit_tensor& t = *slot.field;
  const int dim = static_cast<int>(in.range(0, std::clamp(t.rank, 1, ATTNKIT_MAX_RANK) - 1));
  const std::string where = slot.name + " dim " + std::to_string(dim);
  switch (in.byte() % 9) {
    case 0: {
      const int64_t old = t.extents[dim];
      int64_t value =
          in.pick<int64_t>({-1, 0, plus(old, 1), plus(old, -1), 1, 2, kInt64Min, wrap(0 - static_cast<uint64_t>(old))});
      if (!huge_used && !slot.huge_extent_may_be_valid && in.chance(1, 3)) {
        value = in.pick<int64_t>({kInt64Max, int64_t{1} << 62, int64_t{1} << 40, (int64_t{1} << 31) + 1,
                                  int64_t{1} << 32, 3037000500});  // the last: its square overflows
        huge_used = true;
      }
      t.extents[dim] = value;
      return where + " extent " + std::to_string(old) + " -> " + std::to_string(value);
    }
    case 1: {
      const int64_t old = t.strides[dim];
      t.strides[dim] = in.pick<int64_t>({-1, 0, 2, plus(old, 1), plus(plus(old, old), 1), kInt64Max, kInt64Min});
      return where + " stride " + std::to_string(old) + " -> " + std::to_string(t.strides[dim]);
    }
    case 2: {
      const int32_t old = t.rank;
      const int32_t value =
          in.pick<int32_t>({-1, 0, wrap32(static_cast<uint32_t>(old) - 1), wrap32(static_cast<uint32_t>(old) + 1),
                            ATTNKIT_MAX_RANK, ATTNKIT_MAX_RANK + 1, std::numeric_limits<int32_t>::max()});
      for (int d = std::max(old, 0); d < std::min(value, ATTNKIT_MAX_RANK); ++d) {
        t.extents[d] = 1;
        t.strides[d] = 1;
      }
      t.rank = value;
      return slot.name + " rank " + std::to_string(old) + " -> " + std::to_string(value);
    }
    case 3:
      t.dtype = in.pick<int32_t>({-1, 5, ATTNKIT_FLOAT32, ATTNKIT_FLOAT16, ATTNKIT_BFLOAT16, ATTNKIT_FLOAT64,
                                  ATTNKIT_BOOL, std::numeric_limits<int32_t>::min()});
      return slot.name + " dtype -> " + std::to_string(t.dtype);
    case 4:
      if (in.chance(1, 2)) {
        // CUDA on host memory only where no GPU could run it (the call must then be refused).
        t.device_type = in.pick<int32_t>({-1, 2, attnkit_cuda_device_count() > 0 ? 2 : ATTNKIT_DEVICE_CUDA});
        return slot.name + " device_type -> " + std::to_string(t.device_type);
      }
      t.device_index = in.pick<int32_t>({-1, 1, 7, std::numeric_limits<int32_t>::min()});
      return slot.name + " device_index -> " + std::to_string(t.device_index);
    case 5: slot.null_data = true; return slot.name + " data NULL";
    case 6:
      slot.misalign_bytes = in.pick<int>({1, 2, 3, 4, 8});
      return slot.name + " address +" + std::to_string(slot.misalign_bytes);
    case 7:
      if (t.dtype == ATTNKIT_BOOL) {
        slot.odd_bool_bytes = true;
        return slot.name + " bool bytes other than 0/1";
      }
      slot.nonfinite = slot.role != Role::output;
      return slot.name + " a non-finite element";
    default: {
      // Swap two extents (a transposed shape with the old strides).
      const int other = static_cast<int>(in.range(0, std::clamp(t.rank, 1, ATTNKIT_MAX_RANK) - 1));
      std::swap(t.extents[dim], t.extents[other]);
      return slot.name + " extents " + std::to_string(dim) + " <-> " + std::to_string(other);
    }
  }
}

void TensorSet::materialise(uint64_t seed) {
  Rng rng{seed};
  for (auto& slot : slots_) {
    attnkit_tensor& t = *slot.field;
    if (!slot.present || slot.null_data) {
      t.data = nullptr;
      continue;
    }
    int64_t bytes = 0;
    slot.fits = span_bytes(t, &bytes);
    // An unallocatable descriptor still gets a real (small) buffer: the call must refuse it unread.
    const auto span = static_cast<std::size_t>(slot.fits ? bytes : 64);
    const auto misalign = static_cast<std::size_t>(slot.misalign_bytes);
    slot.memory_bytes = std::max<std::size_t>(span + misalign, 1);
    slot.memory.reset(new unsigned char[slot.memory_bytes]);
    std::memset(slot.memory.get(), 0xA5, misalign);
    unsigned char* start = slot.memory.get() + misalign;
    t.data = start;
    const std::size_t element = static_cast<std::size_t>(std::max<int64_t>(dtype_bytes(t.dtype), 1));
    const std::size_t usable = slot.memory_bytes - misalign;
    if (slot.role == Role::output) {
      fill_chunks(start, usable, element, [&](unsigned char* e) { write_poison(e, t.dtype); });
    } else if (t.dtype == ATTNKIT_BOOL) {
      const double density = std::array{0.0, 0.15, 0.5, 0.85, 1.0}[rng.next() % 5];
      fill_chunks(start, usable, 1, [&](unsigned char* e) {
        *e = slot.odd_bool_bytes ? static_cast<unsigned char>(rng.next()) : rng.uniform(0, 1) < density;
      });
    } else if (floating(t.dtype)) {
      fill_chunks(start, usable, element, [&](unsigned char* e) { store(e, t.dtype, rng.uniform(-1.0, 1.0)); });
      if (slot.nonfinite && usable >= element && slot.fits && bytes > 0) {
        const double values[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                 -std::numeric_limits<double>::infinity()};
        store(start, t.dtype, values[rng.next() % 3]);
      }
    } else {
      fill_chunks(start, usable, 1, [&](unsigned char* e) { *e = static_cast<unsigned char>(rng.next()); });
    }
    slot.covered.assign(slot.memory_bytes, 0);
    if (slot.fits && slot.role != Role::input) {
      for_each_element(t, [&](int64_t offset) {
        std::memset(slot.covered.data() + misalign + static_cast<std::size_t>(offset) * element, 1, element);
      });
    }
  }
  snapshot();
}

void TensorSet::repoison() {
  for (auto& slot : slots_) {
    if (slot.role != Role::output || slot.memory == nullptr) continue;
    const auto misalign = static_cast<std::size_t>(slot.misalign_bytes);
    const std::size_t element = static_cast<std::size_t>(std::max<int64_t>(dtype_bytes(slot.field->dtype), 1));
    fill_chunks(slot.memory.get() + misalign, slot.memory_bytes - misalign, element,
                [&](unsigned char* e) { write_poison(e, slot.field->dtype); });
  }
  snapshot();
}

void TensorSet::snapshot() {
  for (auto& slot : slots_) {
    if (slot.memory) slot.before.assign(slot.memory.get(), slot.memory.get() + slot.memory_bytes);
  }
}

bool TensorSet::all_fit() const {
  return std::all_of(slots_.begin(), slots_.end(), [](const TensorSlot& s) { return s.memory == nullptr || s.fits; });
}

bool TensorSet::inputs_finite() const {
  return std::none_of(slots_.begin(), slots_.end(), [](const TensorSlot& s) { return s.memory && s.nonfinite; });
}

}  // namespace attnkit::fuzz
