#pragma once
// Turns a call's raw inputs into what the head kernels read: fp32, with the layer's
// in-layer options applied in SPEC's order (short convolution, then qk_l2norm, feature map,
// scale, sigmoid(beta), raw gates, Mamba-2's dt scaling), after checking every raw value
// against its domain (src/input_domain.h).

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "backends/cpu/short_conv.h"
#include "lumen/lumen.h"
#include "src/backend.h"
#include "src/layer_spec.h"
#include "src/thread_pool.h"

namespace lumen::cpu {

struct PreparedInputs {
  const float* q = nullptr;     // [T, H, K]  phi(l2norm(conv(q))) * scale
  const float* k = nullptr;     // [T, H, K]  phi(l2norm(conv(k)))
  const float* v = nullptr;     // [T, HV, V] conv(v); Mamba-2: conv(x) * dt
  const float* g = nullptr;     // [T, HV] or [T, HV, K] log-decays; retention: [HV]
  int64_t g_token_stride = 0;   // 0 for retention's fixed per-head decay
  // g holds kda's raw per-channel gates, which each head turns into log-decays itself
  // (RawGateToLogDecay), so that the exp and softplus of T x HV x K values run in parallel.
  bool g_raw_per_channel = false;
  const float* beta = nullptr;  // [T, HV] in [0, 1], or nullptr
  const float* skip_x = nullptr;  // [T, HV, V] Mamba-2's x for the D skip, or nullptr

  // The conv windows each session will hold after the call, per part: [N, C, W-1] fp32.
  std::vector<float> next_windows[kNumConvParts];

  // Storage for whatever had to be converted; unconverted fp32 inputs are used in place.
  std::vector<float> q_storage, k_storage, v_storage, g_storage, beta_storage;
  std::vector<float> x_storage, dt_storage, conv_input;
  ConvScratch conv_scratch;
};

inline float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Raw gates' log-decays, SPEC's -exp(A_log) * softplus(g + dt_bias): out[i] = minus_a *
// softplus(raw[i] + dt_bias[i]) for i < count, minus_a = -exp(A_log). Vectorised at the
// kernels' SIMD level (vector_math.h); out may not overlap raw or dt_bias.
void RawGatesToLogDecays(float minus_a, const float* raw, const float* dt_bias, int64_t count,
                         float* out);

// Fails with INVALID_ARGUMENT, naming the tensor, token and head, when run.check_values is
// on and a raw input holds a value outside its domain: non-finite anywhere, a log-gate g > 0
// (unless gate_raw), beta outside [0, 1] (unless beta_sigmoid). Reads the sessions' conv
// windows but changes no state; allocates (callers catch bad_alloc). Large convolutions run
// on `pool`.
absl::Status PrepareInputs(const LayerSpec& spec, const LayerRun& run, ThreadPool& pool,
                           PreparedInputs* out);

// Stores the conv windows PrepareInputs computed into the sessions' states (nothing without a
// convolution). Call once the layer call can no longer fail.
void CommitConvWindows(const LayerSpec& spec, const LayerRun& run, const PreparedInputs& in);

}  // namespace lumen::cpu
