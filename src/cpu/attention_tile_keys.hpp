// The keys a tile of query rows visits, laid out as "slots" for the tile kernels.
//
// A tile is up to kMaxTileRows consecutive query rows (in the mask visitor's order). Its key set
// is the union of the rows' runs, as ascending spans of key positions; spans closer than one chunk
// (kChunk keys) are merged, so the tile kernels, which work on whole chunks starting at each span's
// first key, waste at most one chunk per span. Span s owns slots [slot, slot + padded length) of
// the tile's score rows; the slots past its real keys hold scores of whatever keys follow and are
// masked like any key the row does not visit. For each row, `row_slots` lists the slot ranges it
// does visit, so everything else can be masked.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/attention_mask_visitor.hpp"

namespace attnkit::cpu {

inline constexpr int kMaxTileRows = 4;

struct KeySpan {
  int64_t begin = 0;  // key positions [begin, end)
  int64_t end = 0;
  int64_t slot = 0;  // first slot
};

struct TileKeys {
  std::array<std::vector<KeyRun>, kMaxTileRows> row_runs;   // key positions each row visits
  std::array<std::vector<KeyRun>, kMaxTileRows> row_slots;  // the same, as slot ranges
  std::vector<KeySpan> spans;
  int64_t slots = 0;  // total slots, a multiple of the chunk

  void reserve(size_t runs) {
    for (auto& r : row_runs) r.reserve(runs);
    for (auto& r : row_slots) r.reserve(runs);
    spans.reserve(runs);
  }

  // Builds spans, slots and row_slots from row_runs[0, rows).
  void build(int rows, int64_t chunk) {
    spans.clear();
    // k-way merge of the rows' sorted runs.
    std::array<size_t, kMaxTileRows> next{};
    while (true) {
      int pick = -1;
      for (int r = 0; r < rows; ++r) {
        if (next[r] < row_runs[r].size() &&
            (pick < 0 || row_runs[r][next[r]].begin < row_runs[pick][next[pick]].begin)) {
          pick = r;
        }
      }
      if (pick < 0) break;
      const KeyRun run = row_runs[pick][next[pick]++];
      if (!spans.empty() && run.begin < spans.back().end + chunk) {
        spans.back().end = std::max(spans.back().end, run.end);
      } else {
        spans.push_back({run.begin, run.end, 0});
      }
    }
    slots = 0;
    for (KeySpan& span : spans) {
      span.slot = slots;
      slots += (span.end - span.begin + chunk - 1) / chunk * chunk;
    }
    for (int r = 0; r < rows; ++r) {
      row_slots[r].clear();
      size_t s = 0;
      for (const KeyRun& run : row_runs[r]) {
        while (spans[s].end <= run.begin) ++s;
        const int64_t offset = spans[s].slot - spans[s].begin;
        row_slots[r].push_back({run.begin + offset, run.end + offset});
      }
    }
  }
};

// Most slots a tile of `rows` rows can need: every row's keys plus one padded chunk per run, or,
// with spans at least a chunk apart, at most every key plus one chunk per span.
inline int64_t tile_slot_capacity(int rows, int64_t chunk, int64_t max_keys_per_row, int64_t max_runs_per_row,
                                  int64_t seq_k) {
  const int64_t by_rows = rows * (max_keys_per_row + max_runs_per_row * chunk);
  const int64_t by_keys = 2 * seq_k + 2 * chunk;
  return std::max<int64_t>(std::min(by_rows, by_keys), chunk);
}

}  // namespace attnkit::cpu
