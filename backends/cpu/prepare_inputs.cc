#include "backends/cpu/prepare_inputs.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "backends/cpu/kernel_table.h"
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
    const KernelTable& kernels = Kernels();
    const int64_t found =
        begin + (defer ? kernels.scan_half_for_out_of_domain(
                             raw16 + begin, static_cast<DType>(dtype), size, domain)
                       : kernels.scan_for_out_of_domain(fp32 + begin, size, domain));
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
                         BetaDomain(spec.beta_sigmoid, spec.allow_neg_eigval),
                         &out->beta_storage, &out->beta);
    if (!status.ok()) return status;
    out->beta_logits = spec.beta_sigmoid;
    out->beta_logit_scale = spec.allow_neg_eigval ? 2.0f : 1.0f;
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

void PrepareHeadInputs(const LayerSpec& spec, const PreparedInputs& in, int32_t value_head,
                       int64_t t0, int64_t count, HeadInputScratch* scratch,
                       HeadSequence* seq) {
  Kernels().prepare_head_inputs(spec, in, value_head, t0, count, scratch, seq);
}

void CommitConvWindows(const LayerSpec& spec, const LayerRun& run, const PreparedInputs& in) {
  if (spec.conv_size == 0) return;
  for (int32_t part = 0; part < kNumConvParts; ++part) {
    StoreConvWindows(spec, run, part, in.next_windows[part]);
  }
}

}  // namespace lumen::cpu
