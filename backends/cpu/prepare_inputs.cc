#include "backends/cpu/prepare_inputs.h"

#include <algorithm>
#include <cmath>

#include "src/dtype_convert.h"

namespace lumen::cpu {
namespace {

// Reads count elements of `dtype` as fp32 into out.
void LoadFloats(const void* src, int64_t count, int32_t dtype, std::vector<float>* out) {
  out->resize(count);
  LoadAsFloat(src, static_cast<DType>(dtype), out->data(), count);
}

// fp32 view of an input: in place when it is already fp32, else converted into storage.
const float* AsFloats(const void* src, int64_t count, int32_t dtype,
                      std::vector<float>* storage) {
  if (dtype == LUMEN_DTYPE_FLOAT32) return static_cast<const float*>(src);
  LoadFloats(src, count, dtype, storage);
  return storage->data();
}

float FeatureMapValue(FeatureMap map, float x) {
  switch (map) {
    case FeatureMap::kElu1: return x > 0.0f ? x + 1.0f : std::exp(x);
    case FeatureMap::kRelu: return x > 0.0f ? x : 0.0f;
    default: return x;
  }
}

// One part's values after the convolution, fp32: the caller's buffer itself when it is fp32
// and the layer has no convolution, else `storage`.
const float* LoadPart(const LayerSpec& spec, const LayerRun& run, ThreadPool& pool, int32_t part,
                      const void* src, int64_t count, std::vector<float>* storage,
                      PreparedInputs* out) {
  const int32_t dtype = run.inputs->dtype;
  if (spec.conv_size == 0) return AsFloats(src, count, dtype, storage);
  const float* raw = AsFloats(src, count, dtype, &out->conv_input);
  storage->resize(count);
  ConvolvePart(spec, run, part, raw, storage->data(), &out->next_windows[part],
               &out->conv_scratch, pool);
  return storage->data();
}

// q or k: l2norm (optional), then the feature map, then the scale, per row of K.
const float* PrepareQueryOrKey(const LayerSpec& spec, const LayerRun& run, ThreadPool& pool,
                               int32_t part, const void* src, float scale,
                               std::vector<float>* storage, PreparedInputs* out) {
  const int64_t count = run.num_tokens() * spec.num_heads * spec.key_dim;
  const float* values = LoadPart(spec, run, pool, part, src, count, storage, out);
  const bool transforms = spec.qk_l2norm || spec.feature_map != FeatureMap::kIdentity ||
                          scale != 1.0f;
  if (!transforms) return values;
  if (values != storage->data()) storage->assign(values, values + count);
  const int64_t dim = spec.key_dim;
  for (float* row = storage->data(); row < storage->data() + count; row += dim) {
    float factor = scale;
    if (spec.qk_l2norm) {
      float sum = 0.0f;
      for (int64_t i = 0; i < dim; ++i) sum += row[i] * row[i];
      factor /= std::sqrt(sum + 1e-6f);
    }
    if (spec.feature_map == FeatureMap::kIdentity) {
      for (int64_t i = 0; i < dim; ++i) row[i] *= factor;
    } else {
      // The feature map sees the normalised value; the scale multiplies its result.
      const float norm = spec.qk_l2norm ? factor / scale : 1.0f;
      for (int64_t i = 0; i < dim; ++i) {
        row[i] = FeatureMapValue(spec.feature_map, row[i] * norm) * scale;
      }
    }
  }
  return storage->data();
}

float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace

void PrepareInputs(const LayerSpec& spec, const LayerRun& run, ThreadPool& pool,
                   PreparedInputs* out) {
  const lumen_layer_inputs& inputs = *run.inputs;
  const int32_t dtype = inputs.dtype;
  const int64_t tokens = run.num_tokens();
  out->q = PrepareQueryOrKey(spec, run, pool, kConvQ, inputs.q, spec.scale, &out->q_storage,
                             out);
  out->k = PrepareQueryOrKey(spec, run, pool, kConvK, inputs.k, 1.0f, &out->k_storage, out);

  const int64_t heads = spec.num_value_heads;
  // Mamba-2 (ssd with gate_raw) scales each head's write by its dt.
  const bool mamba2 = spec.family == Family::kSsd && spec.gate_raw;
  if (spec.family == Family::kRetention) {
    out->g_storage.resize(heads);
    for (int64_t h = 0; h < heads; ++h) out->g_storage[h] = std::log(spec.decay[h]);
    out->g = out->g_storage.data();
    out->g_token_stride = 0;
  } else if (spec.needs_g_input()) {
    const int64_t per_token = spec.g_per_token();
    out->g_token_stride = per_token;
    if (spec.gate_raw) {
      LoadFloats(inputs.g, tokens * per_token, dtype, &out->g_storage);
      if (mamba2) out->dt_storage.resize(tokens * heads);
      const int64_t per_head = per_token / heads;  // 1 (scalar gate) or K (vector gate)
      const int64_t bias_per_head = static_cast<int64_t>(spec.dt_bias.size()) / heads;
      for (int64_t t = 0; t < tokens; ++t) {
        float* g = out->g_storage.data() + t * per_token;
        for (int64_t h = 0; h < heads; ++h) {
          const float a = -std::exp(spec.a_log[h]);
          for (int64_t i = 0; i < per_head; ++i) {
            const float bias = spec.dt_bias[h * bias_per_head + (bias_per_head == 1 ? 0 : i)];
            const float dt = Softplus(g[h * per_head + i] + bias);
            g[h * per_head + i] = a * dt;
            if (mamba2) out->dt_storage[t * heads + h] = dt;
          }
        }
      }
      out->g = out->g_storage.data();
    } else {
      out->g = AsFloats(inputs.g, tokens * per_token, dtype, &out->g_storage);
    }
  } else {
    out->g = nullptr;
    out->g_token_stride = 0;
  }

  const int64_t value_dim = spec.value_dim;
  const int64_t v_count = tokens * heads * value_dim;
  const float* x = LoadPart(spec, run, pool, kConvV, inputs.v, v_count, &out->x_storage, out);
  out->skip_x = mamba2 && !spec.d_skip.empty() ? x : nullptr;
  if (mamba2) {
    out->v_storage.resize(v_count);
    for (int64_t row = 0; row < tokens * heads; ++row) {
      const float dt = out->dt_storage[row];
      for (int64_t j = 0; j < value_dim; ++j) {
        out->v_storage[row * value_dim + j] = x[row * value_dim + j] * dt;
      }
    }
    out->v = out->v_storage.data();
  } else {
    out->v = x;
  }

  if (spec.delta_rule()) {
    const int64_t count = tokens * heads;
    if (spec.beta_sigmoid) {
      LoadFloats(inputs.beta, count, dtype, &out->beta_storage);
      for (float& b : out->beta_storage) b = 1.0f / (1.0f + std::exp(-b));
      out->beta = out->beta_storage.data();
    } else {
      out->beta = AsFloats(inputs.beta, count, dtype, &out->beta_storage);
    }
  } else {
    out->beta = nullptr;
  }
}

void CommitConvWindows(const LayerSpec& spec, const LayerRun& run, const PreparedInputs& in) {
  if (spec.conv_size == 0) return;
  for (int32_t part = 0; part < kNumConvParts; ++part) {
    StoreConvWindows(spec, run, part, in.next_windows[part]);
  }
}

}  // namespace lumen::cpu
