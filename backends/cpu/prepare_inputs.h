#pragma once
// Turns a call's raw inputs into what the head kernels read: fp32, with the layer's
// in-layer options applied (qk_l2norm, feature map, scale, sigmoid(beta), raw gates), after
// checking every raw value against its domain (src/input_domain.h).

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "lumen/lumen.h"
#include "src/layer_spec.h"

namespace lumen::cpu {

struct PreparedInputs {
  const float* q = nullptr;     // [T, H, K]  phi(l2norm(q)) * scale
  const float* k = nullptr;     // [T, H, K]  phi(l2norm(k))
  const float* v = nullptr;     // [T, HV, V]
  const float* g = nullptr;     // [T, HV] or [T, HV, K] log-decays; retention: [HV]
  int64_t g_token_stride = 0;   // 0 for retention's fixed per-head decay
  const float* beta = nullptr;  // [T, HV] in [0, 1], or nullptr

  // Storage for whatever had to be converted; unconverted fp32 inputs are used in place.
  std::vector<float> q_storage, k_storage, v_storage, g_storage, beta_storage;
};

// Fails with INVALID_ARGUMENT, naming the tensor, token and head, when check_values is on
// and an input holds a value outside its domain: non-finite anywhere, a log-gate g > 0
// (unless gate_raw), beta outside [0, 1] (unless beta_sigmoid). cu_seqlens are the call's
// token offsets per session; their last entry is the number of tokens.
absl::Status PrepareInputs(const LayerSpec& spec, const lumen_layer_inputs& inputs,
                           absl::Span<const int32_t> cu_seqlens, bool check_values,
                           PreparedInputs* out);

}  // namespace lumen::cpu
