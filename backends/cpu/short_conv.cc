#include "backends/cpu/short_conv.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/kernel_table.h"

namespace lumen::cpu {
namespace {

// Below this many multiply-adds a call runs on the calling thread: waking the pool's threads
// costs a microsecond or two. A step of a Qwen3-Next layer's q or k (2048 channels, W = 4)
// is above it.
constexpr int64_t kParallelWork = int64_t{1} << 13;

// The window of one part inside a session's layer state, in the stored dtype.
char* WindowOf(const LayerSpec& spec, void* layer_state, int32_t part) {
  return static_cast<char*>(layer_state) + spec.conv_offset(part) * DTypeSize(spec.state_dtype);
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
    Kernels().convolve_channels(spec, taps.weights[part].data(), bias, C, c0,
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
