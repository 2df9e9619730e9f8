#pragma once
// The short causal convolution a layer may run over its raw q, k and v before everything else
// (docs/spec.md §6): depthwise, width W, optional bias, SiLU or no activation, with a window of
// the last W-1 inputs per channel that each session carries across calls.

#include <cstdint>
#include <vector>

#include "src/backend.h"
#include "src/dtype_convert.h"
#include "src/layer_spec.h"
#include "src/thread_pool.h"

namespace lumen::cpu {

// Channels per task of a convolution: enough work per task to pay for handing it out, and a
// multiple of every SIMD width. A task's window rows are copied into a block this wide.
inline constexpr int64_t kChannelBlock = 256;

// A layer's convolution weights tap-major, [W, C] per part (its [C, W] transposed), as
// ConvolvePart reads them: made once per model, not per call.
struct ConvTaps {
  std::vector<float> weights[kNumConvParts];
};

// The tap-major weights of `spec` (empty parts where it has no convolution). Allocates.
ConvTaps MakeConvTaps(const LayerSpec& spec);

// Scratch of one convolution call, reused across calls.
struct ConvScratch {
  std::vector<float> past;  // per thread: a block of channels' window, tap-major
};

// Convolves part `part` of every session of `run`, on `pool` when the call is large enough to
// gain from it. taps: MakeConvTaps(spec). x: [T, C] the call's raw fp32 inputs of that part,
// sessions back to back as run.cu_seqlens says; y: [T, C] the activated outputs.
// next_windows: [num_sessions, C, W-1] each session's window after its tokens (fp32, the
// session's layout), to be stored with StoreConvWindows once the call cannot fail. Reads the
// sessions' windows, writes no state; allocates before any parallel work (callers catch
// bad_alloc).
void ConvolvePart(const LayerSpec& spec, const ConvTaps& taps, const LayerRun& run,
                  int32_t part, const float* x, float* y, std::vector<float>* next_windows,
                  ConvScratch* scratch, ThreadPool& pool);

// Writes next_windows (as made by ConvolvePart) into every session's state, rounded to the
// layer's stored dtype. Never fails.
void StoreConvWindows(const LayerSpec& spec, const LayerRun& run, int32_t part,
                      const std::vector<float>& next_windows);

}  // namespace lumen::cpu
