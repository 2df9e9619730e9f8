#pragma once
// What every CUDA kernel of a layer shares: the layer's options as kernels read them, the raw
// inputs of a call, and the per-element math of docs/spec.md §2 (dtype conversion, qk_l2norm,
// feature maps, the raw gate, sigmoid(beta)). Same formulas, same order as the CPU backend's
// prepare_inputs.cc, all in fp32.

#include <cstdint>

#include "backends/cuda/gpu_compat.cuh"
#include "src/layer_traits.h"

namespace lumen::cuda {


// One layer, as the kernels read it. Parameter arrays live in device memory.
struct LayerConfig {
  int32_t num_heads = 0;        // H
  int32_t num_value_heads = 0;  // HV
  int32_t key_dim = 0;          // K
  int32_t value_dim = 0;        // V
  float scale = 1.0f;           // folded into q
  FeatureMap feature_map = FeatureMap::kIdentity;
  GateKind gate = GateKind::kNone;
  bool qk_l2norm = false;
  bool beta_sigmoid = false;
  float beta_logit_scale = 1.0f;           // beta = scale * sigmoid(logit): 2 with allow_neg_eigval
  bool allow_neg_eigval = false;           // beta inputs in [0, 2] (the input check)
  bool gate_raw = false;
  float gate_lower_bound = 0.0f;           // < 0: fla's lower-bounded raw gate; 0: off
  bool delta_rule = false;
  bool normalize = false;
  float normalize_eps = 1e-6f;
  const float* a_log = nullptr;            // [HV] with gate_raw
  const float* dt_bias = nullptr;          // [HV] or [HV * K] with gate_raw
  int32_t dt_bias_per_head = 0;            // 1 or K
  const float* fixed_log_decay = nullptr;  // [HV] log(gamma_h): retention; else null
};

// The raw inputs of a call in device memory, all of one dtype.
struct RawInputs {
  const void* q = nullptr;     // [T, H, K]
  const void* k = nullptr;     // [T, H, K]
  const void* v = nullptr;     // [T, HV, V]
  const void* g = nullptr;     // [T, HV] or [T, HV, K], or null
  const void* beta = nullptr;  // [T, HV], or null
  DType dtype = DType::kFloat32;
  // The backend's number for the layer call, kept in the input check's record when the
  // call's check fails (so that the backend knows which calls changed nothing).
  unsigned long long call = 0;
};

__device__ __forceinline__ float LoadElement(const void* data, int64_t index, DType dtype) {
  switch (dtype) {
    case DType::kBFloat16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[index]);
    case DType::kFloat16:
      return __half2float(static_cast<const __half*>(data)[index]);
    default:
      return static_cast<const float*>(data)[index];
  }
}

__device__ __forceinline__ void StoreElement(void* data, int64_t index, DType dtype,
                                             float value) {
  switch (dtype) {
    case DType::kBFloat16:
      static_cast<__nv_bfloat16*>(data)[index] = __float2bfloat16_rn(value);
      break;
    case DType::kFloat16:
      static_cast<__half*>(data)[index] = __float2half_rn(value);
      break;
    default:
      static_cast<float*>(data)[index] = value;
  }
}

__device__ __forceinline__ float FeatureMapValue(FeatureMap map, float x) {
  switch (map) {
    case FeatureMap::kElu1: return x > 0.0f ? x + 1.0f : expf(x);
    case FeatureMap::kRelu: return x > 0.0f ? x : 0.0f;
    default: return x;
  }
}

// 1 / sqrt(sum of squares + 1e-6) with qk_l2norm, else 1.
__device__ __forceinline__ float L2NormFactor(const LayerConfig& layer, float sum_of_squares) {
  return layer.qk_l2norm ? 1.0f / sqrtf(sum_of_squares + 1e-6f) : 1.0f;
}

// One prepared element of q (scale = the layer's) or k (scale = 1): l2norm, phi, scale.
__device__ __forceinline__ float PreparedQueryKey(const LayerConfig& layer, float raw,
                                                  float norm_factor, float scale) {
  if (layer.feature_map == FeatureMap::kIdentity) return raw * (scale * norm_factor);
  return FeatureMapValue(layer.feature_map, raw * norm_factor) * scale;
}

__device__ __forceinline__ float Softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// The log-decay of value head hv, key channel `channel` (0 for a scalar gate), from the raw
// g value of the token.
__device__ __forceinline__ float LogDecay(const LayerConfig& layer, float raw, int32_t hv,
                                          int32_t channel) {
  if (!layer.gate_raw) return raw;
  const float bias = layer.dt_bias[static_cast<int64_t>(hv) * layer.dt_bias_per_head +
                                   (layer.dt_bias_per_head == 1 ? 0 : channel)];
  if (layer.gate_lower_bound != 0.0f) {
    // fla's lower_bound: bound * sigmoid(exp(A_log) (g + dt_bias)), in (bound, 0).
    return layer.gate_lower_bound / (1.0f + expf(-expf(layer.a_log[hv]) * (raw + bias)));
  }
  return -expf(layer.a_log[hv]) * Softplus(raw + bias);
}

// sigmoid(logit) with beta_sigmoid, 2 * sigmoid(logit) with allow_neg_eigval too (fla's).
__device__ __forceinline__ float PreparedBeta(const LayerConfig& layer, float raw) {
  return layer.beta_sigmoid ? layer.beta_logit_scale / (1.0f + expf(-raw)) : raw;
}

}  // namespace lumen::cuda
