#pragma once
// Turns a call's raw inputs into what the head kernels read: fp32, with the layer's in-layer
// options applied in order (docs/spec.md §6: short convolution, then qk_l2norm, feature map, scale,
// sigmoid(beta), raw gates, Mamba-2's dt scaling), after checking every raw value against its
// domain (src/input_domain.h). The checks, conversions and convolutions run for the whole call
// first (PrepareInputs); the per-head options then run in each head's task (PrepareHeadInputs).

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "backends/cpu/head_kernels.h"
#include "backends/cpu/short_conv.h"
#include "lumen/lumen.h"
#include "src/backend.h"
#include "src/dtype_convert.h"
#include "src/layer_spec.h"
#include "src/thread_pool.h"

namespace lumen::cpu {

// A 16-bit input that PrepareInputs checks but does not convert: each head converts its own
// rows as it reads them (PrepareHeadInputs), so that a prefill never writes, and reads back,
// a whole fp32 copy of it.
struct HalfInput {
  const uint16_t* data = nullptr;  // set: the input is left to the heads
  DType dtype = DType::kBFloat16;
};

// A call's inputs once checked (and convolved), as the heads read them. What is per token
// and head (l2norm, feature map and scale of q and k, raw gates, sigmoid(beta), Mamba-2's
// dt scaling) is left to the thread that runs the head (PrepareHeadInputs), so that it runs
// in parallel and on rows that thread's cache already holds; the flags say which.
struct PreparedInputs {
  // q, k, v and g are nullptr where their *_half holds them (16-bit, no convolution).
  const float* q = nullptr;     // [T, H, K]  conv(q)
  const float* k = nullptr;     // [T, H, K]  conv(k)
  const float* v = nullptr;     // [T, HV, V] conv(v); Mamba-2: conv(x)
  const float* g = nullptr;     // [T, HV] or [T, HV, K] gates; retention: [HV] log-decays
  HalfInput q_half, k_half, v_half, g_half;  // g only per channel: [T, HV, K]
  int64_t g_token_stride = 0;   // 0 for retention's fixed per-head decay
  const float* beta = nullptr;  // [T, HV], or nullptr
  const float* skip_x = nullptr;  // [T, HV, V] Mamba-2's x for the D skip, or nullptr

  bool q_transform = false;   // q rows still need l2norm / feature map / scale
  bool k_transform = false;   // k rows still need l2norm / feature map (k takes no scale)
  bool g_raw = false;         // g holds raw gates: log-decay = -exp(A_log) softplus(g + dt_bias),
                              // or the lower-bounded gate (LayerSpec::gate_lower_bound)
  bool v_times_dt = false;    // Mamba-2: v rows still need scaling by the head's dt
  bool beta_logits = false;   // beta holds logits: sigmoid still to apply
  float beta_logit_scale = 1.0f;  // beta = scale * sigmoid(logit): 2 with allow_neg_eigval

  // The conv windows each session will hold after the call, per part: [N, C, W-1] fp32.
  std::vector<float> next_windows[kNumConvParts];

  // Storage for whatever had to be converted or convolved; fp32 inputs are used in place.
  std::vector<float> q_storage, k_storage, v_storage, g_storage, beta_storage;
  std::vector<float> conv_input;
  ConvScratch conv_scratch;
};

// Elements one task of a parallel pass over a call's inputs or output takes (conversion,
// checks): large enough that a task outweighs waking a thread, small enough that a
// prefill's q, k and v split across every thread, and that a converted piece is still in
// cache when it is checked.
inline constexpr int64_t kPassPieceValues = int64_t{1} << 16;

// One thread's rows of one head, as PrepareHeadInputs makes them.
struct HeadInputScratch {
  std::vector<float> q, k, v, g, beta;
};

// Sizes `scratch` for heads of up to `max_tokens` tokens of this call, so that
// PrepareHeadInputs never allocates. Allocates (callers catch bad_alloc).
void ReserveHeadInputs(const LayerSpec& spec, const PreparedInputs& in, int64_t max_tokens,
                       HeadInputScratch* scratch);

// Points seq's q, k, v, g and beta (and strides) at value head `value_head`'s inputs for
// tokens [t0, t0 + count) of the call, finishing into `scratch` the rows that `in` left to
// the heads (at most the max_tokens given to ReserveHeadInputs). Thread-safe for distinct
// scratch.
void PrepareHeadInputs(const LayerSpec& spec, const PreparedInputs& in, int32_t value_head,
                       int64_t t0, int64_t count, HeadInputScratch* scratch, HeadSequence* seq);

// Fails with INVALID_ARGUMENT, naming the tensor, token and head, when a raw input holds a
// value outside its domain: non-finite anywhere, a log-gate g > 0 (unless gate_raw), beta
// outside [0, 1] ([0, 2] with allow_neg_eigval; unless beta_sigmoid). Reads the sessions'
// conv windows but changes no state; allocates (callers catch bad_alloc). Large convolutions
// run on `pool`; conv_taps: MakeConvTaps(spec).
absl::Status PrepareInputs(const LayerSpec& spec, const ConvTaps& conv_taps, const LayerRun& run,
                           ThreadPool& pool, PreparedInputs* out);

// Stores the conv windows PrepareInputs computed into the sessions' states (nothing without a
// convolution). Call once the layer call can no longer fail.
void CommitConvWindows(const LayerSpec& spec, const LayerRun& run, const PreparedInputs& in);

}  // namespace lumen::cpu
