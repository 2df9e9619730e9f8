// One layer call: copy host inputs in, dispatch to the step or the prefill path, copy a host
// output back. Over device buffers it returns before the kernels run, and the call's number
// goes to the engine's ledger until the input check has reported (async_calls.cu).
// Host buffers travel through the engine's pinned staging, which mirrors the host part of the
// scratch: the inputs go in one copy, the output and the check's record come back in two, and
// the call waits once. Copies from pageable memory would each block the thread for a staging
// round trip of the driver's, several times the kernels' time for a one-token step.

#include <algorithm>
#include <cstring>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/register_step.cuh"
#include "backends/cuda/runtime_status.h"
#include "backends/cuda/scratch_plan.h"

namespace lumen::cuda {

absl::StatusOr<AsyncCallId> CudaBackend::Run(const LayerSpec& spec, const LayerRun& run) {
  // Token runs of the register kernel, through the prefill's tables, where it takes the layer:
  // a tentative pass (read_only), a recurrent run of several tokens per session (a commit's
  // replay) and a prefill of short sequences; a replay on another layer is one-token steps.
  StepArgs probe;
  probe.layer = layers_.at(&spec);
  probe.state_bf16 = spec.state_dtype == DType::kBFloat16;
  const bool fits = RegisterStepFits(probe);
  if (run.read_only && !fits) {
    return LumenError(LUMEN_ERROR_UNSUPPORTED,
                      "tentative tokens on a GPU engine take the layers of its register step "
                      "kernel: fp32 state, key_dim 128, value_dim a multiple of 32, no "
                      "normaliser and the identity feature map");
  }
  const int32_t longest = LongestSequence(run);
  const bool several = !run.chunkwise && longest > 1;
  const bool token_run =
      fits && (run.read_only || several || (run.chunkwise && longest <= kMaxRunTokens));
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = UseDevice(); !status.ok()) return status;
  const lumen_layer_inputs& in = *run.inputs;
  const lumen_layer_output& out = *run.output;
  cudaStream_t stream = static_cast<cudaStream_t>(in.stream);
  const bool host_inputs = in.memory == LUMEN_MEMORY_HOST;
  const bool host_output = out.memory == LUMEN_MEMORY_HOST;
  const bool capturing = IsCapturing(stream);
  const int64_t T = run.num_tokens();
  const int64_t in_size = DTypeSize(static_cast<DType>(in.dtype));
  const int64_t out_size = DTypeSize(static_cast<DType>(out.dtype));
  const int64_t qk_bytes = T * spec.num_heads * spec.key_dim * in_size;
  const int64_t v_bytes = T * spec.num_value_heads * spec.value_dim * in_size;
  const int64_t g_bytes = T * spec.g_per_token() * in_size;
  const int64_t beta_bytes = spec.delta_rule() ? T * spec.num_value_heads * in_size : 0;
  const int64_t o_count = T * spec.num_value_heads * spec.value_dim;
  const bool host_io = host_inputs || host_output;
  if (host_io && capturing) {
    return LumenError(LUMEN_ERROR_UNSUPPORTED,
                      "a call with LUMEN_MEMORY_HOST buffers waits for its output, which a "
                      "captured stream cannot do: capture calls over device buffers");
  }
  // A call that synchronises reports its own input error: report an earlier one first.
  if (host_io && (unread_input_checks_ || captured_input_checks_)) {
    if (absl::Status status = WaitForLayerCalls(); !status.ok()) return status;
  }

