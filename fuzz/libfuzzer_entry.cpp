// libFuzzer's entry points (built with clang and -fsanitize=fuzzer; fuzz/README.md).
#include <cstddef>
#include <cstdint>

#include "fuzz_ops.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  attnkit::fuzz::initialise();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  attnkit::fuzz::run_one_input(data, size);
  return 0;
}
