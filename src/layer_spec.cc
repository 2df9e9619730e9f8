#include "src/layer_spec.h"

#include <cmath>
#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "src/struct_size.h"
#include "src/struct_versions.h"

namespace lumen {

GateKind LayerSpec::gate_kind() const { return FamilyGateKind(family); }

bool LayerSpec::delta_rule() const { return FamilyDeltaRule(family); }

bool LayerSpec::needs_g_input() const {
  return gate_kind() != GateKind::kNone && family != Family::kRetention;
}

int64_t LayerSpec::g_per_token() const {
  if (!needs_g_input()) return 0;
  return gate_kind() == GateKind::kPerChannel ? int64_t{num_value_heads} * key_dim
                                          : num_value_heads;
}

int64_t LayerSpec::matrix_count() const {
  return int64_t{num_value_heads} * key_dim * value_dim;
}

int64_t LayerSpec::normalizer_count() const {
  return normalize ? int64_t{num_value_heads} * key_dim : 0;
}

int64_t LayerSpec::conv_channels(int32_t part) const {
  return part == kConvV ? int64_t{num_value_heads} * value_dim
                        : int64_t{num_heads} * key_dim;
}

int64_t LayerSpec::conv_count(int32_t part) const {
  return conv_size == 0 ? 0 : conv_channels(part) * (conv_size - 1);
}

int64_t LayerSpec::conv_offset(int32_t part) const {
  int64_t offset = matrix_count() + normalizer_count();
  for (int32_t before = 0; before < part; ++before) offset += conv_count(before);
  return offset;
}

int64_t LayerSpec::state_count() const { return conv_offset(kNumConvParts); }

int64_t LayerSpec::state_bytes() const { return state_count() * DTypeSize(state_dtype); }

namespace {

bool IsFamily(int32_t value) {
  return value >= LUMEN_FAMILY_LINEAR_ATTN && value <= LUMEN_FAMILY_KDA;
}

absl::Status Invalid(const LayerSpec& spec, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(FamilyName(spec.family), " layer: ", what));
}

// Largest dims a layer may have; keeps every count well inside int64 and int32 strides.
constexpr int32_t kMaxHeads = 1 << 16;
constexpr int32_t kMaxHeadDim = 1 << 14;

}  // namespace

