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

}  // namespace lumen::cuda
