// A prefill: every session's tokens through the chunkwise kernel (or, where Run chose it, the
// register step kernel's token run: short sequences, tentative passes and commits' replays),
// after the device tables, the input check (which holds a failing call's sequences at length
// 0), the convolution and Mamba-2 passes and the preparation of the kernel's fp32 inputs.

#include <algorithm>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/chunkwise.cuh"
#include "backends/cuda/kernels/convert.cuh"
#include "backends/cuda/kernels/prefill_tables.cuh"
#include "backends/cuda/kernels/prepare_inputs.cuh"
#include "backends/cuda/kernels/register_step.cuh"
#include "backends/cuda/runtime_status.h"
#include "backends/cuda/scratch_plan.h"

namespace lumen::cuda {

absl::Status CudaBackend::RunPrefill(const LayerSpec& spec, const LayerRun& run,
                                     bool token_run, const RawInputs& inputs, void* o,
                                     char* extras, char* scratch, cudaStream_t stream) {
  const PrefillPlan plan = PlanPrefill(spec, run);
  const int32_t n = run.num_sessions();
  const int64_t count = StateCount(spec);
  const int64_t T = run.num_tokens();

  // The device tables.
  PrefillTables tables;
  tables.cu_seqlens = reinterpret_cast<int32_t*>(scratch + plan.cu_seqlens);
  tables.states = reinterpret_cast<float**>(scratch + plan.states);
  if (plan.normalizers >= 0) tables.normalizers = reinterpret_cast<float**>(scratch + plan.normalizers);
  if (plan.stored >= 0) tables.stored = reinterpret_cast<void**>(scratch + plan.stored);
  if (plan.wide >= 0) tables.wide = reinterpret_cast<float*>(scratch + plan.wide);
  tables.count = count;
  tables.matrix_count = spec.matrix_count();
  LUMEN_CUDA_RETURN_IF_ERROR(LaunchWritePrefillTables(tables, run.states, run.cu_seqlens, stream),
                             "writing a prefill's tables");
  int32_t* device_cu_seqlens = tables.cu_seqlens;
  // Each session's layer state as stored (the fp32 table holds the blocks themselves).
  void* const* layer_states =
      reinterpret_cast<void* const*>(scratch + (plan.stored >= 0 ? plan.stored : plan.states));

  // The check, which also holds a failing call's sequences at length 0 (or an earlier failing
  // call's), so that nothing below changes a state.
  const LayerConfig& layer = layers_.at(&spec);
  LUMEN_CUDA_RETURN_IF_ERROR(LaunchCheckInputs(layer, inputs, T, n, device_cu_seqlens, true,
                                               input_error_, stream),
                             "launching the input check");

  const auto conv = conv_layers_.find(&spec);
  const bool has_extras = conv != conv_layers_.end();
  const ExtrasPlan extras_plan = PlanExtras(spec, run);
  const ConvOutputs converted = ExtrasOutputs(extras_plan, extras);
  ConvCall call;
  call.num_sessions = n;
  call.num_tokens = T;
  call.cu_seqlens = device_cu_seqlens;
  call.state_bf16 = spec.state_dtype == DType::kBFloat16;
  for (int32_t s = 0; s < n; ++s) {
    call.max_seqlen = std::max(call.max_seqlen, run.cu_seqlens[s + 1] - run.cu_seqlens[s]);
  }
  SessionStates session_states;
  session_states.table = layer_states;
  RawInputs raw = inputs;
  if (has_extras) {
    LUMEN_CUDA_RETURN_IF_ERROR(LaunchGatesToFloats(spec, inputs, T, converted, stream),
                               "launching the input conversion");
    LUMEN_CUDA_RETURN_IF_ERROR(LaunchConvInputs(layer, conv->second, inputs, call,
                                                session_states, n, converted, stream),
                               "launching the convolution");
    raw = ExtrasAsInputs(extras_plan, extras);
  }

  const bool bf16 = spec.state_dtype == DType::kBFloat16;
  float* o_fp32 = plan.o >= 0 ? reinterpret_cast<float*>(scratch + plan.o) : static_cast<float*>(o);
  const float* d_skip = has_extras ? conv->second.d_skip : nullptr;
  if (token_run) {
    // Short sequences (draft tokens, multi-token prediction, a commit's replay) run through
    // the register step kernel, each state read and written once, instead of the chunkwise
    // passes. Its o goes straight to the output, as a step's does, unless Mamba-2's skip is
    // still to be added.
    StepArgs run_args;
    run_args.layer = layer;
    run_args.inputs = raw;
    run_args.o = d_skip != nullptr ? o_fp32 : o;
    run_args.out_dtype =
        d_skip != nullptr ? DType::kFloat32 : static_cast<DType>(run.output->dtype);
    run_args.state_bf16 = bf16;
    run_args.input_error = input_error_;
    run_args.cu_seqlens = device_cu_seqlens;
    run_args.state_table = layer_states;
    run_args.write_state = !run.read_only;
    // Right after the check it starts while the check runs (see StepArgs::after_previous);
    // the lengths it may read before the check holds a failing call's at 0 do not matter,
    // since it reads the check's record before it writes anything.
    run_args.after_previous = dependent_launch_ && !has_extras;
    LUMEN_CUDA_RETURN_IF_ERROR(LaunchRegisterTokens(run_args, n, stream),
                               "launching the token run");
  } else {
    PreparedInputs prepared;
    prepared.q = reinterpret_cast<float*>(scratch + plan.q);
    prepared.k = reinterpret_cast<float*>(scratch + plan.k);
    if (plan.v >= 0) prepared.v = reinterpret_cast<float*>(scratch + plan.v);
    if (plan.log_decay >= 0) prepared.log_decay = reinterpret_cast<float*>(scratch + plan.log_decay);
    if (plan.beta >= 0) prepared.beta = reinterpret_cast<float*>(scratch + plan.beta);
    LUMEN_CUDA_RETURN_IF_ERROR(LaunchPrepareInputs(layer, raw, T, prepared, stream),
                               "launching the input preparation");
    if (bf16) {
      LUMEN_CUDA_RETURN_IF_ERROR(
          LaunchWidenStates(reinterpret_cast<const void* const*>(scratch + plan.stored),
                            reinterpret_cast<float* const*>(scratch + plan.states), count, n,
                            stream),
          "widening bf16 states");
    }
    ChunkwiseArgs args = ChunkwiseShape(spec, n, LongestSequence(run));
    args.q = prepared.q;
    args.k = prepared.k;
    args.v = plan.v >= 0 ? prepared.v : static_cast<const float*>(raw.v);
    args.log_decay = prepared.log_decay;
    args.beta = prepared.beta;
    args.o = o_fp32;
    args.states = reinterpret_cast<float* const*>(scratch + plan.states);
    args.normalizers =
        plan.normalizers >= 0 ? reinterpret_cast<float* const*>(scratch + plan.normalizers) : nullptr;
    args.cu_seqlens = device_cu_seqlens;
    LUMEN_CUDA_RETURN_IF_ERROR(
        LaunchChunkwise(args, plan.chunk >= 0 ? scratch + plan.chunk : nullptr, stream),
        "launching the chunkwise prefill");
    if (bf16) {
      LUMEN_CUDA_RETURN_IF_ERROR(
          LaunchNarrowStates(reinterpret_cast<const float* const*>(scratch + plan.states),
                             reinterpret_cast<void* const*>(scratch + plan.stored), count, n,
                             stream),
          "rounding bf16 states");
    }
  }
  if (d_skip != nullptr || (plan.o >= 0 && !token_run)) {
    LUMEN_CUDA_RETURN_IF_ERROR(
        LaunchFinishOutput(o_fp32, d_skip != nullptr ? converted.x : nullptr, d_skip,
                           spec.num_value_heads, spec.value_dim, o, static_cast<DType>(run.output->dtype),
                           T * spec.num_value_heads * spec.value_dim, input_error_, stream),
        "launching the output pass");
  }
  if (has_extras && spec.conv_size > 1 && !run.read_only) {
    LUMEN_CUDA_RETURN_IF_ERROR(LaunchCommitWindows(conv->second, inputs, call, session_states,
                                                   n, input_error_, stream),
                               "launching the window update");
  }
  return absl::OkStatus();
}

}  // namespace lumen::cuda
