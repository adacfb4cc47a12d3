// Shared pieces of the CPU attention drivers: how many threads a call uses, how much scratch it
// may hold at once, and the conversion of strided [B, *tokens, H, X] rows into the padded
// accumulator buffers of attention_tile_math.hpp.
//
// Both drivers work on (batch, kv head) "pairs". A chunk of pairs has its K and V slices converted
// once into contiguous accumulator buffers (positions in the mask visitor's order); all query
// heads of the pair's GQA group then read that copy. Chunks are sized so the scratch stays under
// kScratchBudgetBytes (at least one pair per chunk).
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "attnkit/backend.hpp"
#include "core/attention_shape.hpp"
#include "cpu/attention_element_io.hpp"
#include "cpu/attention_mask_visitor.hpp"

namespace attnkit::cpu {

inline constexpr int64_t kScratchBudgetBytes = int64_t{256} << 20;

// Threads for a call: options.num_threads, or all; but no more than there are tasks, and one per
// kMinWorkPerThread multiply-adds of (an upper bound of) the work, since waking a thread costs
// microseconds and tiny problems finish sooner on the caller's thread.
inline int resolve_thread_count(const RunOptions& options, int64_t tasks, double work) {
  constexpr double kMinWorkPerThread = 65536.0;
  const int64_t requested = options.num_threads > 0 ? options.num_threads : omp_get_max_threads();
  const double by_work = std::min(work / kMinWorkPerThread, static_cast<double>(requested));
  const int64_t count = std::min({requested, tasks, static_cast<int64_t>(by_work)});
  return static_cast<int>(std::max<int64_t>(count, 1));
}

// Upper bound of the multiply-adds of a forward: every query row against its most keys (in double:
// the product can exceed int64 for huge problems).
inline double attention_work_bound(const detail::AttentionShape& shape, const AttentionMaskVisitor& visitor) {
  return static_cast<double>(shape.batch * shape.heads_q * shape.seq_q) *
         static_cast<double>(visitor.max_keys_per_row()) * static_cast<double>(shape.head_dim + shape.head_dim_v);
}

// Element pointer of row (b, flat token, head) of a [B, *tokens, H, X] view; nullptr for a view without
// data (a tensor with no elements, e.g. head dim 0: its rows are never read).
template <class Storage>
Storage* row_pointer(const TensorView& view, const detail::TokenStrides& strides, int64_t b, int64_t token,
                     int64_t head, const std::array<int64_t, kMaxTokenDims>& extents) {
  if (view.data == nullptr) return nullptr;
  return static_cast<Storage*>(view.data) + strides.offset(b, token, head, extents);
}

// Reads the K and V rows of a (batch, kv head) pair, in the visitor's key order, as padded
// accumulator rows, and writes blocks of them in the layouts the tile kernels read: by rows
// ([position][width]) and transposed ([width][t_stride]: one line of consecutive keys per
// component). Transposed buffers are t_stride >= seq_k + kLanes wide so a kernel may read a whole
// line past a span's last key; the columns past seq_k are zeros.
template <class Storage, class Acc>
struct KvReader {
  const TensorView& k;
  const TensorView& v;
  detail::TokenStrides k_strides;
  detail::TokenStrides v_strides;
  const detail::AttentionShape& shape;
  const AttentionMaskVisitor& visitor;
  int64_t d_pad;
  int64_t dv_pad;
  int64_t t_stride;

  KvReader(const TensorView& k_view, const TensorView& v_view, const detail::AttentionShape& s,
           const AttentionMaskVisitor& mask_visitor)
      : k(k_view),
        v(v_view),
        k_strides(detail::token_strides(k_view, s.token_dims_kv)),
        v_strides(detail::token_strides(v_view, s.token_dims_kv)),
        shape(s),
        visitor(mask_visitor),
        d_pad(padded_width<Acc>(s.head_dim)),
        dv_pad(padded_width<Acc>(s.head_dim_v)),
        t_stride(padded_width<Acc>(s.seq_k) + kLanes<Acc>) {}

  // Key blocks of kLanes positions covering [0, t_stride).
  int64_t blocks() const { return t_stride / kLanes<Acc>; }

  // Rows [p0, p0 + kLanes) of K (or V when `values`) into rows[kLanes][width]; zeros past seq_k.
  void load_block(bool values, int64_t b, int64_t kv_head, int64_t p0, Acc* rows) const {
    const int64_t width = values ? dv_pad : d_pad;
    for (int64_t j = 0; j < kLanes<Acc>; ++j) {
      Acc* row = rows + j * width;
      const int64_t position = p0 + j;
      if (position >= shape.seq_k) {
        std::fill(row, row + width, Acc(0));
        continue;
      }
      const int64_t token = visitor.key_token(position);
      if (values) {
        load_row(row_pointer<const Storage>(v, v_strides, b, token, kv_head, shape.tokens_kv), shape.head_dim_v, dv_pad,
                 Acc(1), row);
      } else {
        load_row(row_pointer<const Storage>(k, k_strides, b, token, kv_head, shape.tokens_kv), shape.head_dim, d_pad,
                 Acc(1), row);
      }
    }
  }

  // Stores a block loaded by load_block: by rows (positions below seq_k) and/or transposed.
  void store_block(const Acc* rows, int64_t width, int64_t p0, Acc* by_rows, Acc* transposed) const {
    if (by_rows != nullptr) {
      const int64_t count = std::min(kLanes<Acc>, shape.seq_k - p0);
      if (count > 0) std::copy(rows, rows + count * width, by_rows + p0 * width);
    }
    if (transposed != nullptr) {
      for (int64_t d = 0; d < width; ++d) {
        for (int64_t j = 0; j < kLanes<Acc>; ++j) transposed[d * t_stride + p0 + j] = rows[j * width + d];
      }
    }
  }
};

}  // namespace attnkit::cpu
