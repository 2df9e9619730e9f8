// The per-head half of preparing a call's inputs (prepare_inputs.h) and the scans of its
// values, built once per SIMD level (kernel_targets.h).

#include <algorithm>
#include <cmath>

#include "backends/cpu/kernel_table.h"
#include "backends/cpu/prefetch.h"
#include "backends/cpu/prepare_inputs.h"
#include "backends/cpu/small_matmul.h"
#include "backends/cpu/vector_math.h"
#include "src/dtype_convert.h"
#include "src/input_domain.h"

namespace lumen::cpu {
namespace {

// Values of a 16-bit input converted a block at a time for the scan, which needs no copy of
// the whole input: a block stays in L1.
constexpr int64_t kScanBlockValues = 2048;

float FeatureMapValue(FeatureMap map, float x) {
  switch (map) {
    case FeatureMap::kElu1: return x > 0.0f ? x + 1.0f : std::exp(x);
    case FeatureMap::kRelu: return x > 0.0f ? x : 0.0f;
    default: return x;
  }
}

float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Raw gates' log-decays: out[i] = minus_a * softplus(raw[i] + dt_bias[i]).
inline void RawGatesToLogDecays(float minus_a, const float* raw, const float* dt_bias,
                                int64_t count, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) out[i] = minus_a * VectorSoftplus(raw[i] + dt_bias[i]);
}

// fla's lower-bounded gate (lower_bound): out[i] = bound * sigmoid(a * (raw[i] + dt_bias[i]))
// with a = exp(A_log), in (bound, 0).
inline void BoundedGatesToLogDecays(float bound, float a, const float* raw, const float* dt_bias,
                                    int64_t count, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) {
    out[i] = bound / (1.0f + VectorExp(-a * (raw[i] + dt_bias[i])));
  }
}

// Rows a head's walk over its tokens asks for ahead (prefetch.h).
constexpr int64_t kPrefetchRows = 4;

// Points *rows_out and *stride_out at a head's `rows` rows of `width` values, `stride` apart
// from `offset`: in place in an fp32 input, or converted from a 16-bit one (`half`) into dst,
// contiguous.
inline void RowsOf(const float* fp32, const HalfInput& half, int64_t offset, int64_t stride,
                   int64_t rows, int64_t width, float* dst, const float** rows_out,
                   int64_t* stride_out) {
  if (half.data == nullptr) {
    *rows_out = fp32 + offset;
    *stride_out = stride;
    return;
  }
  const uint16_t* src = half.data + offset;
  for (int64_t r = 0; r < rows; ++r, src += stride) {
    PrefetchBytes(src + kPrefetchRows * stride, width * int64_t{sizeof(uint16_t)});
    LoadAsFloat(src, half.dtype, dst + r * width, width);
  }
  *rows_out = dst;
  *stride_out = width;
}

// `rows` rows of q or k (K floats, `stride` apart) into dst (contiguous): l2norm (optional),
// then the feature map, then times scale. src may be dst.
inline void TransformQueryOrKeyRows(const LayerSpec& spec, float scale, const float* src,
                                    int64_t stride, int64_t rows, float* dst) {
  const int32_t dim = spec.key_dim;
  for (int64_t r = 0; r < rows; ++r, src += stride, dst += dim) {
    PrefetchBytes(src + kPrefetchRows * stride, dim * sizeof(float));
    if (spec.feature_map == FeatureMap::kIdentity) {
      float factor = scale;
      if (spec.qk_l2norm) factor /= std::sqrt(Dot(src, src, dim) + 1e-6f);
#pragma omp simd
      for (int32_t i = 0; i < dim; ++i) dst[i] = src[i] * factor;
      continue;
    }
    // The feature map sees the normalised value; the scale multiplies its result.
    const float norm = spec.qk_l2norm ? 1.0f / std::sqrt(Dot(src, src, dim) + 1e-6f) : 1.0f;
    for (int32_t i = 0; i < dim; ++i) {
      dst[i] = FeatureMapValue(spec.feature_map, src[i] * norm) * scale;
    }
  }
}

}  // namespace