  // Scratch: host inputs and output copied through the device, the convolution's results and
  // the prefill's arrays.
  ScratchLayout layout;
  int64_t q_at = -1, k_at = -1, v_at = -1, g_at = -1, beta_at = -1, o_at = -1;
  if (host_inputs) {
    q_at = layout.Add(qk_bytes);
    k_at = layout.Add(qk_bytes);
    v_at = layout.Add(v_bytes);
    if (g_bytes > 0) g_at = layout.Add(g_bytes);
    if (beta_bytes > 0) beta_at = layout.Add(beta_bytes);
  }
  const int64_t inputs_end = layout.total();
  if (host_output) o_at = layout.Add(o_count * out_size);
  const int64_t host_io_bytes = layout.total();
  char* staging = nullptr;
  if (host_io) {
    if (absl::Status s = EnsureStaging(host_io_bytes + sizeof(InputErrorRecord)); !s.ok()) {
      return s;
    }
    staging = static_cast<char*>(staging_);
  }
  const int64_t extras_bytes = PlanExtras(spec, run).total;
  const bool sequences = run.chunkwise || token_run;
  const int64_t prefill_bytes = sequences ? PlanPrefill(spec, run).total : 0;
  const int64_t scratch_bytes = host_io_bytes + extras_bytes + prefill_bytes;
  const bool uses_scratch = scratch_bytes > 0;
  if (uses_scratch) {
    if (absl::Status s = EnsureScratch(scratch_bytes, capturing); !s.ok()) {
      return s;
    }
    if (capturing) scratch_captured_ = true;
    // An earlier asynchronous call on another stream may still be reading the scratch.
    if (!capturing) {
      LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, scratch_free_, 0),
                                 "ordering the scratch");
    }
  }
  char* scratch = static_cast<char*>(scratch_);

  RawInputs inputs;
  inputs.dtype = static_cast<DType>(in.dtype);
  const uint64_t call = next_call_++ | (capturing ? kCapturedCall : 0);
  inputs.call = call;
  if (host_inputs) {
    struct Copy {
      const void* src;
      int64_t at, bytes;
      const void** dst;
    } copies[] = {{in.q, q_at, qk_bytes, &inputs.q},
                  {in.k, k_at, qk_bytes, &inputs.k},
                  {in.v, v_at, v_bytes, &inputs.v},
                  {in.g, g_at, g_bytes, &inputs.g},
                  {in.beta, beta_at, beta_bytes, &inputs.beta}};
    for (const Copy& copy : copies) {
      if (copy.at < 0) continue;
      std::memcpy(staging + copy.at, copy.src, copy.bytes);
      *copy.dst = scratch + copy.at;
    }
    LUMEN_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(scratch, staging, inputs_end, cudaMemcpyHostToDevice, stream),
        "copying inputs to the device");
  } else {
    inputs.q = in.q;
    inputs.k = in.k;
    inputs.v = in.v;
    inputs.g = in.g;
    inputs.beta = in.beta;
  }
  void* o = host_output ? scratch + o_at : out.o;

  char* extras = scratch + host_io_bytes;
  absl::Status status =
      sequences ? RunPrefill(spec, run, token_run, inputs, o, extras, extras + extras_bytes,
                             stream)
      : several ? RunStepByStep(spec, run, inputs, o, extras, stream)
                : RunSteps(spec, run, inputs, o, extras, stream);
  if (!status.ok()) return status;

  if (host_io) {
    const int64_t o_bytes = o_count * out_size;
    if (host_output) {
      LUMEN_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(staging + o_at, o, o_bytes, cudaMemcpyDeviceToHost, stream),
          "copying the output to the host");
    }
    auto* record = reinterpret_cast<InputErrorRecord*>(staging + host_io_bytes);
    LUMEN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(record, input_error_, sizeof(*record),
                                               cudaMemcpyDeviceToHost, stream),
                               "reading the input check's record");
    LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "running the layer call");
    // A failing call changed no state; its output is not copied back either.
    if (record->error != kNoInputError) {
      uint64_t failed_call = 0;
      return ReportInputError(*record, /*earlier=*/false, &failed_call);
    }
    if (host_output) std::memcpy(out.o, staging + o_at, o_bytes);
    return kFinishedCall;
  }
  unread_input_checks_ = true;
  if (capturing) {
    captured_input_checks_ = true;
    return kFinishedCall;  // replays run later; their failures are reported without a number
  }
  if (uses_scratch) {
    LUMEN_CUDA_RETURN_IF_ERROR(cudaEventRecord(scratch_free_, stream), "recording an event");
  }
  if (absl::Status tracked = TrackAsyncWork(stream); !tracked.ok()) return tracked;
  last_async_call_ = call;
  ++calls_since_probe_;
  AdvanceProbe();
  return call;
}

}  // namespace lumen::cuda
