#include "backends/cpu/prepare_inputs.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/kernel_targets.h"
#include "backends/cpu/small_matmul.h"
#include "backends/cpu/vector_math.h"
#include "src/dtype_convert.h"
#include "src/input_domain.h"
#include "src/input_domain_error.h"

namespace lumen::cpu {
namespace {

// What every input of one call shares: its token offsets and whether values are checked.
struct Call {
  absl::Span<const int32_t> cu_seqlens;
  bool check_values;
  int64_t tokens() const { return cu_seqlens.back(); }
};

// Checks the raw fp32 values of one input laid out [tokens, heads, per_head].
absl::Status CheckValues(const Call& call, const char* tensor, const float* values,
                         int64_t heads, int64_t per_head, const InputDomain& domain) {
  if (!call.check_values) return absl::OkStatus();
  const int64_t count = call.tokens() * heads * per_head;
  const int64_t bad = FirstOutOfDomain(values, count, domain);
  if (bad == count) return absl::OkStatus();
  return InputOutOfDomain(tensor, domain, values[bad], bad, heads, per_head, call.cu_seqlens);
}

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

// Each row of `dim` floats times scale, and divided by its L2 norm (l2norm): the identity
// feature map's q and k. Runs on the calling thread for every token and head of a call, so
// it gets the kernels' SIMD levels.
LUMEN_CPU_KERNEL
void ScaleRows(float* rows, int64_t count, int64_t dim, float scale, bool l2norm) {
  for (float* row = rows; row < rows + count; row += dim) {
    float factor = scale;
    if (l2norm) factor /= std::sqrt(Dot(row, row, static_cast<int32_t>(dim)) + 1e-6f);
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) row[i] *= factor;
  }
}

float FeatureMapValue(FeatureMap map, float x) {
  switch (map) {
    case FeatureMap::kElu1: return x > 0.0f ? x + 1.0f : std::exp(x);
    case FeatureMap::kRelu: return x > 0.0f ? x : 0.0f;
    default: return x;
  }
}

// One part [tokens, heads, per_head], its raw values checked, then convolved, as fp32 in
// *values: the caller's buffer itself when it is fp32 and the layer has no convolution, else
// `storage`.
absl::Status LoadPart(const LayerSpec& spec, const LayerRun& run, const Call& call,
                      ThreadPool& pool, int32_t part, const char* tensor, const void* src,
                      int64_t heads, int64_t per_head, std::vector<float>* storage,
                      PreparedInputs* out, const float** values) {
  const int32_t dtype = run.inputs->dtype;
  const int64_t count = call.tokens() * heads * per_head;
  const bool conv = spec.conv_size > 0;
  const float* raw = AsFloats(src, count, dtype, conv ? &out->conv_input : storage);
  absl::Status status = CheckValues(call, tensor, raw, heads, per_head, kFiniteValues);
  if (!status.ok() || !conv) {
    *values = raw;
    return status;
  }
  storage->resize(count);
  ConvolvePart(spec, run, part, raw, storage->data(), &out->next_windows[part],
               &out->conv_scratch, pool);
  *values = storage->data();
  return absl::OkStatus();
}

// q or k: checked and convolved, then l2norm (optional), the feature map and the scale, per
// row of K.
absl::Status PrepareQueryOrKey(const LayerSpec& spec, const LayerRun& run, const Call& call,
                               ThreadPool& pool, int32_t part, const char* tensor,
                               const void* src, float scale, std::vector<float>* storage,
                               PreparedInputs* out, const float** result) {
  const int64_t count = call.tokens() * spec.num_heads * spec.key_dim;
  const float* values = nullptr;
  absl::Status status = LoadPart(spec, run, call, pool, part, tensor, src, spec.num_heads,
                                 spec.key_dim, storage, out, &values);
  *result = values;
  const bool transforms = spec.qk_l2norm || spec.feature_map != FeatureMap::kIdentity ||
                          scale != 1.0f;
  if (!status.ok() || !transforms) return status;
  if (values != storage->data()) storage->assign(values, values + count);
  const int64_t dim = spec.key_dim;
  if (spec.feature_map == FeatureMap::kIdentity) {
    ScaleRows(storage->data(), count, dim, scale, spec.qk_l2norm);
    *result = storage->data();
    return absl::OkStatus();
  }
  for (float* row = storage->data(); row < storage->data() + count; row += dim) {
    // The feature map sees the normalised value; the scale multiplies its result.
    const float norm =
        spec.qk_l2norm ? 1.0f / std::sqrt(Dot(row, row, static_cast<int32_t>(dim)) + 1e-6f)
                       : 1.0f;
    for (int64_t i = 0; i < dim; ++i) {
      row[i] = FeatureMapValue(spec.feature_map, row[i] * norm) * scale;
    }
  }
  *result = storage->data();
  return absl::OkStatus();
}

}  // namespace

