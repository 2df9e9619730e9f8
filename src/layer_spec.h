#pragma once
// The validated description of one layer: family, dims, options and parameters.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "lumen/lumen.h"
#include "src/dtype_convert.h"
#include "src/layer_traits.h"

namespace lumen {

enum class ConvActivation : int32_t {
  kSilu = LUMEN_CONV_ACTIVATION_SILU,
  kNone = LUMEN_CONV_ACTIVATION_NONE,
};

// The inputs a layer's short convolution runs over, in the order their windows follow the
// matrix and normalizer in a session's state.
enum ConvPart : int32_t { kConvQ = 0, kConvK = 1, kConvV = 2 };
inline constexpr int32_t kNumConvParts = 3;
// Widest convolution a layer may have (the models use 4).
inline constexpr int32_t kMaxConvSize = 64;

struct LayerSpec {
  Family family = Family::kLinearAttn;
  int32_t num_heads = 0;        // H
  int32_t num_value_heads = 0;  // HV
  int32_t key_dim = 0;          // K
  int32_t value_dim = 0;        // V
  float scale = 0.0f;           // resolved: never 0 once validated
  FeatureMap feature_map = FeatureMap::kIdentity;
  bool normalize = false;
  float normalize_eps = 1e-6f;
  bool qk_l2norm = false;
  bool beta_sigmoid = false;
  bool allow_neg_eigval = false;  // beta in [0, 2]: 2 * sigmoid(logit) with beta_sigmoid
  bool gate_raw = false;
  // < 0 with gate_raw: g = gate_lower_bound * sigmoid(exp(A_log) (g + dt_bias)); 0: off.
  float gate_lower_bound = 0.0f;
  DType state_dtype = DType::kFloat32;
  std::vector<float> a_log;     // [HV] with gate_raw
  std::vector<float> dt_bias;   // [HV] (gated_delta_net, ssd) or [HV * K] (kda) with gate_raw
  std::vector<float> decay;     // [HV] retention gammas; default: docs/spec.md §2
  int32_t conv_size = 0;        // W; 0: no convolution
  ConvActivation conv_activation = ConvActivation::kSilu;
  std::vector<float> conv_weight[kNumConvParts];  // [C, W] per part, needed with conv_size
  std::vector<float> conv_bias[kNumConvParts];    // [C] per part, or empty (no bias)
  std::vector<float> d_skip;    // [HV] Mamba-2's D (ssd with gate_raw), or empty

  GateKind gate_kind() const;
  bool delta_rule() const;       // delta_net, gated_delta_net, kda
  bool needs_g_input() const;    // ssd, gla, gated_delta_net, kda
  int64_t g_per_token() const;   // HV, HV * K or 0
  int64_t matrix_count() const;  // HV * K * V
  int64_t normalizer_count() const;  // HV * K with normalize, else 0
  int64_t conv_channels(int32_t part) const;  // C: H * K for q and k, HV * V for v
  int64_t conv_count(int32_t part) const;     // C * (W - 1), 0 without a convolution
  // Where a part's window starts in the layer's state, in elements: after the matrix, the
  // normalizer and the windows of the parts before it.
  int64_t conv_offset(int32_t part) const;
  int64_t state_count() const;   // every part's elements: matrix, normalizer, windows
  int64_t state_bytes() const;   // every part in the stored dtype
};

// Builds a LayerSpec from C options: validates them and resolves defaults
// (HV = H when 0, scale = K^-0.5 when 0, eps = 1e-6 when 0, retention decays).
// Checks options.struct_size first (lumen.h's rule); options must hold that many bytes.
absl::Status LayerSpecFromOptions(const lumen_layer_options& options, LayerSpec* out);

// Sets one parameter array after checking it applies to the layer and has the right size.
absl::Status SetLayerParam(LayerSpec& spec, int32_t param, const float* values,
                           int64_t count);

// Checks that every parameter the layer needs is present.
absl::Status CheckLayerComplete(const LayerSpec& spec);

}  // namespace lumen
