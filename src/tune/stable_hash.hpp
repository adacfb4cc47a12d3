// A hash that is the same in every process, build and platform (unlike std::hash), for cache file
// names and the kernel-set fingerprint: 64-bit FNV-1a over bytes, printed as 16 hex digits.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace attnkit::tune {

constexpr uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

constexpr uint64_t stable_hash(std::string_view bytes, uint64_t seed = kFnvOffsetBasis) {
  uint64_t h = seed;
  for (const char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= kFnvPrime;
  }
  return h;
}

inline std::string hash_hex(uint64_t h) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) text[static_cast<size_t>(i)] = kDigits[h & 0xf];
  return text;
}

}  // namespace attnkit::tune
