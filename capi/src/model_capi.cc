// C entry points for model builders and models.

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "capi/src/capi_util.h"
#include "src/fla_layout.h"
#include "src/struct_size.h"
#include "src/struct_versions.h"

using lumen::capi::Fail;
using lumen::capi::FromStatus;
using lumen::capi::Guard;
using lumen::capi::Ok;

namespace {

lumen_status CheckLayerIndex(int32_t layer, int32_t num_layers) {
  return FromStatus(lumen::CheckLayerIndex(layer, num_layers));
}

}  // namespace

extern "C" {

void lumen_layer_options_init(lumen_layer_options* options) {
  if (options == nullptr) return;
  *options = lumen_layer_options{};
  options->struct_size = sizeof(lumen_layer_options);
  options->state_dtype = LUMEN_DTYPE_FLOAT32;
  options->feature_map = LUMEN_FEATURE_MAP_IDENTITY;
  options->conv_activation = LUMEN_CONV_ACTIVATION_SILU;
}

// The presets' numbers and their sources are in the header and the README.
void lumen_layer_options_init_qwen3_next_gated_delta_net(lumen_layer_options* options) {
  if (options == nullptr) return;
  lumen_layer_options_init(options);
  options->family = LUMEN_FAMILY_GATED_DELTA_NET;
  options->num_heads = 16;
  options->num_value_heads = 32;
  options->key_dim = 128;
  options->value_dim = 128;
  options->qk_l2norm = 1;
  options->beta_sigmoid = 1;
  options->gate_raw = 1;
  options->conv_size = 4;
}

void lumen_layer_options_init_kimi_linear_kda(lumen_layer_options* options) {
  if (options == nullptr) return;
  lumen_layer_options_init(options);
  options->family = LUMEN_FAMILY_KDA;
  options->num_heads = 32;
  options->num_value_heads = 32;
  options->key_dim = 128;
  options->value_dim = 128;
  options->qk_l2norm = 1;
  options->beta_sigmoid = 1;
  options->gate_raw = 1;
  options->conv_size = 4;
}

void lumen_layer_options_init_mamba2(lumen_layer_options* options) {
  if (options == nullptr) return;
  lumen_layer_options_init(options);
  options->family = LUMEN_FAMILY_SSD;
  options->num_heads = 1;          // ngroups
  options->num_value_heads = 80;   // d_model 2560 * expand 2 / headdim 64
  options->key_dim = 128;          // d_state
  options->value_dim = 64;         // headdim
  options->scale = 1.0f;
  options->gate_raw = 1;
  options->conv_size = 4;          // d_conv
}

lumen_status lumen_model_builder_create(lumen_model_builder** out) {
  LUMEN_REQUIRE_NOT_NULL(out);
  return Guard([&] {
    *out = new lumen_model_builder();
    return Ok();
  });
}

void lumen_model_builder_destroy(lumen_model_builder* builder) { delete builder; }

lumen_status lumen_model_builder_add_layer(lumen_model_builder* builder,
                                           const lumen_layer_options* options,
                                           int32_t* out_layer) {
  LUMEN_REQUIRE_NOT_NULL(builder);
  LUMEN_REQUIRE_NOT_NULL(options);
  return Guard([&] {
    lumen::LayerSpec spec;
    absl::Status status = lumen::LayerSpecFromOptions(*options, &spec);
    if (!status.ok()) return FromStatus(status);
    builder->layers.push_back(std::move(spec));
    if (out_layer != nullptr) *out_layer = static_cast<int32_t>(builder->layers.size() - 1);
    return Ok();
  });
}

lumen_status lumen_model_builder_set_param(lumen_model_builder* builder, int32_t layer,
                                           int32_t param, const float* values,
                                           int64_t count) {
  LUMEN_REQUIRE_NOT_NULL(builder);
  if (lumen_status s = CheckLayerIndex(layer, static_cast<int32_t>(builder->layers.size()));
      s != LUMEN_OK) {
    return s;
  }
  return Guard([&] {
    return FromStatus(lumen::SetLayerParam(builder->layers[layer], param, values, count));
  });
}

lumen_status lumen_model_builder_build(const lumen_model_builder* builder, lumen_model** out) {
  LUMEN_REQUIRE_NOT_NULL(builder);
  LUMEN_REQUIRE_NOT_NULL(out);
  return Guard([&] {
    absl::StatusOr<lumen::Model> model = lumen::Model::Create(builder->layers);
    if (!model.ok()) return FromStatus(model.status());
    *out = new lumen_model{std::make_shared<const lumen::Model>(*std::move(model))};
    return Ok();
  });
}

void lumen_model_destroy(lumen_model* model) { delete model; }

lumen_status lumen_model_num_layers(const lumen_model* model, int32_t* out) {
  LUMEN_REQUIRE_NOT_NULL(model);
  LUMEN_REQUIRE_NOT_NULL(out);
  *out = model->model->num_layers();
  return Ok();
}

lumen_status lumen_model_layer_options(const lumen_model* model, int32_t layer,
                                       lumen_layer_options* out) {
  LUMEN_REQUIRE_NOT_NULL(model);
  LUMEN_REQUIRE_NOT_NULL(out);
  if (lumen_status s = CheckLayerIndex(layer, model->model->num_layers()); s != LUMEN_OK) {
    return s;
  }
  const lumen::LayerSpec& spec = model->model->layer(layer);
  lumen_layer_options options;
  lumen_layer_options_init(&options);
  options.family = static_cast<int32_t>(spec.family);
  options.num_heads = spec.num_heads;
  options.num_value_heads = spec.num_value_heads;
  options.key_dim = spec.key_dim;
  options.value_dim = spec.value_dim;
  options.scale = spec.scale;
  options.feature_map = static_cast<int32_t>(spec.feature_map);
  options.normalize = spec.normalize;
  options.normalize_eps = spec.normalize_eps;
  options.qk_l2norm = spec.qk_l2norm;
  options.beta_sigmoid = spec.beta_sigmoid;
  options.allow_neg_eigval = spec.allow_neg_eigval;
  options.gate_raw = spec.gate_raw;
  options.gate_lower_bound = spec.gate_lower_bound;
  options.state_dtype = static_cast<int32_t>(spec.state_dtype);
  options.conv_size = spec.conv_size;
  options.conv_activation = static_cast<int32_t>(spec.conv_activation);
  // Write only the fields that lie wholly inside the bytes the caller owns: its struct_size,
  // or 0.1.0's struct when it set none (0.1.0 did not ask callers to).
  uint32_t size = out->struct_size;
  if (size < lumen::StructHistory<lumen_layer_options>::kFirstSize ||
      size > lumen::kMaxStructSize) {
    size = lumen::StructHistory<lumen_layer_options>::kFirstSize;
  }
  size = lumen::WholeFieldsSize<lumen_layer_options>(size);
  options.struct_size = size;
  std::memcpy(out, &options, size);
  return Ok();
}

lumen_status lumen_model_state_count(const lumen_model* model, int32_t layer,
                                     int32_t part, int64_t* out) {
  LUMEN_REQUIRE_NOT_NULL(model);
  LUMEN_REQUIRE_NOT_NULL(out);
  if (lumen_status s = CheckLayerIndex(layer, model->model->num_layers()); s != LUMEN_OK) {
    return s;
  }
  const lumen::LayerSpec& spec = model->model->layer(layer);
  switch (part) {
    case LUMEN_STATE_MATRIX:
      *out = spec.matrix_count();
      return Ok();
    case LUMEN_STATE_NORMALIZER:
      *out = spec.normalizer_count();
      return Ok();
    case LUMEN_STATE_CONV_Q:
    case LUMEN_STATE_CONV_K:
    case LUMEN_STATE_CONV_V:
      *out = spec.conv_count(part - LUMEN_STATE_CONV_Q);
      return Ok();
  }
  return Fail(LUMEN_ERROR_INVALID_ARGUMENT,
              absl::StrCat("unknown state part ", static_cast<int>(part)));
}

lumen_status lumen_model_state_count_as(const lumen_model* model, int32_t layer, int32_t part,
                                        int32_t layout, int64_t* out) {
  LUMEN_REQUIRE_NOT_NULL(model);
  LUMEN_REQUIRE_NOT_NULL(out);
  if (layout != LUMEN_LAYOUT_LUMEN && layout != LUMEN_LAYOUT_FLA) {
    return Fail(LUMEN_ERROR_INVALID_ARGUMENT,
                absl::StrCat("unknown state layout ", layout, " (LUMEN or FLA)"));
  }
  int64_t canonical = 0;
  if (lumen_status s = lumen_model_state_count(model, layer, part, &canonical); s != LUMEN_OK) {
    return s;
  }
  *out = layout == LUMEN_LAYOUT_LUMEN ? canonical
                                      : lumen::FlaPartCount(model->model->layer(layer), part);
  return Ok();
}

lumen_status lumen_model_state_bytes(const lumen_model* model, int32_t layer, int64_t* out) {
  LUMEN_REQUIRE_NOT_NULL(model);
  LUMEN_REQUIRE_NOT_NULL(out);
  if (layer == -1) {
    *out = model->model->state_bytes();
    return Ok();
  }
  if (lumen_status s = CheckLayerIndex(layer, model->model->num_layers()); s != LUMEN_OK) {
    return s;
  }
  *out = model->model->layer(layer).state_bytes();
  return Ok();
}

}  // extern "C"
