#pragma once
// The GPU runtime's errors as lumen statuses, and the capture state of a stream: what every
// source of the CUDA backend (and of the ROCm backend, compiled from them) checks.

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "backends/cuda/gpu_compat.cuh"
#include "src/status.h"

namespace lumen::cuda {

// LUMEN_ERROR_BACKEND naming what was being done and the runtime's error.
inline absl::Status CudaError(cudaError_t error, const char* what) {
  return LumenError(LUMEN_ERROR_BACKEND,
                    absl::StrCat(LUMEN_GPU_RUNTIME_NAME " error while ", what, ": ",
                                 cudaGetErrorName(error), " (", cudaGetErrorString(error), ")"));
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
