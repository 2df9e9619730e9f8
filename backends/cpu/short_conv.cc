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
// Below this many multiply-adds a call runs on the calling thread: waking the pool's threads
// costs a microsecond or two. A step of a Qwen3-Next layer's q or k (2048 channels, W = 4)
// is above it.
constexpr int64_t kParallelWork = int64_t{1} << 13;

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

// ConvolveChannelsOf at the CPU's SIMD level: a prefill of a real model's layer spent as long
// here as in its chunks when this ran at the baseline's SSE2 width.
LUMEN_CPU_KERNEL
void ConvolveChannels(const LayerSpec& spec, const float* weights_by_tap, const float* bias,
                      int64_t C, int64_t c0, int64_t c1, const float* x, int64_t n, float* y,
                      float* window, float* past) {
  if (spec.conv_size == 4) {
    ConvolveChannelsOf<4>(spec, weights_by_tap, bias, C, c0, c1, x, n, y, window, past);
  } else {
    ConvolveChannelsOf<0>(spec, weights_by_tap, bias, C, c0, c1, x, n, y, window, past);
  }
}

}  // namespace

ConvTaps MakeConvTaps(const LayerSpec& spec) {
  ConvTaps taps;
  const int64_t W = spec.conv_size;
  for (int32_t part = 0; part < kNumConvParts && W > 0; ++part) {
    const int64_t C = spec.conv_channels(part);
    const std::vector<float>& weights = spec.conv_weight[part];  // [C, W]
    taps.weights[part].resize(W * C);
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t j = 0; j < W; ++j) taps.weights[part][j * C + c] = weights[c * W + j];
    }
  }
  return taps;
}

void ConvolvePart(const LayerSpec& spec, const ConvTaps& taps, const LayerRun& run,
                  int32_t part, const float* x, float* y, std::vector<float>* next_windows,
                  ConvScratch* scratch, ThreadPool& pool) {
  const int64_t W = spec.conv_size;
  const int64_t C = spec.conv_channels(part);
  const float* bias = spec.conv_bias[part].empty() ? nullptr : spec.conv_bias[part].data();
  const int64_t window = C * (W - 1);
  const int32_t sessions = run.num_sessions();
  next_windows->resize(sessions * window);
  const int64_t past_floats = (W - 1) * kChannelBlock;
  scratch->past.resize(pool.num_threads() * past_floats);
  // Each session's slot starts as its current window, in fp32, and is updated in place.
  for (int32_t s = 0; s < sessions; ++s) {
    LoadAsFloat(WindowOf(spec, run.states[s], part), spec.state_dtype,
                next_windows->data() + s * window, window);
  }

  const int64_t blocks = (C + kChannelBlock - 1) / kChannelBlock;
  auto task = [&](int64_t index, int32_t slot) {
    const int32_t s = static_cast<int32_t>(index / blocks);
    const int64_t c0 = index % blocks * kChannelBlock;
    const int64_t t0 = run.cu_seqlens[s];
    ConvolveChannels(spec, taps.weights[part].data(), bias, C, c0,
                     std::min(C, c0 + kChannelBlock), x + t0 * C, run.cu_seqlens[s + 1] - t0,
                     y + t0 * C, next_windows->data() + s * window,
                     scratch->past.data() + slot * past_floats);
  };
  const int64_t tasks = sessions * blocks;
  if (run.num_tokens() * C * W < kParallelWork) {
    for (int64_t index = 0; index < tasks; ++index) task(index, 0);
  } else {
    // One contiguous run of blocks per thread: a step's tasks are a few hundred
    // nanoseconds each, less than handing them out one by one between cores costs.
    pool.ParallelForBlocks(tasks, task);
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
