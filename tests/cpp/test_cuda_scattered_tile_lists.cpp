// The scattered kernels' pre-pass (launch_build_tile_lists, cuda/sparse/scattered_tile_lists.cu): on odd row and
// column counts, partial last tiles, empty and full rows, several (batch, head) slices and both tile widths, every
// list equals a plain CPU union of its 16 rows (entries with their row sets, padded to a multiple of 16) in the
// documented order: columns sorted by (column % 8, column) dealt round robin over the list's n-blocks of 8 entries
// (n-block h: entries 16 (h / 2) + 4 j + 2 (h % 2) + {0, 1}, j = 0..3), padding naming its n-block's row-0 column
// with an empty row set. Within an n-block two columns share a residue mod 8 (a shared-memory bank conflict of the
// walk) only where the residue holds more columns than the list has n-blocks. Every length is written, and nothing
// is written past a padded list or past the last list.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "cuda/sparse/scattered_launch.hpp"
#endif

namespace attnkit {
namespace {

#if !defined(ATTNKIT_WITH_CUDA)

TEST(CudaScatteredTileLists, SkipsWithoutCuda) {
  GTEST_SKIP() << "no CUDA backend in this build (configure with -DATTNKIT_WITH_CUDA=ON)";
}

#else

using cuda::MaskBytes;
using cuda::sparse::PackedMask;
using cuda::sparse::TileLists;

constexpr uint32_t kPoison = 0xABABABABu;
constexpr int64_t kGuardWords = 64;
constexpr uint32_t kUnset = 0xFFFFFFFFu;  // not an entry: row sets have 16 bits, columns fewer than 16

// A contiguous [slices, rows, columns] mask of 0 / 1 bytes: each byte set with probability `density`; rows
// listed in `empty_rows` all zero.
struct ListCase {
  int32_t slices = 1;
  int32_t rows = 0;
  int32_t columns = 0;
  int tile = 256;
  double density = 0.1;
  std::vector<int32_t> empty_rows;
};

std::string describe(const ListCase& c) {
  return std::to_string(c.slices) + "x" + std::to_string(c.rows) + "x" + std::to_string(c.columns) + " tile " +
         std::to_string(c.tile) + " density " + std::to_string(c.density);
}

// List index of row `row` (0..7) of n-block `block`: n-block block % 2 of the 16-entry step block / 2, whose
// rows are that step's entries 4 j + 2 (block % 2) + {0, 1}.
size_t block_entry(size_t block, size_t row) { return (block / 2) * 16 + (row / 2) * 4 + row % 2 + 2 * (block % 2); }

// The lists of one slice / group / tile as the pre-pass defines them.
std::vector<uint32_t> cpu_list(const ListCase& c, const std::vector<uint8_t>& mask, int64_t slice, int32_t group,
                               int32_t tile) {
  std::vector<uint32_t> list;
  for (int32_t column = tile * c.tile; column < std::min(c.columns, (tile + 1) * c.tile); ++column) {
    uint32_t row_set = 0;
    for (int32_t r = 0; r < 16 && group * 16 + r < c.rows; ++r) {
      const int64_t row = group * 16 + r;
      if (mask[static_cast<size_t>((slice * c.rows + row) * c.columns + column)] != 0) row_set |= 1u << r;
    }
    if (row_set != 0) list.push_back((row_set << 16) | static_cast<uint32_t>(column - tile * c.tile));
  }
  std::stable_sort(list.begin(), list.end(), [](uint32_t a, uint32_t b) { return (a & 7u) < (b & 7u); });
  const size_t total = list.size();
  const size_t padded = (total + 15) / 16 * 16;
  const size_t groups = padded / 8;
  std::vector<uint32_t> dealt(padded, kUnset);
  for (size_t rank = 0; rank < total; ++rank) dealt[block_entry(rank % groups, rank / groups)] = list[rank];
  for (size_t g = 0; g < groups; ++g) {
    for (size_t row = 0; row < 8; ++row) {
      uint32_t& entry = dealt[block_entry(g, row)];
      if (entry == kUnset) entry = row == 0 ? 0u : dealt[block_entry(g, 0)] & 0xffffu;
    }
  }
  return dealt;
}

// The purpose of the order, checked on its own: per n-block, the real columns (nonempty row sets) of any
// residue mod 8 number at most ceil(columns of that residue in the list / n-blocks).
int64_t crowded_groups(const std::vector<uint32_t>& list) {
  const size_t groups = list.size() / 8;
  int64_t per_residue[8] = {};
  for (uint32_t entry : list) per_residue[entry & 7u] += (entry >> 16) != 0 ? 1 : 0;
  int64_t crowded = 0;
  for (size_t g = 0; g < groups; ++g) {
    int64_t in_group[8] = {};
    for (size_t row = 0; row < 8; ++row) {
      const uint32_t entry = list[block_entry(g, row)];
      in_group[entry & 7u] += (entry >> 16) != 0 ? 1 : 0;
    }
    for (int r = 0; r < 8; ++r) {
      const int64_t allowed = (per_residue[r] + static_cast<int64_t>(groups) - 1) / static_cast<int64_t>(groups);
      if (in_group[r] > allowed) ++crowded;
    }
  }
  return crowded;
}

void expect_lists_match_cpu(const ListCase& c, uint32_t seed) {
  SCOPED_TRACE(describe(c));
  std::vector<uint8_t> bytes(static_cast<size_t>(int64_t{c.slices} * c.rows * c.columns));
  std::mt19937 random(seed);
  std::bernoulli_distribution attends(c.density);
  for (auto& byte : bytes) byte = attends(random) ? uint8_t{1} : uint8_t{0};
  for (int32_t s = 0; s < c.slices; ++s) {
    for (int32_t row : c.empty_rows) {
      for (int32_t k = 0; k < c.columns; ++k)
        bytes[static_cast<size_t>((int64_t{s} * c.rows + row) * c.columns + k)] = 0;
    }
  }
  MaskBytes m;
  m.batches = c.slices;
  m.heads = 1;
  m.rows = c.rows;
  m.columns = c.columns;
  m.stride[3] = 1;
  m.stride[2] = c.columns;
  m.stride[0] = int64_t{c.rows} * c.columns;
  const int64_t words_count = int64_t{c.slices} * c.rows * cuda::sparse::words_for(c.columns);
  const int64_t groups = (c.rows + 15) / 16;
  const int64_t tiles = (c.columns + c.tile - 1) / c.tile;
  const int64_t lists = c.slices * groups * tiles;

  test::DeviceBuffer mask(bytes.size());
  test::DeviceBuffer words(static_cast<size_t>(words_count) * 4);
  test::DeviceBuffer entries(static_cast<size_t>(lists * c.tile + kGuardWords) * 4);
  test::DeviceBuffer lengths(static_cast<size_t>(lists + kGuardWords) * 4);
  ASSERT_TRUE(mask.data() && words.data() && entries.data() && lengths.data());
  test::expect_cuda(cudaMemcpy(mask.data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "upload mask");
  test::expect_cuda(cudaMemset(entries.data(), 0xAB, static_cast<size_t>(lists * c.tile + kGuardWords) * 4), "poison");
  test::expect_cuda(cudaMemset(lengths.data(), 0xAB, static_cast<size_t>(lists + kGuardWords) * 4), "poison");
  m.data = static_cast<const uint8_t*>(mask.data());
  cuda::sparse::launch_pack_mask(m, static_cast<uint32_t*>(words.data()), nullptr);
  PackedMask packed;
  packed.words = static_cast<const uint32_t*>(words.data());
  packed.rows = c.rows;
  packed.words_per_row = cuda::sparse::words_for(c.columns);
  packed.mask_batches = c.slices;
  const TileLists layout =
      cuda::sparse::tile_lists_layout(packed, c.columns, c.tile, static_cast<const uint32_t*>(entries.data()),
                                      static_cast<const uint32_t*>(lengths.data()));
  ASSERT_EQ(layout.groups, groups);
  ASSERT_EQ(layout.tiles, tiles);
  cuda::sparse::launch_build_tile_lists(packed, layout, nullptr);
  test::expect_cuda(cudaDeviceSynchronize(), "pre-pass");

  std::vector<uint32_t> got_entries(static_cast<size_t>(lists * c.tile + kGuardWords));
  std::vector<uint32_t> got_lengths(static_cast<size_t>(lists + kGuardWords));
  test::expect_cuda(cudaMemcpy(got_entries.data(), entries.data(), got_entries.size() * 4, cudaMemcpyDeviceToHost),
                    "download entries");
  test::expect_cuda(cudaMemcpy(got_lengths.data(), lengths.data(), got_lengths.size() * 4, cudaMemcpyDeviceToHost),
                    "download lengths");
  int64_t wrong = 0;
  int64_t nonempty = 0;
  int64_t crowded = 0;
  for (int64_t s = 0; s < c.slices; ++s) {
    for (int32_t g = 0; g < groups; ++g) {
      for (int32_t t = 0; t < tiles; ++t) {
        const int64_t index = layout.index(static_cast<int32_t>(s), 0, g, t);
        const std::vector<uint32_t> expected = cpu_list(c, bytes, s, g, t);
        nonempty += expected.empty() ? 0 : 1;
        if (got_lengths[static_cast<size_t>(index)] != expected.size()) {
          if (wrong++ < 5) {
            ADD_FAILURE() << "list (" << s << ", " << g << ", " << t << "): length " << got_lengths[index]
                          << ", expected " << expected.size();
          }
          continue;
        }
        const auto first = got_entries.begin() + index * c.tile;
        crowded += crowded_groups(std::vector<uint32_t>(first, first + static_cast<int64_t>(expected.size())));
        for (int64_t i = 0; i < c.tile; ++i) {
          const uint32_t value = got_entries[static_cast<size_t>(index * c.tile + i)];
          const uint32_t want = i < static_cast<int64_t>(expected.size()) ? expected[static_cast<size_t>(i)] : kPoison;
          if (value != want && wrong++ < 5) {
            ADD_FAILURE() << "list (" << s << ", " << g << ", " << t << ") entry " << i << ": 0x" << std::hex << value
                          << ", expected 0x" << want << (want == kPoison ? " (untouched past the list)" : "");
          }
        }
      }
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << lists << " lists";
  EXPECT_EQ(crowded, 0) << "groups of 8 entries holding more columns of one residue than the order allows";
  for (int64_t i = 0; i < kGuardWords; ++i) {
    ASSERT_EQ(got_entries[static_cast<size_t>(lists * c.tile + i)], kPoison) << "entries written past the last list";
    ASSERT_EQ(got_lengths[static_cast<size_t>(lists + i)], kPoison) << "lengths written past the last list";
  }
  const bool any_attended = std::find(bytes.begin(), bytes.end(), uint8_t{1}) != bytes.end();
  EXPECT_EQ(nonempty > 0, any_attended) << nonempty << " nonempty lists";
}

class CudaScatteredTileLists : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device: the union-list pre-pass runs on the GPU";
  }
};

TEST_F(CudaScatteredTileLists, OddRowAndColumnCountsMatchTheCpuUnion) {
  uint32_t seed = 10;
  for (int tile : {128, 256}) {
    for (int32_t rows : {1, 15, 17, 37}) {
      for (int32_t columns : {1, 31, 33, 300, 513}) {
        ListCase c;
        c.rows = rows;
        c.columns = columns;
        c.tile = tile;
        c.density = 0.05;
        expect_lists_match_cpu(c, ++seed);
      }
    }
  }
}

TEST_F(CudaScatteredTileLists, EmptyRowsEmptyGroupsAndFullTiles) {
  ListCase c;
  c.rows = 70;
  c.columns = 600;
  c.density = 0.02;
  c.empty_rows = {0, 3, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 69};  // group 1 empty
  expect_lists_match_cpu(c, 20);
  c.tile = 128;
  expect_lists_match_cpu(c, 21);
  ListCase full;
  full.rows = 33;
  full.columns = 520;
  full.density = 1.0;  // every list holds its whole tile: the longest list fills its slot
  expect_lists_match_cpu(full, 22);
  full.density = 0.0;  // every list empty
  expect_lists_match_cpu(full, 23);
}

TEST_F(CudaScatteredTileLists, PerHeadSlicesHaveTheirOwnLists) {
  ListCase c;
  c.slices = 6;  // e.g. [2, 3, S, S]
  c.rows = 45;
  c.columns = 290;
  c.density = 0.1;
  expect_lists_match_cpu(c, 30);
  c.tile = 128;
  c.density = 0.6;
  expect_lists_match_cpu(c, 31);
}

TEST_F(CudaScatteredTileLists, ALargerMaskOfTwoSlices) {
  ListCase c;
  c.slices = 2;
  c.rows = 2050;
  c.columns = 4099;
  c.density = 0.01;
  expect_lists_match_cpu(c, 40);
}

#endif

}  // namespace
}  // namespace attnkit
