// Bucketing of the sizes that vary from call to call (DESIGN §6.6), so that a stream of new sequence
// lengths maps onto few tuning problems instead of re-tuning forever.
//
// Extents (sequence extents, batch) are rounded UP to the next point of a quarter-octave grid:
// every value <= 8 is its own bucket; above that the points are m * 2^e with m in {5, 6, 7, 8}
// (..., 512, 640, 768, 896, 1024, 1280, ...). Neighbouring points differ by at most 25 %, so a
// bucket's tuned config was measured on a problem at most 1.25x the size of any member, and a
// doubling of the length crosses only 4 buckets: lengths 1..65536 fall into 8 + 4*13 = 60 buckets.
// Rounding up (not to nearest) keeps every member's neighborhood constraint kernel*dilation <= L
// true for the bucket's representative extent.
//
// Sparse-mask density is rounded up to a power of two: 1, 1/2, 1/4, ..., 1/1024.
#pragma once
#include <cstdint>

namespace attnkit::tune {

int64_t bucket_extent(int64_t extent);

// log2 of the inverse density bucket: 0 for density in (1/2, 1], 1 for (1/4, 1/2], ..., capped at 10.
int32_t density_bucket(double density);
// The bucket's representative density, 2^-bucket (the bucket's upper end).
double density_of_bucket(int32_t bucket);

}  // namespace attnkit::tune
