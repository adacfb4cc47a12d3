// Tensor arguments of one fuzzed call: each is a field of the C argument struct (an attnkit_tensor) whose
// descriptor the generator writes first (shape, strides, dtype, then corruptions), and whose memory is laid
// out afterwards from the final descriptor: real host memory of exactly the bytes the view spans, so that
// AddressSanitizer reports any access outside it. Inputs get random finite values, outputs a NaN poison
// pattern; both are snapshotted so the checks can tell what a call wrote.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "attnkit/attnkit.h"
#include "byte_source.hpp"

namespace attnkit::fuzz {

enum class Role { input, output, inout };  // inout: read and written (gemm's C with beta != 0)

// Largest span laid out for one tensor; a descriptor spanning more is one the library must refuse (the
// generator makes a span that large only together with a broken rule, see corrupt_descriptor).
constexpr int64_t kMaxTensorBytes = int64_t{1} << 22;

struct TensorSlot {
  std::string name;
  attnkit_tensor* field = nullptr;  // inside the argument struct
  Role role = Role::input;
  bool present = true;    // false: an optional tensor left out (data NULL)
  bool lse_like = false;  // an output where -inf is a valid result (no key in the row)
  // A huge extent here alone can make a valid call (gemm's C sets the batch that A and B broadcast to):
  // no huge extent is generated for it (it could not be laid out).
  bool huge_extent_may_be_valid = false;
  // The call does not read this field (a block or element mask under another mask kind): any descriptor
  // may be accepted there.
  bool unread = false;

  // Chosen before the memory is laid out.
  bool null_data = false;       // data NULL although present
  int misalign_bytes = 0;       // address offset from an allocation aligned to 16
  bool nonfinite = false;       // an input element set to NaN or inf
  bool odd_bool_bytes = false;  // bool input bytes other than 0 and 1

  // Laid out by TensorSet::materialise.
  bool fits = true;  // the span could be computed and allocated
  std::unique_ptr<unsigned char[]> memory;
  std::size_t memory_bytes = 0;
  std::vector<unsigned char> before;  // memory right before the call
  std::vector<uint8_t> covered;       // outputs: 1 for each byte an element of the view occupies

  bool written_to() const { return role != Role::input; }
  void* data() const { return field->data; }
};

// How a generated view lies in memory.
enum class Layout { contiguous, padded, permuted, broadcast };

// Writes a CPU descriptor of `extents` with strides of a layout chosen from the input (outputs never
// broadcast).
void describe(attnkit_tensor& tensor, int32_t dtype, std::span<const int64_t> extents, bool is_output, ByteSource& in);
int64_t dtype_bytes(int32_t dtype);  // 0 for an invalid dtype
// One element of a floating dtype at any address, as a double.
double load_element(const unsigned char* element, int32_t dtype);
void store_element(unsigned char* element, int32_t dtype, double value);

// The bytes a descriptor spans ((sum of (extent-1)*stride) + 1 elements), 0 with no elements; false when
// it cannot be laid out (invalid rank or dtype, negative extent or stride, overflow, over kMaxTensorBytes).
bool span_bytes(const attnkit_tensor& tensor, int64_t* bytes);

// Calls f(element offset) for every element of a descriptor that span_bytes accepted.
template <class F>
void for_each_element(const attnkit_tensor& tensor, F&& f) {
  const int rank = tensor.rank;
  for (int d = 0; d < rank; ++d) {
    if (tensor.extents[d] == 0) return;
  }
  int64_t index[ATTNKIT_MAX_RANK] = {};
  int64_t offset = 0;
  while (true) {
    f(offset);
    int d = rank - 1;
    for (; d >= 0; --d) {
      if (++index[d] < tensor.extents[d]) {
        offset += tensor.strides[d];
        break;
      }
      offset -= (tensor.extents[d] - 1) * tensor.strides[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

class TensorSet {
 public:
  TensorSlot& add(std::string name, attnkit_tensor* field, Role role, bool present = true);
  std::deque<TensorSlot>& slots() { return slots_; }
  const std::deque<TensorSlot>& slots() const { return slots_; }
  TensorSlot* find(const std::string& name);

  // Applies one descriptor corruption (extent, stride, rank, dtype, device, NULL data, misalignment,
  // non-finite or odd bool values) to a present tensor chosen from the input. `huge_used` allows one
  // unallocatable extent per call, so that a relation with another tensor is always broken with it.
  std::string corrupt(ByteSource& in, bool& huge_used);

  // Lays out memory for every present tensor from its final descriptor, fills and snapshots it.
  void materialise(uint64_t seed);
  // Refills the outputs with poison and takes a new snapshot (before a second call on the same tensors).
  void repoison();
  void snapshot();

  bool all_fit() const;
  bool inputs_finite() const;

 private:
  std::deque<TensorSlot> slots_;  // stable addresses
};

// Poison bit pattern of one element of `dtype` (NaN for floating types).
void write_poison(unsigned char* element, int32_t dtype);

}  // namespace attnkit::fuzz