LUMEN_CPU_KERNEL
void RawGatesToLogDecays(float minus_a, const float* raw, const float* dt_bias, int64_t count,
                         float* out) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) out[i] = minus_a * VectorSoftplus(raw[i] + dt_bias[i]);
}

absl::Status PrepareInputs(const LayerSpec& spec, const LayerRun& run, ThreadPool& pool,
                           PreparedInputs* out) {
  const lumen_layer_inputs& inputs = *run.inputs;
  const Call call{run.cu_seqlens, run.check_values};
  const int32_t dtype = inputs.dtype;
  const int64_t tokens = run.num_tokens();
  absl::Status status = PrepareQueryOrKey(spec, run, call, pool, kConvQ, "q", inputs.q,
                                          spec.scale, &out->q_storage, out, &out->q);
  if (!status.ok()) return status;
  status = PrepareQueryOrKey(spec, run, call, pool, kConvK, "k", inputs.k, 1.0f,
                             &out->k_storage, out, &out->k);
  if (!status.ok()) return status;

  const int64_t heads = spec.num_value_heads;
  // Mamba-2 (ssd with gate_raw) scales each head's write by its dt.
  const bool mamba2 = spec.family == Family::kSsd && spec.gate_raw;
  if (spec.family == Family::kRetention) {
    out->g_storage.resize(heads);
    for (int64_t h = 0; h < heads; ++h) out->g_storage[h] = std::log(spec.decay[h]);
    out->g = out->g_storage.data();
    out->g_token_stride = 0;
    out->g_raw_per_channel = false;
  } else if (spec.needs_g_input()) {
    const int64_t per_token = spec.g_per_token();
    const int64_t per_head = per_token / heads;  // 1 (scalar gate) or K (vector gate)
    out->g_token_stride = per_token;
    out->g = AsFloats(inputs.g, tokens * per_token, dtype, &out->g_storage);
    status = CheckValues(call, "g", out->g, heads, per_head, GateDomain(spec.gate_raw));
    if (!status.ok()) return status;
    // kda's per-channel raw gates are left to the heads (RunHead), in parallel.
    out->g_raw_per_channel = spec.gate_raw && per_head > 1;
    if (spec.gate_raw && !out->g_raw_per_channel) {
      if (out->g != out->g_storage.data()) {
        out->g_storage.assign(out->g, out->g + tokens * per_token);
      }
      if (mamba2) out->dt_storage.resize(tokens * heads);
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
    }
  } else {
    out->g = nullptr;
    out->g_token_stride = 0;
    out->g_raw_per_channel = false;
  }

  const int64_t value_dim = spec.value_dim;
  const int64_t v_count = tokens * heads * value_dim;
  const float* x = nullptr;
  status = LoadPart(spec, run, call, pool, kConvV, "v", inputs.v, heads, value_dim,
                    &out->x_storage, out, &x);
  if (!status.ok()) return status;
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
    out->beta = AsFloats(inputs.beta, count, dtype, &out->beta_storage);
    status = CheckValues(call, "beta", out->beta, heads, 1, BetaDomain(spec.beta_sigmoid));
    if (!status.ok()) return status;
    if (spec.beta_sigmoid) {
      if (out->beta != out->beta_storage.data()) {
        out->beta_storage.assign(out->beta, out->beta + count);
      }
      float* beta = out->beta_storage.data();
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) beta[i] = 1.0f / (1.0f + VectorExp(-beta[i]));
      out->beta = out->beta_storage.data();
    }
  } else {
    out->beta = nullptr;
  }
  return absl::OkStatus();
}

void CommitConvWindows(const LayerSpec& spec, const LayerRun& run, const PreparedInputs& in) {
  if (spec.conv_size == 0) return;
  for (int32_t part = 0; part < kNumConvParts; ++part) {
    StoreConvWindows(spec, run, part, in.next_windows[part]);
  }
}

}  // namespace lumen::cpu
