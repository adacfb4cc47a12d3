// Calls the installed (or FetchContent-built) libattnkit through its C++ API and its C ABI.
#include <attnkit/attnkit.h>
#include <attnkit/attnkit.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  if (attnkit_abi_version() != ATTNKIT_ABI_VERSION) {
    std::printf("consumer: attnkit_abi_version() = %d, header says %d\n", attnkit_abi_version(), ATTNKIT_ABI_VERSION);
    return 1;
  }
  // Q, K, V [B=1, S=8, H=2, D=16] on the CPU, fp32.
  const int64_t b = 1, s = 8, h = 2, d = 16;
  std::vector<float> q(b * s * h * d), k(q.size()), v(q.size()), out(q.size(), NAN);
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = std::sin(0.1f * static_cast<float>(i));
    k[i] = std::cos(0.07f * static_cast<float>(i));
    v[i] = static_cast<float>(i % 13) / 13.0f;
  }
  attnkit::AttentionForward p;
  p.q = attnkit::make_view(q.data(), attnkit::DType::f32, {b, s, h, d});
  p.k = attnkit::make_view(k.data(), attnkit::DType::f32, {b, s, h, d});
  p.v = attnkit::make_view(v.data(), attnkit::DType::f32, {b, s, h, d});
  p.out = attnkit::make_view(out.data(), attnkit::DType::f32, {b, s, h, d});
  p.mask = attnkit::causal_mask();
  try {
    attnkit::attention_forward(p);
  } catch (const std::exception& e) {
    std::printf("consumer: attention_forward failed: %s\n", e.what());
    return 1;
  }
  for (float x : out) {
    if (!std::isfinite(x)) {
      std::printf("consumer: non-finite output\n");
      return 1;
    }
  }
  // Causal row 0 attends key 0 only: its output is V's row 0.
  for (int64_t i = 0; i < h * d; ++i) {
    if (std::fabs(out[i] - v[i]) > 1e-5f) {
      std::printf("consumer: out[0][%lld] = %g, expected %g\n", static_cast<long long>(i), out[i], v[i]);
      return 1;
    }
  }
  std::printf("consumer: attnkit %s (ABI %d) attention_forward ok\n", attnkit::version_string(), attnkit_abi_version());
  return 0;
}
