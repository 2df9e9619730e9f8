// What became of the layer calls over device buffers: they return before they run, so their
// input check's verdict arrives later. The engine keeps the ledger of their tokens; this
// side waits for the device, reads the check's record and reports which calls have run and
// which changed nothing (TakeAsyncCallReport).

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/runtime_status.h"
#include "src/input_domain.h"
#include "src/input_domain_error.h"

namespace lumen::cuda {

absl::Status CudaBackend::WaitForLayerCalls() {
  for (auto& [stream, event] : pending_) {
    LUMEN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(event), "running an earlier layer call");
    cudaEventDestroy(event);
  }
  pending_.clear();
  if (probe_through_ != 0) {
    // Its copy may land after the record is emptied below: let it land first.
    LUMEN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(probe_done_), "copying the record");
    probe_through_ = 0;
  }
  if (!unread_input_checks_ && !captured_input_checks_) {
    report_.settled_through = last_async_call_;  // nothing checked since: nothing failed
    return absl::OkStatus();
  }
  // Graph replays are not tracked: the header asks the caller to synchronize a replay's
  // stream before such a call, so the record already holds what the replays found.
  unread_input_checks_ = false;
  uint64_t failed_call = 0;
  absl::Status status = TakeInputError(/*earlier=*/true, &failed_call);
  if (failed_call != 0 && (failed_call & kCapturedCall) == 0) {
    report_.failed.emplace_back(failed_call, last_async_call_);
  }
  report_.settled_through = last_async_call_;
  if (failed_call == 0) return status;
  return absl::InvalidArgumentError(absl::StrCat(
      status.message(),
      (failed_call & kCapturedCall) != 0
          ? " (the failing call was replayed from a graph: no token count was changed)"
          : " (the sessions' token counts no longer include those calls' tokens)"));
}

void CudaBackend::AdvanceProbe() {
  if (probe_through_ != 0) {
    const cudaError_t landed = cudaEventQuery(probe_done_);
    if (landed == cudaErrorNotReady) return;
    if (landed == cudaSuccess && probe_copy_->error == kNoInputError) {
      report_.settled_through = std::max(report_.settled_through, probe_through_);
    }
    // A failed copy or a recorded error: the calls wait for the next full report.
    if (landed != cudaSuccess) cudaGetLastError();
    probe_through_ = 0;
  }
  if (calls_since_probe_ < kProbeInterval) return;
  bool enqueued = true;
  for (auto& [stream, event] : pending_) {
    enqueued = enqueued && cudaStreamWaitEvent(probe_stream_, event, 0) == cudaSuccess;
  }
  enqueued = enqueued &&
             cudaMemcpyAsync(probe_copy_, input_error_, sizeof(InputErrorRecord),
                             cudaMemcpyDeviceToHost, probe_stream_) == cudaSuccess &&
             cudaEventRecord(probe_done_, probe_stream_) == cudaSuccess;
  if (!enqueued) {
    cudaGetLastError();  // try again after the next call
    return;
  }
  probe_through_ = last_async_call_;
  calls_since_probe_ = 0;
}

absl::Status CudaBackend::TakeInputError(bool earlier, uint64_t* failed_call) {
  *failed_call = 0;
  InputErrorRecord record;
  LUMEN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&record, input_error_, sizeof(record),
                                             cudaMemcpyDeviceToHost, state_stream_),
                             "reading the input check's record");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(state_stream_),
                             "reading the input check's record");
  return ReportInputError(record, earlier, failed_call);
}

absl::Status CudaBackend::ReportInputError(const InputErrorRecord& record, bool earlier,
                                           uint64_t* failed_call) {
  *failed_call = 0;
  if (record.error == kNoInputError) return absl::OkStatus();
  *failed_call = record.call;
  LUMEN_CUDA_RETURN_IF_ERROR(ClearInputErrorRecord(input_error_, state_stream_),
                             "clearing the input check's record");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(state_stream_),
                             "clearing the input check's record");
  static constexpr const char* kTensors[] = {"q", "k", "g", "v", "beta"};
  static constexpr InputDomain kDomains[] = {kFiniteValues, kLogGateValues, kUnitValues,
                                             kDoubleUnitValues};
  const absl::Status status = InputOutOfDomain(
      kTensors[record.error >> kInputIndexBits], kDomains[record.domain], record.value,
      static_cast<int64_t>(record.error & ((1ull << kInputIndexBits) - 1)), record.heads,
      record.per_head, record.session, record.session_token, record.num_sessions);
  if (!earlier) return status;
  return absl::InvalidArgumentError(absl::StrCat(
      "a layer call on device buffers enqueued before this call failed its input check (",
      status.message(), "); the layer calls enqueued after it until this report changed "
      "nothing either, and this call did nothing"));
}

absl::Status CudaBackend::TrackAsyncWork(cudaStream_t stream) {
  for (auto& [known, event] : pending_) {
    if (known == stream) {
      LUMEN_CUDA_RETURN_IF_ERROR(cudaEventRecord(event, stream), "recording an event");
      return absl::OkStatus();
    }
  }
  cudaEvent_t event = nullptr;
  LUMEN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                             "creating an event");
  pending_.emplace_back(stream, event);
  LUMEN_CUDA_RETURN_IF_ERROR(cudaEventRecord(event, stream), "recording an event");
  return absl::OkStatus();
}

AsyncCallReport CudaBackend::TakeAsyncCallReport() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(report_, AsyncCallReport{});
}

}  // namespace lumen::cuda
