#pragma once
// The decode kernel for fp32 state in the published models' shape (K = 128, V a multiple of 32,
// no normaliser, identity feature map): each block holds a 128 x 32 tile of one value head in
// registers, with two barriers per token. recurrent_step.cu dispatches to it; its contract is
// LaunchRecurrentStep's.

#include "backends/cuda/kernels/recurrent_step.cuh"

namespace lumen::cuda {

// Whether the register kernel takes the steps of `args`.
bool RegisterStepFits(const StepArgs& args);

// Enqueues the state update and o of one token for each session of `args` on `stream`.
// Returns the launch status.
cudaError_t LaunchRegisterStep(const StepArgs& args, const StepStates& states,
                               cudaStream_t stream);

// Tokens a token run prepares at a time, and the longest sequences a prefill runs as a token
// run: up to here one pass over the state beats the chunkwise form (docs/cuda_decode.md).
inline constexpr int32_t kMaxRunTokens = 8;

// Enqueues a token run: session s (0 <= s < num_sessions) runs its tokens
// [args.cu_seqlens[s], args.cu_seqlens[s + 1]) over the state args.state_table[s], reading the
// state once and writing it once (not at all without args.write_state). Each token computes
// exactly what a one-token step does. Returns the launch status.
cudaError_t LaunchRegisterTokens(const StepArgs& args, int32_t num_sessions,
                                 cudaStream_t stream);

}  // namespace lumen::cuda
