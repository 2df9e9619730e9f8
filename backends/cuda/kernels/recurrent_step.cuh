#pragma once
// The recurrent form on the GPU: one token for each of a list of sessions (a step or a
// batched step), with the input preparation fused in. Decode is bound by memory bandwidth,
// so every state element is read once and written once, in 16-byte accesses.

#include <cstdint>

#include "backends/cuda/gpu_compat.cuh"
#include "backends/cuda/kernels/input_check.cuh"
#include "backends/cuda/kernels/layer_math.cuh"

namespace lumen::cuda {

// Sessions one launch takes; their state pointers travel by value in the kernel's
// parameters, so a launch needs no device-side table and can be captured in a CUDA graph.
inline constexpr int32_t kStepSessionsPerLaunch = 256;

struct StepStates {
  void* layer_state[kStepSessionsPerLaunch];  // each: matrix [HV, K, V] then z [HV, K]
};

struct StepArgs {
  LayerConfig layer;
  RawInputs inputs;
  void* o = nullptr;  // [T, HV, V]
  int32_t out_dtype = kFloat32;
  bool state_bf16 = false;
  int32_t num_sessions = 0;   // <= kStepSessionsPerLaunch
  int32_t first_session = 0;  // session s of this launch reads token first_session + s
  // While this record holds an error, the launch changes no state and writes no output
  // (written by the step kernel only with check_in_kernel).
  InputErrorRecord* input_error = nullptr;
  // The launch directly follows the input check (LaunchCheckInputs) on the stream: on sm_90
  // it then starts while the check runs, loads its state, and waits for the check before it
  // reads the record (programmatic dependent launch).
  bool follows_check = false;
  // A small call checks its inputs inside the step kernel instead (BlockFindsInputError),
  // which then writes `input_error` as the check launch would have: one launch per step.
  // Only for a call of one launch whose kernel reads the raw inputs (no convolution pass).
  bool check_in_kernel = false;
  CheckedInputs check;
};

// Calls of at most this many input elements (all tensors together) check their inputs in
// the step kernel, where LaunchRecurrentStep takes the layer's shape there
// (StepChecksInputsInKernel): each block then reads them all, so the limit keeps that read
// near one round trip to L2. A step of HV = 32, K = V = 128 is about 12,300.
inline constexpr int64_t kInKernelCheckElements = 16384;

// Whether the step kernel for `layer` can check a small call's inputs itself.
bool StepChecksInputsInKernel(const LayerConfig& layer);

// Launches a step kernel over `grid` on `stream`; when `args.follows_check` (sm_90 only), as
// a programmatic dependent of the check launched just before it.
template <typename Kernel>
cudaError_t LaunchStepKernel(Kernel kernel, dim3 grid, int threads, const StepArgs& args,
                             const StepStates& states, cudaStream_t stream) {
#if LUMEN_GPU_NVIDIA_PATHS
  if (args.follows_check) {
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = dim3(threads);
    config.stream = stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, kernel, args, states);
  }
#endif
  kernel<<<grid, threads, 0, stream>>>(args, states);
  return cudaGetLastError();
}

// Enqueues one token for each session of `args` on `stream`: the state update, o, and for a
// normalised layer the normalizer update (a second, small launch). No allocation, no
// synchronisation. Returns the launch status.
cudaError_t LaunchRecurrentStep(const StepArgs& args, const StepStates& states,
                                cudaStream_t stream);

}  // namespace lumen::cuda