absl::Status LayerSpecFromOptions(const lumen_layer_options& user_options, LayerSpec* out) {
  if (absl::Status status =
          CheckStructSize(user_options, "lumen_layer_options");
      !status.ok()) {
    return status;
  }
  const lumen_layer_options options = CurrentLayout(user_options);
  if (!IsFamily(options.family)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown layer family ", options.family,
                     " (expected a lumen_family value from 1 to 7)"));
  }
  LayerSpec spec;
  spec.family = static_cast<Family>(options.family);
  spec.num_heads = options.num_heads;
  spec.num_value_heads = options.num_value_heads == 0 ? options.num_heads
                                                      : options.num_value_heads;
  spec.key_dim = options.key_dim;
  spec.value_dim = options.value_dim;

  if (spec.num_heads <= 0 || spec.num_heads > kMaxHeads) {
    return Invalid(spec, absl::StrCat("num_heads (H) is ", spec.num_heads,
                                      ", must be in [1, ", kMaxHeads, "]"));
  }
  if (spec.num_value_heads <= 0 || spec.num_value_heads > kMaxHeads) {
    return Invalid(spec, absl::StrCat("num_value_heads (HV) is ", spec.num_value_heads,
                                      ", must be 0 (= H) or in [1, ", kMaxHeads, "]"));
  }
  if (spec.num_value_heads % spec.num_heads != 0) {
    return Invalid(spec, absl::StrCat("num_value_heads (HV = ", spec.num_value_heads,
                                      ") must be a multiple of num_heads (H = ",
                                      spec.num_heads, ")"));
  }
  if (spec.key_dim <= 0 || spec.key_dim > kMaxHeadDim) {
    return Invalid(spec, absl::StrCat("key_dim (K) is ", spec.key_dim, ", must be in [1, ",
                                      kMaxHeadDim, "]"));
  }
  if (spec.value_dim <= 0 || spec.value_dim > kMaxHeadDim) {
    return Invalid(spec, absl::StrCat("value_dim (V) is ", spec.value_dim,
                                      ", must be in [1, ", kMaxHeadDim, "]"));
  }
  if (!std::isfinite(options.scale) || options.scale < 0.0f) {
    return Invalid(spec, "scale must be finite and >= 0 (0 selects K^-0.5)");
  }
  spec.scale = options.scale == 0.0f ? 1.0f / std::sqrt(static_cast<float>(spec.key_dim))
                                     : options.scale;

  const bool linear = spec.family == Family::kLinearAttn;
  if (options.feature_map < LUMEN_FEATURE_MAP_IDENTITY ||
      options.feature_map > LUMEN_FEATURE_MAP_RELU) {
    return Invalid(spec, absl::StrCat("unknown feature_map ", options.feature_map));
  }
  if (!linear && options.feature_map != LUMEN_FEATURE_MAP_IDENTITY) {
    return Invalid(spec, "feature_map applies to linear_attn layers only");
  }
  spec.feature_map = static_cast<FeatureMap>(options.feature_map);

  if (options.normalize != 0 && options.normalize != 1) {
    return Invalid(spec, "normalize must be 0 or 1");
  }
  if (!linear && options.normalize) {
    return Invalid(spec, "normalize applies to linear_attn layers only");
  }
  spec.normalize = options.normalize == 1;
  if (!std::isfinite(options.normalize_eps) || options.normalize_eps < 0.0f) {
    return Invalid(spec, "normalize_eps must be finite and >= 0 (0 selects 1e-6)");
  }
  spec.normalize_eps = options.normalize_eps == 0.0f ? 1e-6f : options.normalize_eps;

  for (auto [value, name] : {std::pair{options.qk_l2norm, "qk_l2norm"},
                             std::pair{options.beta_sigmoid, "beta_sigmoid"},
                             std::pair{options.allow_neg_eigval, "allow_neg_eigval"},
                             std::pair{options.gate_raw, "gate_raw"}}) {
    if (value != 0 && value != 1) return Invalid(spec, absl::StrCat(name, " must be 0 or 1"));
  }
  spec.qk_l2norm = options.qk_l2norm == 1;
  spec.beta_sigmoid = options.beta_sigmoid == 1;
  spec.allow_neg_eigval = options.allow_neg_eigval == 1;
  spec.gate_raw = options.gate_raw == 1;
  if (spec.beta_sigmoid && !spec.delta_rule()) {
    return Invalid(spec, "beta_sigmoid applies to the delta family only (no beta input)");
  }
  if (spec.allow_neg_eigval && !spec.delta_rule()) {
    return Invalid(spec, "allow_neg_eigval applies to the delta family only (no beta input)");
  }
  if (spec.gate_raw && spec.family != Family::kGatedDeltaNet && spec.family != Family::kKda &&
      spec.family != Family::kSsd) {
    return Invalid(spec, "gate_raw applies to gated_delta_net, kda and ssd layers only");
  }
  if (!std::isfinite(options.gate_lower_bound) || options.gate_lower_bound > 0.0f) {
    return Invalid(spec, "gate_lower_bound must be finite and <= 0 (0: the unbounded raw gate)");
  }
  // -0 is off too, so that it hashes as 0 in the snapshot fingerprint.
  spec.gate_lower_bound = options.gate_lower_bound < 0.0f ? options.gate_lower_bound : 0.0f;
  if (spec.gate_lower_bound != 0.0f &&
      (!spec.gate_raw ||
       (spec.family != Family::kGatedDeltaNet && spec.family != Family::kKda))) {
    return Invalid(spec, "gate_lower_bound applies to gated_delta_net and kda layers with "
                         "gate_raw only (it bounds the raw gate)");
  }

  if (options.state_dtype != LUMEN_DTYPE_FLOAT32 && options.state_dtype != LUMEN_DTYPE_BFLOAT16) {
    return Invalid(spec, absl::StrCat("state_dtype ", options.state_dtype,
                                      " is not supported (FLOAT32 or BFLOAT16)"));
  }
  spec.state_dtype = static_cast<DType>(options.state_dtype);

  if (options.conv_size < 0 || options.conv_size > kMaxConvSize) {
    return Invalid(spec, absl::StrCat("conv_size is ", options.conv_size, ", must be in [0, ",
                                      kMaxConvSize, "] (0: no convolution)"));
  }
  spec.conv_size = options.conv_size;
  if (options.conv_activation != LUMEN_CONV_ACTIVATION_SILU &&
      options.conv_activation != LUMEN_CONV_ACTIVATION_NONE) {
    return Invalid(spec, absl::StrCat("unknown conv_activation ", options.conv_activation,
                                      " (SILU or NONE)"));
  }
  spec.conv_activation = static_cast<ConvActivation>(options.conv_activation);

  if (spec.family == Family::kRetention) {
    spec.decay.resize(spec.num_value_heads);
    for (int32_t h = 0; h < spec.num_value_heads; ++h) {
      spec.decay[h] = static_cast<float>(1.0 - std::exp2(-5.0 - h));
    }
  }
  *out = std::move(spec);
  return absl::OkStatus();
}

