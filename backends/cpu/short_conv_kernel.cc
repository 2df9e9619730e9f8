// The short convolution's inner loops (short_conv.h), built once per SIMD level
// (kernel_targets.h).

#include <cstdint>

#include "backends/cpu/kernel_table.h"
#include "backends/cpu/short_conv.h"
#include "backends/cpu/vector_math.h"

namespace lumen::cpu {
namespace {

// SiLU, x / (1 + e^-x), vectorised through VectorExp. The exponent is clamped to [-80, 80]:
// SiLU changes by less than 2e-33 there, and no lane ever reaches a subnormal (which costs a
// slow microcode assist per element on x86). The clamps are selects that GCC vectorises with
// -fno-trapping-math (backends/cpu/sources.cmake).
inline float Silu(float x) {
  float minus_x = -x;
  minus_x = minus_x < -80.0f ? -80.0f : minus_x;
  minus_x = minus_x > 80.0f ? 80.0f : minus_x;
  return x / (1.0f + VectorExp(minus_x));
}

// Channels [c0, c1) of one session's n tokens x [n, C]. The inputs form one sequence
// e = window ++ x, where window [C, W-1] holds e[0 .. W-2], and token i's output reads
// e[i .. i+W-1]. Afterwards `window` holds these channels' new window, e[n .. n+W-2].
// The window's rows are first copied tap-major into `past` ([W-1, kChannelBlock]), so that
// every tap is one vectorised pass over a row, as a step (n = 1, all taps but one in the
// window) needs. kW: W where it is known at compile time (0: spec.conv_size), so that the
// window's copies vectorise too; the models' W = 4 is.
template <int64_t kW>
[[gnu::always_inline]] inline void ConvolveChannelsOf(const LayerSpec& spec,
                                                      const float* weights_by_tap,
                                                      const float* bias, int64_t C, int64_t c0,
                                                      int64_t c1, const float* x, int64_t n,
                                                      float* y, float* window, float* past) {
  const int64_t W = kW > 0 ? kW : spec.conv_size;
  for (int64_t c = c0; c < c1; ++c) {
    for (int64_t j = 0; j < W - 1; ++j) {
      past[j * kChannelBlock + c - c0] = window[c * (W - 1) + j];
    }
  }
  // Row e of the sequence, indexed by channel.
  const auto row = [&](int64_t e) -> const float* {
    return e < W - 1 ? past + e * kChannelBlock - c0 : x + (e - (W - 1)) * C;
  };
  for (int64_t i = 0; i < n; ++i) {
    float* out = y + i * C;
    for (int64_t c = c0; c < c1; ++c) out[c] = bias != nullptr ? bias[c] : 0.0f;
    for (int64_t j = 0; j < W; ++j) {
      const float* w = weights_by_tap + j * C;
      const float* in = row(i + j);
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) out[c] += w[c] * in[c];
    }
    if (spec.conv_activation == ConvActivation::kSilu) {
      // -O2 vectorises only loops it needs no epilogue for; this one is asked to.
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) out[c] = Silu(out[c]);
    }
  }
  for (int64_t c = c0; c < c1; ++c) {
    for (int64_t j = 0; j < W - 1; ++j) window[c * (W - 1) + j] = row(n + j)[c];
  }
}

}  // namespace

inline namespace LUMEN_KERNEL_NAMESPACE {

// ConvolveChannelsOf at this file's SIMD level: a prefill of a real model's layer spent as
// long here as in its chunks when this ran at the baseline's SSE2 width.
LUMEN_KERNEL_ENTRY
void ConvolveChannelsAtLevel(const LayerSpec& spec, const float* weights_by_tap, const float* bias,
                      int64_t C, int64_t c0, int64_t c1, const float* x, int64_t n, float* y,
                      float* window, float* past) {
  if (spec.conv_size == 4) {
    ConvolveChannelsOf<4>(spec, weights_by_tap, bias, C, c0, c1, x, n, y, window, past);
  } else {
    ConvolveChannelsOf<0>(spec, weights_by_tap, bias, C, c0, c1, x, n, y, window, past);
  }
}

}  // namespace LUMEN_KERNEL_NAMESPACE
}  // namespace lumen::cpu
