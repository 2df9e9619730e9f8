#include "backends/cpu/short_conv.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/kernel_targets.h"
#include "backends/cpu/vector_math.h"

namespace lumen::cpu {
namespace {

// Channels per task: enough work per task to pay for handing it out, and a multiple of every
// SIMD width.
constexpr int64_t kChannelBlock = 256;
// Below this many multiply-adds a call runs on the calling thread (a step's convolution).
constexpr int64_t kParallelWork = int64_t{1} << 16;

// SiLU, x / (1 + e^-x), vectorised through VectorExp. The exponent is clamped to [-80, 80]:
// SiLU changes by less than 2e-33 there, and no lane ever reaches a subnormal (which costs a
// slow microcode assist per element on x86). The clamps are selects that GCC vectorises with
// -fno-trapping-math (see src/CMakeLists.txt).
inline float Silu(float x) {
  float minus_x = -x;
  minus_x = minus_x < -80.0f ? -80.0f : minus_x;
  minus_x = minus_x > 80.0f ? 80.0f : minus_x;
  return x / (1.0f + VectorExp(minus_x));
}

// The window of one part inside a session's layer state, in the stored dtype.
char* WindowOf(const LayerSpec& spec, void* layer_state, int32_t part) {
  return static_cast<char*>(layer_state) + spec.conv_offset(part) * DTypeSize(spec.state_dtype);
}

// Channels [c0, c1) of one session's n tokens x [n, C]. The inputs form one sequence
// e = window ++ x, where window [C, W-1] holds e[0 .. W-2], and token i's output reads
// e[i .. i+W-1]. Afterwards `window` holds these channels' new window, e[n .. n+W-2].
// At the CPU's SIMD level: a prefill of a real model's layer spends as long here as in
// its chunks, and the baseline build ran it at SSE2's width.
LUMEN_CPU_KERNEL
void ConvolveChannels(const LayerSpec& spec, const float* weights_by_tap, const float* bias,
                      int64_t C, int64_t c0, int64_t c1, const float* x, int64_t n, float* y,
                      float* window) {
  const int64_t W = spec.conv_size;
  for (int64_t i = 0; i < n; ++i) {
    float* out = y + i * C;
    for (int64_t c = c0; c < c1; ++c) out[c] = bias != nullptr ? bias[c] : 0.0f;
    for (int64_t j = 0; j < W; ++j) {
      const int64_t e = i + j;
      const float* w = weights_by_tap + j * C;
      if (e < W - 1) {  // still inside the window: only the first W-1 tokens of a call
        for (int64_t c = c0; c < c1; ++c) out[c] += w[c] * window[c * (W - 1) + e];
      } else {
        const float* in = x + (e - (W - 1)) * C;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) out[c] += w[c] * in[c];
      }
    }
    if (spec.conv_activation == ConvActivation::kSilu) {
      // -O2 vectorises only loops it needs no epilogue for; this one is asked to.
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) out[c] = Silu(out[c]);
    }
  }
  // In place, ascending j: entry j takes e[n + j], which lies at or after j, so it is read
  // before anything overwrites it.
  for (int64_t c = c0; c < c1; ++c) {
    float* past = window + c * (W - 1);
    for (int64_t j = 0; j < W - 1; ++j) {
      const int64_t e = n + j;
      past[j] = e < W - 1 ? past[e] : x[(e - (W - 1)) * C + c];
    }
  }
}

}  // namespace

void ConvolvePart(const LayerSpec& spec, const LayerRun& run, int32_t part, const float* x,
                  float* y, std::vector<float>* next_windows, ConvScratch* scratch,
                  ThreadPool& pool) {
  const int64_t W = spec.conv_size;
  const int64_t C = spec.conv_channels(part);
  const std::vector<float>& weights = spec.conv_weight[part];  // [C, W]
  scratch->weights_by_tap.resize(W * C);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t j = 0; j < W; ++j) scratch->weights_by_tap[j * C + c] = weights[c * W + j];
  }
  const float* bias = spec.conv_bias[part].empty() ? nullptr : spec.conv_bias[part].data();
  const int64_t window = C * (W - 1);
  const int32_t sessions = run.num_sessions();
  next_windows->resize(sessions * window);
  // Each session's slot starts as its current window, in fp32, and is updated in place.
  for (int32_t s = 0; s < sessions; ++s) {
    LoadAsFloat(WindowOf(spec, run.states[s], part), spec.state_dtype,
                next_windows->data() + s * window, window);
  }

  const int64_t blocks = (C + kChannelBlock - 1) / kChannelBlock;
  auto task = [&](int64_t index, int32_t) {
    const int32_t s = static_cast<int32_t>(index / blocks);
    const int64_t c0 = index % blocks * kChannelBlock;
    const int64_t t0 = run.cu_seqlens[s];
    ConvolveChannels(spec, scratch->weights_by_tap.data(), bias, C, c0,
                     std::min(C, c0 + kChannelBlock), x + t0 * C, run.cu_seqlens[s + 1] - t0,
                     y + t0 * C, next_windows->data() + s * window);
  };
  const int64_t tasks = sessions * blocks;
  if (run.num_tokens() * C * W < kParallelWork) {
    for (int64_t index = 0; index < tasks; ++index) task(index, 0);
  } else {
    pool.ParallelFor(tasks, task);
  }
}

void StoreConvWindows(const LayerSpec& spec, const LayerRun& run, int32_t part,
                      const std::vector<float>& next_windows) {
  const int64_t window = spec.conv_count(part);
  for (int32_t s = 0; s < run.num_sessions(); ++s) {
    StoreFromFloat(next_windows.data() + s * window, spec.state_dtype,
                   WindowOf(spec, run.states[s], part), window);
  }
}

}  // namespace lumen::cpu
