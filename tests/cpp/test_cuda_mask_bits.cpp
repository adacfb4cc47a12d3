// The key-major mask packer (cuda/common/mask_bits_by_key.hpp) that the fused and the scattered backward share:
// on odd query and key counts, rows not 16-byte aligned, broadcast heads, strided views and mask bytes other than
// 0 / 1, the words equal a plain CPU packing, every word is written and nothing past the last one.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_support.hpp"

#if defined(ATTNKIT_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "cuda/common/mask_bits_by_key.hpp"
#endif

namespace attnkit {
namespace {

#if !defined(ATTNKIT_WITH_CUDA)

TEST(CudaMaskBitsByKey, SkipsWithoutCuda) {
  GTEST_SKIP() << "no CUDA backend in this build (configure with -DATTNKIT_WITH_CUDA=ON)";
}

#else

using cuda::MaskBytes;

constexpr uint32_t kPoison = 0xABABABABu;
constexpr int64_t kGuardWords = 64;  // poisoned words after the output that must stay poisoned

// A mask's shape and byte strides, and how far its first byte lies from a 256-byte aligned allocation.
struct MaskCase {
  int32_t batches = 1;
  int32_t heads = 1;
  int32_t rows = 0;
  int32_t columns = 0;
  int64_t stride[4] = {0, 0, 0, 1};
  int64_t offset = 0;
};

MaskCase contiguous(int32_t rows, int32_t columns, int32_t batches = 1, int64_t offset = 0) {
  MaskCase c;
  c.batches = batches;
  c.rows = rows;
  c.columns = columns;
  c.stride[2] = columns;
  c.stride[0] = int64_t{rows} * columns;
  c.offset = offset;
  return c;
}

std::string describe(const MaskCase& c) {
  return std::to_string(c.batches) + "x" + std::to_string(c.heads) + "x" + std::to_string(c.rows) + "x" +
         std::to_string(c.columns) + " strides " + std::to_string(c.stride[0]) + "," + std::to_string(c.stride[1]) +
         "," + std::to_string(c.stride[2]) + "," + std::to_string(c.stride[3]) + " offset " + std::to_string(c.offset);
}

// words[slice][key][ceil(rows / 32)], bit q % 32 of word q / 32 set when byte (slice, q, key) is nonzero.
std::vector<uint32_t> cpu_bits_by_key(const MaskCase& c, const uint8_t* mask) {
  const int64_t words = (c.rows + 31) / 32;
  std::vector<uint32_t> out(static_cast<size_t>(int64_t{c.batches} * c.heads * c.columns * words), 0u);
  for (int64_t b = 0; b < c.batches; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t slice = b * c.heads + h;
      for (int64_t q = 0; q < c.rows; ++q) {
        for (int64_t k = 0; k < c.columns; ++k) {
          if (mask[b * c.stride[0] + h * c.stride[1] + q * c.stride[2] + k * c.stride[3]] != 0) {
            out[static_cast<size_t>((slice * c.columns + k) * words + q / 32)] |= 1u << (q % 32);
          }
        }
      }
    }
  }
  return out;
}

// Packs a mask of random bytes (half zero, the rest anything from 1 to 255) on the GPU into poisoned words and
// compares with cpu_bits_by_key.
void expect_packing_matches_cpu(const MaskCase& c, uint32_t seed) {
  SCOPED_TRACE(describe(c));
  const int64_t last = (c.batches - 1) * c.stride[0] + (c.heads - 1) * c.stride[1] + (c.rows - 1) * c.stride[2] +
                       (c.columns - 1) * c.stride[3];
  std::vector<uint8_t> bytes(static_cast<size_t>(c.offset + last + 1));
  std::mt19937 random(seed);
  for (auto& byte : bytes) {
    const uint32_t r = random();
    byte = r % 2 == 0 ? uint8_t{0} : static_cast<uint8_t>(1 + (r >> 1) % 255);
  }
  const std::vector<uint32_t> expected = cpu_bits_by_key(c, bytes.data() + c.offset);
  const size_t out_bytes = (expected.size() + kGuardWords) * sizeof(uint32_t);
  test::DeviceBuffer mask(bytes.size());
  test::DeviceBuffer words(out_bytes);
  ASSERT_NE(mask.data(), nullptr);
  ASSERT_NE(words.data(), nullptr);
  test::expect_cuda(cudaMemcpy(mask.data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "upload mask");
  test::expect_cuda(cudaMemset(words.data(), 0xAB, out_bytes), "poison words");

  MaskBytes m;
  m.data = static_cast<const uint8_t*>(mask.data()) + c.offset;
  for (int d = 0; d < 4; ++d) m.stride[d] = c.stride[d];
  m.batches = c.batches;
  m.heads = c.heads;
  m.rows = c.rows;
  m.columns = c.columns;
  test::expect_cuda(cuda::launch_mask_bits_by_key(m, static_cast<uint32_t*>(words.data()), nullptr), "launch");
  test::expect_cuda(cudaDeviceSynchronize(), "packer");

  std::vector<uint32_t> got(expected.size() + kGuardWords);
  test::expect_cuda(cudaMemcpy(got.data(), words.data(), out_bytes, cudaMemcpyDeviceToHost), "download words");
  int64_t wrong = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (got[i] != expected[i] && wrong++ < 5) {
      ADD_FAILURE() << "word " << i << ": got 0x" << std::hex << got[i] << ", expected 0x" << expected[i];
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << expected.size() << " words";
  for (int64_t i = 0; i < kGuardWords; ++i) {
    ASSERT_EQ(got[expected.size() + static_cast<size_t>(i)], kPoison) << "written past the last word";
  }
}

class CudaMaskBitsByKey : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device: the mask packer runs on the GPU";
  }
};

TEST_F(CudaMaskBitsByKey, OddQueryAndKeyCountsMatchTheCpuPacking) {
  uint32_t seed = 100;
  for (int32_t rows : {1, 31, 33, 1000}) {
    for (int32_t columns : {1, 15, 17, 4099}) expect_packing_matches_cpu(contiguous(rows, columns), ++seed);
  }
}

TEST_F(CudaMaskBitsByKey, RowsThatAreNotSixteenByteAlignedMatchTheCpuPacking) {
  uint32_t seed = 200;
  // One byte past an aligned base: no row is aligned at 4096 keys a row, every 16th at 4099.
  for (int32_t rows : {1, 33, 1000}) {
    for (int32_t columns : {17, 4096, 4099}) expect_packing_matches_cpu(contiguous(rows, columns, 1, 1), ++seed);
  }
}

TEST_F(CudaMaskBitsByKey, AHeadStrideOfZeroGivesEveryHeadTheSameWords) {
  MaskCase c = contiguous(33, 17, 2);
  c.heads = 3;
  c.stride[1] = 0;
  expect_packing_matches_cpu(c, 300);
  c = contiguous(1000, 4099, 2, 1);
  c.heads = 2;
  c.stride[1] = 0;
  expect_packing_matches_cpu(c, 301);
}

TEST_F(CudaMaskBitsByKey, PaddedRowsAndKeysThatAreNotContiguousMatchTheCpuPacking) {
  MaskCase c;
  c.batches = 2;
  c.heads = 3;
  c.rows = 45;
  c.columns = 50;
  c.stride[3] = 2;                  // every other byte
  c.stride[2] = 2 * c.columns + 7;  // padded, odd row pitch
  c.stride[1] = c.rows * c.stride[2] + 3;
  c.stride[0] = c.heads * c.stride[1] + 5;
  expect_packing_matches_cpu(c, 400);
  c = contiguous(96, 4096, 2);
  c.stride[2] = 4096 + 32;  // padded rows that stay 16-byte aligned
  c.stride[0] = c.rows * c.stride[2];
  expect_packing_matches_cpu(c, 401);
}

// Enough slices, keys and queries (a multiple of 128) for tiles of 4 query words stored as 16-byte vectors.
TEST_F(CudaMaskBitsByKey, ManySlicesOfManyKeysMatchTheCpuPackingAndStayZeroPastTheQueries) {
  expect_packing_matches_cpu(contiguous(1024, 4096, 4), 500);
  expect_packing_matches_cpu(contiguous(1000, 4099, 4), 501);
  expect_packing_matches_cpu(contiguous(1000, 4099, 4, 1), 502);
}

TEST_F(CudaMaskBitsByKey, MasksWithoutQueriesOrKeysWriteNothing) {
  test::DeviceBuffer words(kGuardWords * sizeof(uint32_t));
  ASSERT_NE(words.data(), nullptr);
  test::expect_cuda(cudaMemset(words.data(), 0xAB, kGuardWords * sizeof(uint32_t)), "poison words");
  for (const auto& [rows, columns] : {std::pair{0, 17}, std::pair{33, 0}}) {
    MaskBytes m;
    m.data = static_cast<const uint8_t*>(words.data());  // never read
    m.rows = rows;
    m.columns = columns;
    test::expect_cuda(cuda::launch_mask_bits_by_key(m, static_cast<uint32_t*>(words.data()), nullptr), "launch");
  }
  std::vector<uint32_t> got(kGuardWords);
  test::expect_cuda(cudaMemcpy(got.data(), words.data(), kGuardWords * sizeof(uint32_t), cudaMemcpyDeviceToHost),
                    "download words");
  for (uint32_t word : got) ASSERT_EQ(word, kPoison);
}

#endif

}  // namespace
}  // namespace attnkit