namespace {

const char* const kConvPartNames[kNumConvParts] = {"q", "k", "v"};

// Where a parameter goes in the spec, its size and name; target nullptr with `why` set when
// the layer takes no such parameter.
struct ParamSlot {
  std::vector<float>* target = nullptr;
  int64_t count = 0;
  std::string name;
  const char* why = "";
};

absl::StatusOr<ParamSlot> FindParam(LayerSpec& spec, int32_t param) {
  ParamSlot slot;
  slot.count = spec.num_value_heads;
  switch (param) {
    case LUMEN_PARAM_A_LOG:
    case LUMEN_PARAM_DT_BIAS:
      slot.name = param == LUMEN_PARAM_A_LOG ? "A_log" : "dt_bias";
      if (spec.gate_raw) slot.target = param == LUMEN_PARAM_A_LOG ? &spec.a_log : &spec.dt_bias;
      if (param == LUMEN_PARAM_DT_BIAS && spec.family == Family::kKda) {
        slot.count *= spec.key_dim;
      }
      slot.why = "gated_delta_net, kda or ssd with gate_raw only";
      return slot;
    case LUMEN_PARAM_DECAY:
      slot.name = "decay";
      if (spec.family == Family::kRetention) slot.target = &spec.decay;
      slot.why = "retention layers only";
      return slot;
    case LUMEN_PARAM_CONV_Q_WEIGHT:
    case LUMEN_PARAM_CONV_K_WEIGHT:
    case LUMEN_PARAM_CONV_V_WEIGHT: {
      const int32_t part = param - LUMEN_PARAM_CONV_Q_WEIGHT;
      slot.name = absl::StrCat("conv_", kConvPartNames[part], "_weight");
      if (spec.conv_size > 0) slot.target = &spec.conv_weight[part];
      slot.count = spec.conv_channels(part) * spec.conv_size;
      slot.why = "layers with conv_size > 0 only";
      return slot;
    }
    case LUMEN_PARAM_CONV_Q_BIAS:
    case LUMEN_PARAM_CONV_K_BIAS:
    case LUMEN_PARAM_CONV_V_BIAS: {
      const int32_t part = param - LUMEN_PARAM_CONV_Q_BIAS;
      slot.name = absl::StrCat("conv_", kConvPartNames[part], "_bias");
      if (spec.conv_size > 0) slot.target = &spec.conv_bias[part];
      slot.count = spec.conv_channels(part);
      slot.why = "layers with conv_size > 0 only";
      return slot;
    }
    case LUMEN_PARAM_D:
      slot.name = "D";
      if (spec.family == Family::kSsd && spec.gate_raw) slot.target = &spec.d_skip;
      slot.why = "ssd layers with gate_raw only: Mamba-2's skip";
      return slot;
    default:
      return Invalid(spec, absl::StrCat("unknown parameter ", param));
  }
}

}  // namespace

absl::Status SetLayerParam(LayerSpec& spec, int32_t param, const float* values,
                           int64_t count) {
  absl::StatusOr<ParamSlot> slot = FindParam(spec, param);
  if (!slot.ok()) return slot.status();
  const std::string& name = slot->name;
  if (slot->target == nullptr) {
    return Invalid(spec, absl::StrCat("takes no ", name, " parameter (", slot->why, ")"));
  }
  if (values == nullptr) return Invalid(spec, absl::StrCat(name, " values are NULL"));
  if (count != slot->count) {
    return Invalid(spec, absl::StrCat(name, " needs ", slot->count, " values, got ", count));
  }
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(values[i])) {
      return Invalid(spec, absl::StrCat(name, "[", i, "] is not finite"));
    }
    if (param == LUMEN_PARAM_DECAY && !(values[i] > 0.0f && values[i] < 1.0f)) {
      return Invalid(spec, absl::StrCat("decay[", i, "] is ", values[i], ", must be in (0, 1)"));
    }
  }
  slot->target->assign(values, values + count);
  return absl::OkStatus();
}

absl::Status CheckLayerComplete(const LayerSpec& spec) {
  if (spec.gate_raw && spec.a_log.empty()) {
    return Invalid(spec, "gate_raw is on but A_log was not set (lumen_model_builder_set_param)");
  }
  if (spec.gate_raw && spec.dt_bias.empty()) {
    return Invalid(spec, "gate_raw is on but dt_bias was not set (lumen_model_builder_set_param)");
  }
  for (int32_t part = 0; part < kNumConvParts && spec.conv_size > 0; ++part) {
    if (spec.conv_weight[part].empty()) {
      return Invalid(spec, absl::StrCat("conv_size is ", spec.conv_size, " but conv_",
                                        kConvPartNames[part],
                                        "_weight was not set (lumen_model_builder_set_param)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace lumen
