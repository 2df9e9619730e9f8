#pragma once
// The passes a layer with a short convolution or Mamba-2's extras runs around the recurrent and
// chunkwise kernels (docs/spec.md §6, the CPU's short_conv.cc and prepare_inputs.cc):
//   before: the causal depthwise convolution of raw q, k and v with each session's window
//           (SiLU or none), and Mamba-2's v = x * dt, giving fp32 inputs for the other kernels;
//   after:  each session's new window stored into its state (Mamba-2's skip, o += D * x, is
//           part of the output conversion, convert.cuh).
// The window update does nothing while the input check's record holds an error
// (input_check.cuh).

#include <cstdint>

#include "backends/cuda/gpu_compat.cuh"
#include "backends/cuda/kernels/input_check.cuh"
#include "backends/cuda/kernels/layer_math.cuh"
#include "backends/cuda/kernels/recurrent_step.cuh"

namespace lumen::cuda {

inline constexpr int32_t kConvParts = 3;  // q, k, v, as the windows follow each other

// A layer's convolution and Mamba-2 parameters (device memory).
struct ConvLayer {
  int32_t width = 0;  // W; 0: no convolution
  bool silu = true;
  const float* weight[kConvParts] = {};  // [C, W]
  const float* bias[kConvParts] = {};    // [C], or null
  int64_t channels[kConvParts] = {};     // C: H * K for q and k, HV * V for v
  int64_t window_offset[kConvParts] = {};  // where a part's window [C, W-1] starts in a
                                           // session's layer state, in elements
  bool mamba2 = false;                   // v = x * softplus(g + dt_bias)
  const float* d_skip = nullptr;         // [HV] Mamba-2's D, or null
};

// The sessions of a call: a device table of their layer states, or (steps) the states of up
// to kStepSessionsPerLaunch sessions by value, starting at session `first`.
struct SessionStates {
  void* const* table = nullptr;
  StepStates values;
  int32_t first = 0;
};

// Where the prepared fp32 inputs go, each laid out as its raw input.
struct ConvOutputs {
  float* q = nullptr;
  float* k = nullptr;
  float* v = nullptr;     // conv(v); Mamba-2: conv(x) * dt
  float* x = nullptr;     // Mamba-2 with D: conv(x), for the skip; else null
  float* g = nullptr;     // raw g as fp32, or null
  float* beta = nullptr;  // raw beta as fp32, or null
};

// One call's sessions: cu_seqlens (device, [n + 1]) or null for a step (token i of session i).
struct ConvCall {
  int32_t num_sessions = 0;
  int64_t num_tokens = 0;
  int32_t max_seqlen = 0;
  const int32_t* cu_seqlens = nullptr;
  bool state_bf16 = false;
};

// Enqueues the convolution of the raw q, k and v of `inputs` into out.q, out.k, out.v (and
// out.x) for sessions [states.first, +count) of the
// call; count <= kStepSessionsPerLaunch without a table). Reads the windows, writes no state.
cudaError_t LaunchConvInputs(const LayerConfig& layer, const ConvLayer& conv,
                             const RawInputs& inputs, const ConvCall& call,
                             const SessionStates& states, int32_t count,
                             const ConvOutputs& out, cudaStream_t stream,
                             bool after_previous = false);

// `after_previous` (both): launched as a programmatic dependent of the kernel before it
// (LaunchKernel), as in a one-token step's chain of launches.
// Stores each session's window after its tokens (sessions as for LaunchConvInputs): the last W-1 of window ++ raw inputs.
cudaError_t LaunchCommitWindows(const ConvLayer& conv, const RawInputs& inputs,
                                const ConvCall& call, const SessionStates& states,
                                int32_t count, const InputErrorRecord* record,
                                cudaStream_t stream, bool after_previous = false);

}  // namespace lumen::cuda
