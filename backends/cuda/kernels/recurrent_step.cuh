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
  DType out_dtype = DType::kFloat32;
  bool state_bf16 = false;
  int32_t num_sessions = 0;   // <= kStepSessionsPerLaunch
  int32_t first_session = 0;  // session s of this launch reads token first_session + s
  // A token run (register kernel only, LaunchRegisterTokens): when set, session s reads tokens
  // [cu_seqlens[s], cu_seqlens[s + 1]) and its state is state_table[s] (device arrays).
  const int32_t* cu_seqlens = nullptr;
  void* const* state_table = nullptr;
  // False for a tentative pass (register kernel's token runs only): outputs, no state write.
  bool write_state = true;
  // While this record holds an error, the launch changes no state and writes no output.
  const InputErrorRecord* input_error = nullptr;
  // Launched as a programmatic dependent of the kernel before it on the stream (sm_90,
  // LaunchKernel): it starts while that kernel runs, loads its state, and waits for it before
  // it reads the input check's record. Set only where the kernel before is the check, or
  // (register kernel only, with inputs_from_previous) the convolution pass.
  bool after_previous = false;
  // The inputs were written by the kernels just before this one (the convolution pass): the
  // register kernel then waits for them before it reads them.
  bool inputs_from_previous = false;
  // The device's multiprocessors and shared memory per multiprocessor: they size the
  // pipelined kernel's persistent grid (0: one block per tile).
  int32_t multiprocessors = 0;
  int64_t shared_bytes_per_multiprocessor = 0;
};

// Enqueues one token for each session of `args` on `stream`: the state update, o, and for a
// normalised layer the normalizer update (a second, small launch). No allocation, no
// synchronisation. Returns the launch status.
cudaError_t LaunchRecurrentStep(const StepArgs& args, const StepStates& states,
                                cudaStream_t stream);

}  // namespace lumen::cuda
