// The neighborhood window of DESIGN §3, for one token dimension. Shared verbatim by the CPU oracle,
// the GPU tile-range math and the tests, so that every backend visits exactly the same keys.
//
// A coordinate x in [0, L) belongs to dilation group r = x mod d, in which it has index i = x div d;
// the group holds n = ceil((L - r) / d) tokens. Windows are computed on group indices and never
// leave the group. Requirements (checked by validation): 1 <= w, w*d <= L, 1 <= s <= w.
#pragma once
#include <cstdint>

#include "core/host_device.hpp"

namespace attnkit::detail {

// Half-open interval of group indices [begin, end).
struct IndexRange {
  int64_t begin = 0;
  int64_t end = 0;
};

ATTNKIT_HOST_DEVICE int64_t dilation_group_size(int64_t extent, int64_t dilation, int64_t group) {
  return (extent - group + dilation - 1) / dilation;
}

// Keys (group indices) seen by the query with group index i in a group of n tokens.
ATTNKIT_HOST_DEVICE IndexRange neighborhood_window(int64_t i, int64_t n, int64_t window, int64_t stride, bool causal) {
  // The first index of i's stride group; stride 1 spares the 64-bit division (per row in GPU kernels).
  const int64_t group_first = stride == 1 ? i : (i / stride) * stride;
  if (causal) {
    int64_t leader = group_first + stride - 1;
    leader = leader < n - 1 ? leader : n - 1;
    int64_t begin = leader - window + 1;
    begin = begin > 0 ? begin : 0;
    int64_t end = i + 1 < n ? i + 1 : n;
    return {begin, end};
  }
  const int64_t left = window / 2;
  const int64_t right = window / 2 + window % 2 - 1;
  int64_t leader = group_first + stride / 2;
  leader = leader < n - 1 ? leader : n - 1;
  int64_t begin = leader - left;
  begin = begin > 0 ? begin : 0;
  if (leader + right >= n) begin -= leader + right - (n - 1);
  return {begin, begin + window};
}

// Same, in coordinates: the keys x' with x' = x (mod d) whose group index lies in the window of x.
// Returned as a range of group indices plus the group; key coordinate = index * dilation + group.
struct CoordinateWindow {
  int64_t group = 0;
  IndexRange indices{};
};

ATTNKIT_HOST_DEVICE CoordinateWindow neighborhood_window_of_coordinate(int64_t coordinate, int64_t extent,
                                                                       int64_t window, int64_t dilation, int64_t stride,
                                                                       bool causal) {
  const int64_t group = coordinate % dilation;
  const int64_t n = dilation_group_size(extent, dilation, group);
  return {group, neighborhood_window(coordinate / dilation, n, window, stride, causal)};
}

}  // namespace attnkit::detail
