// run_tuner_verification in builds without CUDA: there is nothing to verify.
#include "tune/tuner_verification.hpp"

#if !defined(ATTNKIT_WITH_CUDA)
namespace attnkit::tune {

int run_tuner_verification(const VerificationOptions&, std::ostream& out) {
  out << "tuner verification: this build has no CUDA backend (configure with -DATTNKIT_WITH_CUDA=ON)\n";
  return 2;
}

}  // namespace attnkit::tune
#endif
