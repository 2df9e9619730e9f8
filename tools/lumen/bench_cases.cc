#include "tools/lumen/bench_cases.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace lumen::cli {

// Options as the published models run them: Mamba-2 (ssd), Qwen3-Next (gated_delta_net) and
// Kimi Linear (kda) take raw gates; the delta family normalises q and k and takes beta as a
// logit. No short convolution: the timings are of the state update.
const FamilySetup kBenchFamilies[7] = {
    {LUMEN_FAMILY_LINEAR_ATTN, false, false, false, false},
    {LUMEN_FAMILY_RETENTION, false, false, false, false},
    {LUMEN_FAMILY_SSD, true, false, true, false},
    {LUMEN_FAMILY_GLA, false, true, false, false},
    {LUMEN_FAMILY_DELTA_NET, false, false, false, true},
    {LUMEN_FAMILY_GATED_DELTA_NET, true, false, true, true},
    {LUMEN_FAMILY_KDA, false, true, true, true},
};

const char* FamilyName(const FamilySetup& family) { return lumen_family_string(family.family); }

bool Selected(const std::vector<std::string>& families, const FamilySetup& family) {
  return families.empty() ||
         std::find(families.begin(), families.end(), FamilyName(family)) != families.end();
}

const FamilySetup* FindFamily(const std::string& name) {
  for (const FamilySetup& family : kBenchFamilies) {
    if (name == FamilyName(family)) return &family;
  }
  return nullptr;
}

// Matrix products only: additive, Q S, K^T V, Q K^T and P V: 4 K V + 2 C (K + V); delta rule,
// with fla's WY form: K K^T, W = T K, U = T V, W S, Q S, Q K^T, P V', K^T V':
// 6 K V + 2 C (3 K + 2 V) and the triangular inverse, C^2 / 3.
double PrefillFlopsPerToken(const FamilySetup& family) {
  const double k = kBenchKeyDim, v = kBenchValueDim, c = kBenchChunk;
  const double per_head = family.delta ? 6 * k * v + 2 * c * (3 * k + 2 * v) + c * c / 3
                                       : 4 * k * v + 2 * c * (k + v);
  return per_head * kBenchHeads;
}

void CheckCall(const char* program, const LumenApi& api, lumen_status status, const char* call) {
  if (status == LUMEN_OK) return;
  const std::string message = api.lumen_last_error_message();
  FailAs(program, std::string(call) + " failed: " + api.lumen_status_string(status) + ": " +
                      message);
}

lumen_model* BuildBenchModel(const char* program, const LumenApi& api,
                             const FamilySetup& family) {
  lumen_model_builder* builder = nullptr;
  CheckCall(program, api, api.lumen_model_builder_create(&builder), "lumen_model_builder_create");
  lumen_layer_options options;
  api.lumen_layer_options_init(&options);
  options.family = family.family;
  options.num_heads = kBenchHeads;
  options.num_value_heads = kBenchHeads;
  options.key_dim = kBenchKeyDim;
  options.value_dim = kBenchValueDim;
  options.gate_raw = family.gate_raw;
  options.qk_l2norm = family.delta;
  options.beta_sigmoid = family.delta;
  int32_t layer = 0;
  CheckCall(program, api, api.lumen_model_builder_add_layer(builder, &options, &layer),
            "lumen_model_builder_add_layer");
  if (family.gate_raw) {
    // As fla and the models initialise them: A ~ U(1, 16); dt ~ logU(1e-3, 1e-1) through
    // dt_bias = softplus^-1(dt).
    const int64_t bias_count =
        family.vector_gate ? int64_t{kBenchHeads} * kBenchKeyDim : kBenchHeads;
    std::vector<float> a_log(kBenchHeads), dt_bias(bias_count);
    for (int32_t h = 0; h < kBenchHeads; ++h) {
      a_log[h] = std::log(1.0f + 15.0f * (h + 0.5f) / kBenchHeads);
    }
    for (int64_t i = 0; i < bias_count; ++i) {
      const float dt = std::exp(std::log(1e-3f) + std::log(100.0f) * (i % 97) / 96.0f);
      dt_bias[i] = dt + std::log(-std::expm1(-dt));
    }
    CheckCall(program, api,
              api.lumen_model_builder_set_param(builder, layer, LUMEN_PARAM_A_LOG, a_log.data(),
                                                kBenchHeads),
              "lumen_model_builder_set_param(A_log)");
    CheckCall(program, api,
              api.lumen_model_builder_set_param(builder, layer, LUMEN_PARAM_DT_BIAS,
                                                dt_bias.data(), bias_count),
              "lumen_model_builder_set_param(dt_bias)");
  }
  lumen_model* model = nullptr;
  const lumen_status status = api.lumen_model_builder_build(builder, &model);
  api.lumen_model_builder_destroy(builder);
  CheckCall(program, api, status, "lumen_model_builder_build");
  return model;
}

