#pragma once
// The decode step for the common shapes (K <= 128, V a multiple of 4): every sum over K
// stays inside a run of lanes of one warp, so the only barriers of a block are the one after
// its tile has arrived and the one before it is written back.

#include "backends/cuda/kernels/recurrent_step.cuh"

namespace lumen::cuda {

// Whether LaunchWarpStep takes this layer's shape.
bool WarpStepTakes(const LayerConfig& layer);

// Enqueues one token for each session of `args` (the state update and o; not the
// normalizer's update) on `stream`. Needs WarpStepTakes(args.layer). No allocation, no
// synchronisation. Returns the launch status.
cudaError_t LaunchWarpStep(const StepArgs& args, const StepStates& states, cudaStream_t stream);

}  // namespace lumen::cuda
