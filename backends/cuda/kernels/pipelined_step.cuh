#pragma once
// The decode kernel for bf16 state in the common shapes (K <= 128, V a multiple of 4): a
// persistent grid whose blocks stream many state tiles each, the next tile's copy in flight
// while the current one computes. recurrent_step.cu dispatches to it; its contract is
// LaunchRecurrentStep's.

#include "backends/cuda/kernels/recurrent_step.cuh"

namespace lumen::cuda {

// Whether the pipelined kernel takes the steps of `args`: bf16 state, K <= 128, V % 4 == 0.
bool PipelinedStepFits(const StepArgs& args);

// Enqueues the state update and o of one token for each session of `args` on `stream`
// (not the normalizer update: LaunchRecurrentStep adds it). Returns the launch status.
cudaError_t LaunchPipelinedStep(const StepArgs& args, const StepStates& states,
                                cudaStream_t stream);

}  // namespace lumen::cuda
