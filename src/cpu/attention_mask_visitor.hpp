// Which keys each query row of an attention problem visits, for the CPU backend (DESIGN §3).
//
// The answer is a list of runs: ascending, disjoint half-open ranges of key *positions*. Positions
// number the tokens in a "visiting order" chosen so that the keys of a row form few, long runs:
//  - neighborhood masks permute every token dimension so that each dilation group is contiguous
//    (coordinate x of a dimension with dilation d goes to offset(x mod d) + x div d). A window is
//    then a contiguous range per dimension, and a row's keys are a box: one run per line of the box
//    along the last dimension. Q and KV share the permutation (their token extents are equal), and
//    queries are visited in the same order, so neighbouring rows reuse the same keys in cache.
//  - every other mask uses the identity order (position = flat token index).
// The window box is computed from per-dimension tables built once with
// detail::neighborhood_window_of_coordinate, so a row never looks at keys outside its window.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "attnkit/attention.hpp"
#include "core/attention_shape.hpp"

namespace attnkit::cpu {

struct KeyRun {
  int64_t begin = 0;
  int64_t end = 0;
};

class AttentionMaskVisitor {
 public:
  AttentionMaskVisitor(const AttentionMask& mask, const detail::AttentionShape& shape);

  // Flat token index of the query visited at `row` / of the key stored at `position`.
  int64_t query_token(int64_t row) const { return order_.empty() ? row : order_[row]; }
  int64_t key_token(int64_t position) const { return order_.empty() ? position : order_[position]; }

  // Replaces `runs` by the key positions that query `row` (visiting order) of batch b and query
  // head h attends.
  void visible_keys(int64_t b, int64_t h, int64_t row, std::vector<KeyRun>& runs) const;

  // No row visits more keys, or in more runs, than these.
  int64_t max_keys_per_row() const;
  int64_t max_runs_per_row() const;
  // Rows of one line: consecutive rows that differ only in the last token coordinate (for
  // neighborhood masks they share their windows in every other dimension), else all rows.
  int64_t rows_per_line() const;

 private:
  void neighborhood_keys(int64_t row, std::vector<KeyRun>& runs) const;
  void block_keys(int64_t b, int64_t h, int64_t query, std::vector<KeyRun>& runs) const;
  void element_keys(int64_t b, int64_t h, int64_t query, std::vector<KeyRun>& runs) const;

  const AttentionMask& mask_;
  const detail::AttentionShape& shape_;
  // Neighborhood only: position -> flat token index, and per dimension the window of the token at
  // each position, as a range of positions of that dimension.
  std::vector<int64_t> order_;
  std::array<std::vector<KeyRun>, kMaxTokenDims> window_of_position_;
};

// Appends [begin, end) to runs, merging it with the last run when they touch.
inline void append_run(std::vector<KeyRun>& runs, int64_t begin, int64_t end) {
  if (begin >= end) return;
  if (!runs.empty() && runs.back().end == begin) {
    runs.back().end = end;
  } else {
    runs.push_back({begin, end});
  }
}

}  // namespace attnkit::cpu
