#pragma once
// The GPU runtime's errors as lumen statuses, and the capture state of a stream: what every
// source of the CUDA backend (and of the ROCm backend, compiled from them) checks.

#include <atomic>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "backends/cuda/gpu_compat.cuh"
#include "src/status.h"

namespace lumen::cuda {

// Whether `error` is one the runtime documents as leaving the process's GPU context unusable
// ("the process must be terminated and relaunched"): a kernel's fault, an assertion, a
// hardware error. Every later call of the runtime in the process then fails the same way.
// By number, the same in CUDA and HIP, so that runtimes without the newer names compile.
inline bool IsContextLost(cudaError_t error) {
  switch (static_cast<int>(error)) {
    case 700:  // IllegalAddress
    case 702:  // LaunchTimeout
    case 710:  // Assert
    case 714:  // HardwareStackError
    case 715:  // IllegalInstruction
    case 716:  // MisalignedAddress
    case 717:  // InvalidAddressSpace
    case 718:  // InvalidPc
    case 719:  // LaunchFailure
    case 721:  // TensorMemoryLeak
    case 226:  // Contained
    case 810:  // MpsClientTerminated
    case 911:  // ExternalDevice
      return true;
    default:
      return false;
  }
}

// The error that lost each device's context in this process (0: none seen), so that every
// later call of every engine on that device says so first, whatever runtime call it would
// have failed in (some, such as a capture query, would otherwise answer misleadingly).
inline constexpr int kMostDevices = 64;
inline std::atomic<int> lost_context_errors[kMostDevices];

// What a call says once the device's context is lost.
inline std::string ContextLostMessage(cudaError_t error) {
  return absl::StrCat("the " LUMEN_GPU_RUNTIME_NAME " context of this process is lost (",
                      cudaGetErrorName(error), ": ", cudaGetErrorString(error),
                      "): every later GPU call of the process fails, and only a new process "
                      "recovers. A kernel faults this way on memory it cannot read, e.g. a "
                      "LUMEN_MEMORY_DEVICE buffer that the driver sees as part of a larger "
                      "allocation (a pooling allocator's) but that is too small or freed, or "
                      "any bad buffer of an engine made with skip_device_buffer_check");
}

// LUMEN_ERROR_BACKEND naming what was being done and the runtime's error; an error that lost
// the context is remembered for its device (the current one) and says so.
inline absl::Status CudaError(cudaError_t error, const char* what) {
  if (IsContextLost(error)) {
    int device = -1;
    if (cudaGetDevice(&device) == cudaSuccess && device >= 0 && device < kMostDevices) {
      int none = 0;
      lost_context_errors[device].compare_exchange_strong(none, static_cast<int>(error));
    }
    return LumenError(LUMEN_ERROR_BACKEND, absl::StrCat(LUMEN_GPU_RUNTIME_NAME " error while ",
                                                        what, ": ", ContextLostMessage(error)));
  }
  return LumenError(LUMEN_ERROR_BACKEND,
                    absl::StrCat(LUMEN_GPU_RUNTIME_NAME " error while ", what, ": ",
                                 cudaGetErrorName(error), " (", cudaGetErrorString(error), ")"));
}

// LUMEN_ERROR_BACKEND when an earlier call found `device`'s context lost.
inline absl::Status CheckContextNotLost(int32_t device) {
  if (device < 0 || device >= kMostDevices) return absl::OkStatus();
  const int lost = lost_context_errors[device].load(std::memory_order_relaxed);
  if (lost == 0) return absl::OkStatus();
  return LumenError(LUMEN_ERROR_BACKEND,
                    absl::StrCat("GPU ", device, ": ",
                                 ContextLostMessage(static_cast<cudaError_t>(lost))));
}

#define LUMEN_CUDA_RETURN_IF_ERROR(call, what)                        \
  do {                                                                \
    if (cudaError_t lumen_error_ = (call); lumen_error_ != cudaSuccess) \
      return ::lumen::cuda::CudaError(lumen_error_, what);            \
  } while (0)

// Whether `stream` is being captured into a graph (work must then not wait or allocate).
inline bool IsCapturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();  // the legacy stream while another captures: treat it as captured
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

// For its lifetime, lets the calling thread make the runtime calls that another thread's
// capture in cudaStreamCaptureModeGlobal forbids (an allocation, a free, a synchronous copy):
// otherwise such a call fails and invalidates that capture. A thread-local mode, as PyTorch's
// allocator sets it; the previous mode comes back at the end of the scope.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace lumen::cuda
