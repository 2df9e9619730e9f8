#include "backends/cpu/prepare_inputs.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "backends/cpu/kernel_targets.h"
#include "backends/cpu/prefetch.h"
#include "backends/cpu/small_matmul.h"
#include "backends/cpu/vector_math.h"
#include "src/dtype_convert.h"
#include "src/input_domain.h"
#include "src/input_domain_error.h"

namespace lumen::cpu {
namespace {

// What every input of one call shares: its token offsets.
struct Call {
  absl::Span<const int32_t> cu_seqlens;
  int64_t tokens() const { return cu_seqlens.back(); }
};

// FirstOutOfDomain at the kernels' SIMD level: every value of a call is scanned once.
LUMEN_CPU_KERNEL
int64_t ScanForOutOfDomain(const float* values, int64_t count, const InputDomain& domain) {
  return FirstOutOfDomain(values, count, domain);
}

// Values of a 16-bit input converted a block at a time for the scan, which needs no copy of
// the whole input: a block stays in L1.
constexpr int64_t kScanBlockValues = 2048;

// FirstOutOfDomain over `count` 16-bit values, without keeping their fp32 copy.
LUMEN_CPU_KERNEL
int64_t ScanHalfForOutOfDomain(const uint16_t* values, DType dtype, int64_t count,
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

// One input laid out [tokens, heads, per_head], its raw values checked against `domain`
// (when the call checks values). fp32: *values is the caller's buffer itself. 16-bit, with
// `half` given: only checked, and left to the heads to convert (*values nullptr, *half set).
// 16-bit otherwise: converted into `storage` (*values). A prefill's inputs (hundreds of MiB)
// are checked (and converted) in parallel pieces, each checked while it is still in cache;
// the first bad value wins. Allocates (callers catch bad_alloc).
absl::Status LoadChecked(const Call& call, ThreadPool& pool, const char* tensor,
                         const void* src, int32_t dtype, int64_t heads, int64_t per_head,
                         const InputDomain& domain, std::vector<float>* storage,
                         const float** values, HalfInput* half = nullptr) {
  const int64_t count = call.tokens() * heads * per_head;
  const bool is_half = dtype != LUMEN_DTYPE_FLOAT32;
  const bool defer = is_half && half != nullptr;
  const bool convert = is_half && !defer;
  if (convert) storage->resize(count);
  const float* fp32 = is_half ? (convert ? storage->data() : nullptr)
                              : static_cast<const float*>(src);
  const uint16_t* raw16 = static_cast<const uint16_t*>(src);
  *values = fp32;
  if (defer) *half = HalfInput{raw16, static_cast<DType>(dtype)};
  std::atomic<int64_t> bad{count};
  pool.ParallelForPieces(count, kPassPieceValues, [&](int64_t begin, int64_t size) {
    if (convert) {
      LoadAsFloat(raw16 + begin, static_cast<DType>(dtype), storage->data() + begin, size);
    }
    const int64_t found =
        begin + (defer ? ScanHalfForOutOfDomain(raw16 + begin, static_cast<DType>(dtype), size,
                                                domain)
                       : ScanForOutOfDomain(fp32 + begin, size, domain));
    if (found == begin + size) return;
    int64_t seen = bad.load();
    while (found < seen && !bad.compare_exchange_weak(seen, found)) continue;
  });
  const int64_t first_bad = bad.load();
  if (first_bad == count) return absl::OkStatus();
  float value;
  if (defer) {
    LoadAsFloat(raw16 + first_bad, static_cast<DType>(dtype), &value, 1);
  } else {
    value = fp32[first_bad];
  }
  return InputOutOfDomain(tensor, domain, value, first_bad, heads, per_head, call.cu_seqlens);
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
// `storage`; or, 16-bit without a convolution and with `half` given, left to the heads
// (LoadChecked).
absl::Status LoadPart(const LayerSpec& spec, const ConvTaps& conv_taps, const LayerRun& run,
                      const Call& call, ThreadPool& pool, int32_t part, const char* tensor,
                      const void* src, int64_t heads, int64_t per_head,
                      std::vector<float>* storage, PreparedInputs* out, const float** values,
                      HalfInput* half) {
  const int64_t count = call.tokens() * heads * per_head;
  const bool conv = spec.conv_size > 0;
  const float* raw = nullptr;
  absl::Status status =
      LoadChecked(call, pool, tensor, src, run.inputs->dtype, heads, per_head, kFiniteValues,
                  conv ? &out->conv_input : storage, &raw, conv ? nullptr : half);
  if (!status.ok() || !conv) {
    *values = raw;
    return status;
  }
  storage->resize(count);
  ConvolvePart(spec, conv_taps, run, part, raw, storage->data(), &out->next_windows[part],
               &out->conv_scratch, pool);
  *values = storage->data();
  return absl::OkStatus();
}

float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Raw gates' log-decays: out[i] = minus_a * softplus(raw[i] + dt_bias[i]).
inline void RawGatesToLogDecays(float minus_a, const float* raw, const float* dt_bias,
                                int64_t count, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) out[i] = minus_a * VectorSoftplus(raw[i] + dt_bias[i]);
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

absl::Status PrepareInputs(const LayerSpec& spec, const ConvTaps& conv_taps, const LayerRun& run,
                           ThreadPool& pool, PreparedInputs* out) {
  const lumen_layer_inputs& inputs = *run.inputs;
  const Call call{run.cu_seqlens};
  const int32_t dtype = inputs.dtype;
  const int64_t H = spec.num_heads, HV = spec.num_value_heads;
  out->q_half = out->k_half = out->v_half = out->g_half = HalfInput{};
  absl::Status status = LoadPart(spec, conv_taps, run, call, pool, kConvQ, "q", inputs.q, H,
                                 spec.key_dim, &out->q_storage, out, &out->q, &out->q_half);
  if (!status.ok()) return status;
  status = LoadPart(spec, conv_taps, run, call, pool, kConvK, "k", inputs.k, H,
                    spec.key_dim, &out->k_storage, out, &out->k, &out->k_half);
  if (!status.ok()) return status;
  out->k_transform = spec.qk_l2norm || spec.feature_map != FeatureMap::kIdentity;
  out->q_transform = out->k_transform || spec.scale != 1.0f;

  out->g_raw = false;
  if (spec.family == Family::kRetention) {
    out->g_storage.resize(HV);
    for (int64_t h = 0; h < HV; ++h) out->g_storage[h] = std::log(spec.decay[h]);
    out->g = out->g_storage.data();
    out->g_token_stride = 0;
  } else if (spec.needs_g_input()) {
    const int64_t per_token = spec.g_per_token();
    out->g_token_stride = per_token;
    // A gate per channel is as large as q; one per head is converted whole.
    const bool per_channel = spec.gate_kind() == GateKind::kPerChannel;
    status = LoadChecked(call, pool, "g", inputs.g, dtype, HV, per_token / HV,
                         GateDomain(spec.gate_raw), &out->g_storage, &out->g,
                         per_channel ? &out->g_half : nullptr);
    if (!status.ok()) return status;
    out->g_raw = spec.gate_raw;
  } else {
    out->g = nullptr;
    out->g_token_stride = 0;
  }

  // Mamba-2 (ssd with gate_raw) scales each head's write by its dt, and its D skip reads the
  // unscaled x, so v is converted whole there.
  out->v_times_dt = spec.family == Family::kSsd && spec.gate_raw;
  const bool skip = out->v_times_dt && !spec.d_skip.empty();
  status = LoadPart(spec, conv_taps, run, call, pool, kConvV, "v", inputs.v, HV,
                    spec.value_dim, &out->v_storage, out, &out->v, skip ? nullptr : &out->v_half);
  if (!status.ok()) return status;
  out->skip_x = skip ? out->v : nullptr;

  out->beta = nullptr;
  out->beta_logits = false;
  if (spec.delta_rule()) {
    status = LoadChecked(call, pool, "beta", inputs.beta, dtype, HV, 1,
                         BetaDomain(spec.beta_sigmoid), &out->beta_storage, &out->beta);
    if (!status.ok()) return status;
    out->beta_logits = spec.beta_sigmoid;
  }
  return absl::OkStatus();
}

void ReserveHeadInputs(const LayerSpec& spec, const PreparedInputs& in, int64_t max_tokens,
                       HeadInputScratch* scratch) {
  const int64_t K = spec.key_dim;
  if (in.q_transform || in.q_half.data) scratch->q.resize(max_tokens * K);
  if (in.k_transform || in.k_half.data) scratch->k.resize(max_tokens * K);
  if (in.v_times_dt || in.v_half.data) scratch->v.resize(max_tokens * spec.value_dim);
  if (in.g_raw || in.g_half.data) {
    scratch->g.resize(max_tokens * in.g_token_stride / spec.num_value_heads);
  }
  if (in.beta_logits) scratch->beta.resize(max_tokens);
}

namespace {

// PrepareHeadInputs at the CPU's SIMD level. The clones stay inside the library: GCC exports
// the dispatcher of an externally visible target_clones function whatever the visibility, and
// another copy of lumen in the process (an older version, or a build compared with this one)
// would then call this copy's, with its own idea of PreparedInputs.
LUMEN_CPU_KERNEL
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
      const float minus_a = -std::exp(spec.a_log[value_head]);
      const float* bias = spec.dt_bias.data() + value_head * per_head;
      float* gates = scratch->g.data();
      for (int64_t t = 0; t < count; ++t) {
        const float* raw = seq->g + t * seq->g_stride;
        PrefetchBytes(raw + kPrefetchRows * seq->g_stride, per_head * sizeof(float));
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
#pragma omp simd
      for (int64_t t = 0; t < count; ++t) {
        beta[t] = 1.0f / (1.0f + VectorExp(-seq->beta[t * HV]));
      }
      seq->beta = beta;
      seq->beta_stride = 1;
    }
  }
}

}  // namespace

void PrepareHeadInputs(const LayerSpec& spec, const PreparedInputs& in, int32_t value_head,
                       int64_t t0, int64_t count, HeadInputScratch* scratch,
                       HeadSequence* seq) {
  PrepareHeadInputsAtLevel(spec, in, value_head, t0, count, scratch, seq);
}

void CommitConvWindows(const LayerSpec& spec, const LayerRun& run, const PreparedInputs& in) {
  if (spec.conv_size == 0) return;
  for (int32_t part = 0; part < kNumConvParts; ++part) {
    StoreConvWindows(spec, run, part, in.next_windows[part]);
  }
}

}  // namespace lumen::cpu
