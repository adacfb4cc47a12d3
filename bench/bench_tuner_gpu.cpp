// Checks the auto-tuner's GPU targets (issue #5) and prints the figures docs/perf.md records:
//   bench_tuner_gpu [--device N] [--steps N] [--top-k K] [--quick]
// For each problem of tune/tuner_verification.hpp: the exhaustive best config, the tuned choice from
// a cold tuner, their ratio, the tuning wall time and whether the cost model's top-K held the best;
// then one line per target. Exit status 0: all targets met; 1: one missed; 2: cannot run here.
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "tune/tuner_verification.hpp"

int main(int argc, char** argv) {
  attnkit::tune::VerificationOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> int {
      if (i + 1 >= argc) {
        std::cerr << arg << ": needs a value\n";
        std::exit(2);
      }
      return std::atoi(argv[++i]);
    };
    if (arg == "--device") {
      options.device = value();
    } else if (arg == "--steps") {
      options.exhaustive_steps = value();
    } else if (arg == "--top-k") {
      options.top_k = value();
    } else if (arg == "--quick") {
      options.quick = true;
    } else {
      std::cerr << "usage: bench_tuner_gpu [--device N] [--steps N] [--top-k K] [--quick]\n";
      return 2;
    }
  }
  return attnkit::tune::run_tuner_verification(options, std::cout);
}
