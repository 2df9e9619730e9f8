#include "backends/cpu/short_conv.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace lumen::cpu {
namespace {

// The window of one part inside a session's layer state, in the stored dtype.
char* WindowOf(const LayerSpec& spec, void* layer_state, int32_t part) {
  return static_cast<char*>(layer_state) + spec.conv_offset(part) * DTypeSize(spec.state_dtype);
}

// One session: n tokens x [n, C] after the window held time-major in `history` [W-1, C].
// The inputs form one sequence e = history ++ x, and token i's output reads e[i .. i+W-1].
void ConvolveSession(const LayerSpec& spec, const float* weights_by_tap, const float* bias,
                     int64_t channels, const float* history, const float* x, int64_t n,
                     float* y, float* next_window) {
  const int64_t W = spec.conv_size;
  const int64_t C = channels;
  auto row = [&](int64_t e) { return e < W - 1 ? history + e * C : x + (e - (W - 1)) * C; };
  for (int64_t i = 0; i < n; ++i) {
    float* out = y + i * C;
    if (bias != nullptr) {
      std::copy(bias, bias + C, out);
    } else {
      std::fill(out, out + C, 0.0f);
    }
    for (int64_t j = 0; j < W; ++j) {
      const float* in = row(i + j);
      const float* w = weights_by_tap + j * C;
      for (int64_t c = 0; c < C; ++c) out[c] += w[c] * in[c];
    }
    if (spec.conv_activation == ConvActivation::kSilu) {
      for (int64_t c = 0; c < C; ++c) out[c] = out[c] / (1.0f + std::exp(-out[c]));
    }
  }
  // The new window: the last W-1 entries of e, back in the session's [C, W-1] layout.
  for (int64_t j = 0; j < W - 1; ++j) {
    const float* in = row(n + j);
    for (int64_t c = 0; c < C; ++c) next_window[c * (W - 1) + j] = in[c];
  }
}

}  // namespace

void ConvolvePart(const LayerSpec& spec, const LayerRun& run, int32_t part, const float* x,
                  float* y, std::vector<float>* next_windows, ConvScratch* scratch) {
  const int64_t W = spec.conv_size;
  const int64_t C = spec.conv_channels(part);
  const std::vector<float>& weights = spec.conv_weight[part];  // [C, W]
  scratch->weights_by_tap.resize(W * C);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t j = 0; j < W; ++j) scratch->weights_by_tap[j * C + c] = weights[c * W + j];
  }
  const float* bias = spec.conv_bias[part].empty() ? nullptr : spec.conv_bias[part].data();
  const int64_t window = C * (W - 1);
  next_windows->resize(run.num_sessions() * window);
  scratch->history.resize(window);
  std::vector<float>& stored = *next_windows;  // staging for the fp32 copy of a window
  for (int32_t s = 0; s < run.num_sessions(); ++s) {
    // The stored window [C, W-1], as fp32, lands in this session's slot of next_windows
    // first, then is transposed into history before the slot is overwritten.
    float* slot = stored.data() + s * window;
    LoadAsFloat(WindowOf(spec, run.states[s], part), spec.state_dtype, slot, window);
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t j = 0; j < W - 1; ++j) scratch->history[j * C + c] = slot[c * (W - 1) + j];
    }
    const int64_t t0 = run.cu_seqlens[s];
    const int64_t n = run.cu_seqlens[s + 1] - t0;
    ConvolveSession(spec, scratch->weights_by_tap.data(), bias, C, scratch->history.data(),
                    x + t0 * C, n, y + t0 * C, slot);
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