inline namespace LUMEN_KERNEL_NAMESPACE {

// FirstOutOfDomain at this file's SIMD level: every value of a call is scanned once.
LUMEN_KERNEL_ENTRY
int64_t ScanForOutOfDomainAtLevel(const float* values, int64_t count,
                                  const InputDomain& domain) {
  return FirstOutOfDomain(values, count, domain);
}

// FirstOutOfDomain over `count` 16-bit values, without keeping their fp32 copy.
LUMEN_KERNEL_ENTRY
int64_t ScanHalfForOutOfDomainAtLevel(const uint16_t* values, DType dtype, int64_t count,
                                      const InputDomain& domain) {
  float block[kScanBlockValues];
  for (int64_t begin = 0; begin < count; begin += kScanBlockValues) {
    const int64_t size = std::min(kScanBlockValues, count - begin);
    LoadAsFloat(values + begin, dtype, block, size);
    const int64_t found = FirstOutOfDomain(block, size, domain);
    if (found < size) return begin + found;
  }
  return count;
}

// PrepareHeadInputs at this file's SIMD level.
LUMEN_KERNEL_ENTRY
void PrepareHeadInputsAtLevel(const LayerSpec& spec, const PreparedInputs& in,
                              int32_t value_head, int64_t t0, int64_t count,
                              HeadInputScratch* scratch, HeadSequence* seq) {
  const int64_t H = spec.num_heads, HV = spec.num_value_heads;
  const int64_t K = spec.key_dim, V = spec.value_dim;
  const int64_t qk_head = value_head / (HV / H);
  const int64_t qk_offset = (t0 * H + qk_head) * K, v_offset = (t0 * HV + value_head) * V;
  // 16-bit rows are converted into the scratch first; the transforms then run in place.
  RowsOf(in.q, in.q_half, qk_offset, H * K, count, K, scratch->q.data(), &seq->q,
         &seq->q_stride);
  RowsOf(in.k, in.k_half, qk_offset, H * K, count, K, scratch->k.data(), &seq->k,
         &seq->k_stride);
  RowsOf(in.v, in.v_half, v_offset, HV * V, count, V, scratch->v.data(), &seq->v,
         &seq->v_stride);
  // Rows that need nothing are read in place (the kernels copy strided rows as they go).
  if (in.q_transform) {
    TransformQueryOrKeyRows(spec, spec.scale, seq->q, seq->q_stride, count, scratch->q.data());
    seq->q = scratch->q.data();
    seq->q_stride = K;
  }
  if (in.k_transform) {
    TransformQueryOrKeyRows(spec, 1.0f, seq->k, seq->k_stride, count, scratch->k.data());
    seq->k = scratch->k.data();
    seq->k_stride = K;
  }

  if (in.g != nullptr || in.g_half.data != nullptr) {
    const int64_t per_head = spec.gate_kind() == GateKind::kPerChannel ? K : 1;
    RowsOf(in.g, in.g_half, t0 * in.g_token_stride + value_head * per_head,
           in.g_token_stride, count, per_head, scratch->g.data(), &seq->g, &seq->g_stride);
    if (in.g_raw) {
      // log-decay = -exp(A_log) dt with dt = softplus(g + dt_bias); Mamba-2 scales v by dt.
      // With a lower bound: bound * sigmoid(exp(A_log) (g + dt_bias)).
      const float minus_a = -std::exp(spec.a_log[value_head]);
      const float bound = spec.gate_lower_bound;
      const float* bias = spec.dt_bias.data() + value_head * per_head;
      float* gates = scratch->g.data();
      for (int64_t t = 0; t < count; ++t) {
        const float* raw = seq->g + t * seq->g_stride;
        PrefetchBytes(raw + kPrefetchRows * seq->g_stride, per_head * sizeof(float));
        if (bound != 0.0f) {
          BoundedGatesToLogDecays(bound, -minus_a, raw, bias, per_head, gates + t * per_head);
          continue;
        }
        if (per_head > 1) {
          RawGatesToLogDecays(minus_a, raw, bias, K, gates + t * K);
          continue;
        }
        const float dt = Softplus(raw[0] + bias[0]);
        gates[t] = minus_a * dt;
        if (in.v_times_dt) {
          const float* x = seq->v + t * seq->v_stride;
          float* v = scratch->v.data() + t * V;
#pragma omp simd
          for (int64_t j = 0; j < V; ++j) v[j] = x[j] * dt;
        }
      }
      seq->g = gates;
      seq->g_stride = per_head;
      if (in.v_times_dt) {
        seq->v = scratch->v.data();
        seq->v_stride = V;
      }
    }
  }

  if (in.beta != nullptr) {
    seq->beta = in.beta + t0 * HV + value_head;
    seq->beta_stride = HV;
    if (in.beta_logits) {
      float* beta = scratch->beta.data();
      const float top = in.beta_logit_scale;  // fla's allow_neg_eigval: 2 * sigmoid
#pragma omp simd
      for (int64_t t = 0; t < count; ++t) {
        beta[t] = top / (1.0f + VectorExp(-seq->beta[t * HV]));
      }
      seq->beta = beta;
      seq->beta_stride = 1;
    }
  }
}


}  // namespace LUMEN_KERNEL_NAMESPACE
}  // namespace lumen::cpu