BenchBuffer::BenchBuffer(int64_t count, int32_t dtype) : dtype_(dtype), count_(count) {
  const int64_t bytes = (count * ElementBytes() + 128 + 63) / 64 * 64;
  data_.reset(std::aligned_alloc(64, static_cast<size_t>(bytes)));
  if (data_ == nullptr) FailAs("lumen bench", "out of memory for the benchmark's buffers");
}

void BenchBuffer::Fill(float lo, float hi, uint64_t seed) {
  const int64_t total = count_ + 128 / ElementBytes();
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < total; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const float value = lo + (hi - lo) * static_cast<float>(x >> 40) * 0x1p-24f;
    if (dtype_ == LUMEN_DTYPE_FLOAT32) {
      static_cast<float*>(data_.get())[i] = value;
    } else {
      uint32_t bits;
      std::memcpy(&bits, &value, 4);
      static_cast<uint16_t*>(data_.get())[i] = static_cast<uint16_t>(bits >> 16);
    }
  }
}

BenchInputs::BenchInputs(int64_t tokens, int32_t input_dtype)
    : dtype(input_dtype),
      q(tokens * kBenchHeads * kBenchKeyDim, dtype),
      k(tokens * kBenchHeads * kBenchKeyDim, dtype),
      v(tokens * kBenchHeads * kBenchValueDim, dtype),
      g_scalar(tokens * kBenchHeads, dtype),
      g_vector(tokens * kBenchHeads * kBenchKeyDim, dtype),
      beta(tokens * kBenchHeads, dtype),
      o(tokens * kBenchHeads * kBenchValueDim, dtype) {
  q.Fill(-1.0f, 1.0f, 1);
  k.Fill(-1.0f, 1.0f, 2);
  v.Fill(-1.0f, 1.0f, 3);
  g_scalar.Fill(-0.08f, -0.005f, 4);
  g_vector.Fill(-0.08f, -0.005f, 5);
  beta.Fill(0.0f, 1.0f, 6);
}

void BenchInputs::Describe(const LumenApi& api, const FamilySetup& family, int64_t first,
                           int64_t tokens, int64_t misalign, lumen_layer_inputs* in,
                           lumen_layer_output* out) const {
  const int64_t qk = int64_t{kBenchHeads} * kBenchKeyDim;
  const int64_t vo = int64_t{kBenchHeads} * kBenchValueDim;
  api.lumen_layer_inputs_init(in);
  in->dtype = dtype;
  in->q = q.View(misalign, first * qk);
  in->q_count = tokens * qk;
  in->k = k.View(misalign, first * qk);
  in->k_count = tokens * qk;
  in->v = v.View(misalign, first * vo);
  in->v_count = tokens * vo;
  if (family.scalar_gate) {
    in->g = g_scalar.View(misalign, first * kBenchHeads);
    in->g_count = tokens * kBenchHeads;
  } else if (family.vector_gate) {
    in->g = g_vector.View(misalign, first * qk);
    in->g_count = tokens * qk;
  }
  if (family.delta) {
    in->beta = beta.View(misalign, first * kBenchHeads);
    in->beta_count = tokens * kBenchHeads;
  }
  api.lumen_layer_output_init(out);
  out->dtype = dtype;
  out->o = o.View(misalign, first * vo);
  out->o_count = tokens * vo;
}

}  // namespace lumen::cli
