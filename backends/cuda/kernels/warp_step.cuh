#pragma once
// The decode step for the common shapes (K <= 128, V a multiple of 4): every sum over K
// stays inside a warp, so a block runs without a barrier from its first state load to its
// last store and keeps its whole tile in flight at once.

#include "backends/cuda/kernels/recurrent_step.cuh"

namespace lumen::cuda {

// Whether LaunchWarpStep takes this layer's shape.
bool WarpStepTakes(const LayerConfig& layer);

// Enqueues one token for each session of `args` (the state update and o; not the
// normalizer's update) on `stream`. Needs WarpStepTakes(args.layer). No allocation, no
// synchronisation. Returns the launch status.
cudaError_t LaunchWarpStep(const StepArgs& args, const StepStates& states, cudaStream_t stream);

}  // namespace lumen::cuda
