#pragma once
// The CUDA backend: session states in a device pool, layer calls as kernels on the caller's
// stream. Included only by CUDA sources (src/ reaches it through create_cuda_backend.h).
// Its definitions, by concern: cuda_backend.cu (the factory, lifecycle, model parameters,
// state operations and scratch), async_calls.cu (what became of calls over device buffers),
// run_layer.cu (a layer call: copy in, dispatch, copy out), step_path.cu and prefill_path.cu
// (the kernels of each path), scratch_plan.{h,cu} (where a call's arrays sit).

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/cuda/gpu_compat.cuh"
#include "backends/cuda/kernels/input_check.cuh"
#include "backends/cuda/kernels/layer_math.cuh"
#include "backends/cuda/kernels/short_conv.cuh"
#include "backends/cuda/state_pool.h"
#include "src/backend.h"

namespace lumen::cuda {

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int32_t device);
  ~CudaBackend() override;
  // Selects the device and creates the backend's events; called once after construction.
  absl::Status Initialize();

  lumen_backend kind() const override { return LUMEN_GPU_BACKEND; }  // CUDA, or ROCm as HIP
  int32_t num_threads() const override { return 1; }
  bool Accepts(lumen_memory memory) const override {
    return memory == LUMEN_MEMORY_HOST || memory == LUMEN_MEMORY_DEVICE;
  }

  absl::Status LoadModel(const Model& model) override;

  absl::StatusOr<void*> AllocateState(int64_t bytes) override;
  void FreeState(void* block) override;
  absl::Status ZeroState(void* block, int64_t bytes) override;
  absl::Status CopyState(void* dst, const void* src, int64_t bytes) override;
  absl::Status StateToHost(void* host_dst, const void* src, int64_t bytes) override;
  absl::Status StateFromHost(void* dst, const void* host_src, int64_t bytes) override;
  // Kept inputs in device memory (tentative tokens): cudaMalloc, a copy on the caller's
  // stream, and a free after the device's work is done; host memory as the base class.
  absl::StatusOr<void*> AllocateBuffer(lumen_memory memory, int64_t bytes) override;
  void FreeBuffer(lumen_memory memory, void* buffer) override;
  absl::Status CopyBuffer(lumen_memory memory, void* dst, const void* src, int64_t bytes,
                          void* stream) override;

  absl::StatusOr<AsyncCallId> Run(const LayerSpec& spec, const LayerRun& run) override;
  bool has_async_calls() const override { return true; }
  AsyncCallReport TakeAsyncCallReport() override;

  absl::Status Reserve(const Model& model, int32_t max_sessions, int32_t max_tokens) override;
  int64_t scratch_bytes() const override { return scratch_bytes_.load(); }

 private:
  // Set in the number of a call made while its stream was captured: replays of it run later,
  // in an order the engine does not know, so it is never reported as an asynchronous call.
  static constexpr uint64_t kCapturedCall = uint64_t{1} << 63;
  // Asynchronous calls between two copies of the input check's record (AdvanceProbe): few
  // enough that the engine's ledger stays short, many enough that the copy costs nothing.
  static constexpr int32_t kProbeInterval = 64;

  // Makes the engine's device current for the calling thread.
  absl::Status UseDevice();
  // Waits for every asynchronous layer call made so far; reports a failed kernel, and an input
  // error one of those calls recorded (see TakeInputError).
  absl::Status WaitForLayerCalls();
  // Reads the input check's record after the work that may have written it has finished: an
  // error there becomes INVALID_ARGUMENT (the CPU's message; `earlier` says it belongs to an
  // asynchronous call before this one), the failing call's number goes to *failed_call (0
  // when none) and the record is emptied.
  absl::Status TakeInputError(bool earlier, uint64_t* failed_call);
  // TakeInputError's second half, for a record the caller has read: formats its error and
  // empties the device's record.
  absl::Status ReportInputError(const InputErrorRecord& record, bool earlier,
                                uint64_t* failed_call);
  // Learns, without waiting, that asynchronous calls have run: every kProbeInterval of them,
  // a copy of the record is enqueued (on probe_stream_, after every stream's work so far) into
  // pinned host memory; once it has landed and shows no error, the calls it covers go into the
  // report as settled.
  void AdvanceProbe();
  // Remembers that `stream` has asynchronous work of this engine.
  absl::Status TrackAsyncWork(cudaStream_t stream);

  // Makes scratch_ hold at least `bytes`; growing waits for scratch_free_ and reallocates.
  // While capturing, a call that needs more fails (UNSUPPORTED) instead.
  absl::Status EnsureScratch(int64_t bytes, bool capturing);
  // Makes staging_ hold at least `bytes`. Only calls with host buffers use it, and they wait
  // for their copies before returning, so nothing is in flight when it grows.
  absl::Status EnsureStaging(int64_t bytes);

  // `extras` is the scratch of the convolution and Mamba-2 passes (PlanExtras), `scratch` the
  // prefill's own.
  absl::Status RunSteps(const LayerSpec& spec, const LayerRun& run, const RawInputs& inputs,
                        void* o, char* extras, cudaStream_t stream);
  // `token_run`: the register kernel's token run instead of the chunkwise passes (Run decides).
  absl::Status RunPrefill(const LayerSpec& spec, const LayerRun& run, bool token_run,
                          const RawInputs& inputs, void* o, char* extras, char* scratch,
                          cudaStream_t stream);
  // A recurrent run of several tokens per session (a commit's replay) on a layer the register
  // kernel does not take: each session's tokens as one-token steps, in order, through the
  // step's own kernels, so that the results are a step's bit for bit. Its inputs have passed
  // the check before (as tentative tokens): a failing value would be reported as the first
  // token of a one-session call.
  absl::Status RunStepByStep(const LayerSpec& spec, const LayerRun& run,
                             const RawInputs& inputs, void* o, char* extras,
                             cudaStream_t stream);

  const int32_t device_;
  bool dependent_launch_ = false;  // sm_90 or newer: steps overlap the input check
  // The device's multiprocessors and shared memory per multiprocessor (StepArgs).
  int32_t multiprocessors_ = 0;
  int64_t shared_bytes_per_multiprocessor_ = 0;
  std::mutex mutex_;  // one call at a time owns the pool and the scratch
  StatePool pool_;

  std::unordered_map<const LayerSpec*, LayerConfig> layers_;  // set once by LoadModel
  // Layers with a short convolution or Mamba-2's extras (set once by LoadModel).
  std::unordered_map<const LayerSpec*, ConvLayer> conv_layers_;
  void* parameters_ = nullptr;  // device copies of every layer's parameter arrays

  void* scratch_ = nullptr;  // device scratch of calls with host buffers and of prefills
  std::atomic<int64_t> scratch_bytes_{0};  // read without the mutex by scratch_bytes()
  cudaEvent_t scratch_free_ = nullptr;  // recorded after the last asynchronous use
  bool scratch_captured_ = false;        // a graph captured a call using scratch_
  std::vector<void*> retired_scratch_;   // outgrown buffers that captured graphs may use
  // Pinned host memory laid out as the host part of the scratch, then the check's record:
  // where calls with host buffers gather their inputs and receive their output.
  void* staging_ = nullptr;
  int64_t staging_bytes_ = 0;


  std::vector<std::pair<cudaStream_t, cudaEvent_t>> pending_;  // streams with async work

  InputErrorRecord* input_error_ = nullptr;  // device memory: the input check's record
  // Numbers of layer calls (RawInputs::call), in call order; a captured call's has
  // kCapturedCall.
  uint64_t next_call_ = 1;
  AsyncCallId last_async_call_ = kFinishedCall;  // the newest call Run returned unfinished
  int32_t calls_since_probe_ = 0;  // asynchronous calls since the last probe was enqueued
  AsyncCallReport report_;         // what TakeAsyncCallReport hands over next
  cudaStream_t probe_stream_ = nullptr;    // where AdvanceProbe's copies run
  // Where the engine's own fills and copies run (state operations, the pool, the record):
  // non-blocking, so they never wait for the legacy default stream, and waited for alone.
  cudaStream_t state_stream_ = nullptr;
  InputErrorRecord* probe_copy_ = nullptr;  // pinned host memory
  cudaEvent_t probe_done_ = nullptr;
  uint64_t probe_through_ = 0;  // the newest call the probe in flight covers; 0: none
  bool unread_input_checks_ = false;  // asynchronous checked calls since the record was read
  bool captured_input_checks_ = false;  // a checked call was captured: replays may fail later
};

}  // namespace lumen::cuda
