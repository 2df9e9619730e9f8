// A step: one token for each of a call's sessions, through the recurrent kernels (one launch
// per group of sessions), after the input check and, for layers with them, the convolution and
// Mamba-2 passes. Also several tokens per session as one-token steps in order (RunStepByStep),
// where the register kernel's token run does not take the layer.

#include <algorithm>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/convert.cuh"
#include "backends/cuda/kernels/recurrent_step.cuh"
#include "backends/cuda/kernels/register_step.cuh"
#include "backends/cuda/runtime_status.h"
#include "backends/cuda/scratch_plan.h"

namespace lumen::cuda {

absl::Status CudaBackend::RunSteps(const LayerSpec& spec, const LayerRun& run,
                                   const RawInputs& inputs, void* o, char* extras,
                                   cudaStream_t stream) {
  const LayerConfig& layer = layers_.at(&spec);
  const int32_t n = run.num_sessions();
  StepArgs args;
  args.layer = layer;
  args.state_bf16 = spec.state_dtype == DType::kBFloat16;
  LUMEN_CUDA_RETURN_IF_ERROR(
      LaunchCheckInputs(layer, inputs, n, n, nullptr, false, input_error_, stream),
      "launching the input check");
  const auto conv = conv_layers_.find(&spec);
  const bool has_extras = conv != conv_layers_.end();
  const ExtrasPlan plan = PlanExtras(spec, run);
  const ConvOutputs prepared = ExtrasOutputs(plan, extras);
  ConvCall call;
  call.num_sessions = n;
  call.num_tokens = n;
  call.max_seqlen = 1;
  call.state_bf16 = spec.state_dtype == DType::kBFloat16;
  // On sm_90 the register kernel's chain (check, conversions, convolution, step, window
  // update) is launched as programmatic dependents, each starting while the one before runs:
  // a one-token step is a chain of short launches, and their launch latencies otherwise add.
  const bool chained = dependent_launch_ && RegisterStepFits(args);
  if (has_extras) {
    LUMEN_CUDA_RETURN_IF_ERROR(LaunchGatesToFloats(spec, inputs, n, prepared, stream, chained),
                               "launching the input conversion");
  }

  args.inputs = has_extras ? ExtrasAsInputs(plan, extras) : inputs;
  float* o32 = At<float>(extras, plan.o);  // Mamba-2 with D: the skip is added afterwards
  args.o = o32 != nullptr ? o32 : o;
  args.out_dtype = o32 != nullptr ? DType::kFloat32 : static_cast<DType>(run.output->dtype);
  args.input_error = input_error_;
  args.multiprocessors = multiprocessors_;
  args.shared_bytes_per_multiprocessor = shared_bytes_per_multiprocessor_;
  SessionStates states;
  for (int32_t first = 0; first < n; first += kStepSessionsPerLaunch) {
    args.first_session = first;
    args.num_sessions = std::min(kStepSessionsPerLaunch, n - first);
    for (int32_t s = 0; s < args.num_sessions; ++s) {
      states.values.layer_state[s] = run.states[first + s];
    }
    states.first = first;
    if (has_extras) {
      LUMEN_CUDA_RETURN_IF_ERROR(LaunchConvInputs(layer, conv->second, inputs, call, states,
                                                  args.num_sessions, prepared, stream, chained),
                                 "launching the convolution");
    }
    // Without a chain, only the first launch comes right after the check (see StepArgs).
    args.after_previous = chained || (dependent_launch_ && !has_extras && first == 0);
    args.inputs_from_previous = chained && has_extras;
    LUMEN_CUDA_RETURN_IF_ERROR(LaunchRecurrentStep(args, states.values, stream),
                               "launching the step kernel");
  }
  if (o32 != nullptr) {
    LUMEN_CUDA_RETURN_IF_ERROR(
        LaunchFinishOutput(o32, prepared.x, conv->second.d_skip, spec.num_value_heads,
                           spec.value_dim, o, static_cast<DType>(run.output->dtype),
                           int64_t{n} * spec.num_value_heads * spec.value_dim, input_error_,
                           stream, dependent_launch_),
        "launching the output pass");
  }
  if (has_extras && spec.conv_size > 1) {
    for (int32_t first = 0; first < n; first += kStepSessionsPerLaunch) {
      const int32_t count = std::min(kStepSessionsPerLaunch, n - first);
      for (int32_t s = 0; s < count; ++s) states.values.layer_state[s] = run.states[first + s];
      states.first = first;
      LUMEN_CUDA_RETURN_IF_ERROR(LaunchCommitWindows(conv->second, inputs, call, states, count,
                                                     input_error_, stream, dependent_launch_),
                                 "launching the window update");
    }
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::RunStepByStep(const LayerSpec& spec, const LayerRun& run,
                                        const RawInputs& inputs, void* o, char* extras,
                                        cudaStream_t stream) {
  const int64_t in_size = DTypeSize(inputs.dtype);
  const int64_t out_size = DTypeSize(static_cast<DType>(run.output->dtype));
  auto at = [](const void* base, int64_t bytes) -> const void* {
    return base == nullptr ? nullptr : static_cast<const char*>(base) + bytes;
  };
  LayerRun one;
  one.layer = run.layer;
  one.inputs = run.inputs;
  one.output = run.output;
  one.cu_seqlens = {0, 1};
  for (int32_t i = 0; i < run.num_sessions(); ++i) {
    one.states = {run.states[i]};
    for (int64_t t = run.cu_seqlens[i]; t < run.cu_seqlens[i + 1]; ++t) {
      RawInputs token = inputs;
      token.q = at(inputs.q, t * spec.num_heads * spec.key_dim * in_size);
      token.k = at(inputs.k, t * spec.num_heads * spec.key_dim * in_size);
      token.v = at(inputs.v, t * spec.num_value_heads * spec.value_dim * in_size);
      token.g = at(inputs.g, t * spec.g_per_token() * in_size);
      token.beta = at(inputs.beta, t * spec.num_value_heads * in_size);
      void* token_o = static_cast<char*>(o) + t * spec.num_value_heads * spec.value_dim * out_size;
      if (absl::Status status = RunSteps(spec, one, token, token_o, extras, stream);
          !status.ok()) {
        return status;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace lumen::cuda
