#include "src/backend.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/cpu/create_cpu_backend.h"
#ifdef LUMEN_WITH_CUDA
#include "backends/cuda/create_cuda_backend.h"
#endif
#ifdef LUMEN_WITH_ROCM
#include "backends/rocm/create_rocm_backend.h"
#endif

namespace lumen {

absl::StatusOr<void*> Backend::AllocateBuffer(lumen_memory memory, int64_t bytes) {
  if (memory != LUMEN_MEMORY_HOST) {
    return absl::UnimplementedError(
        "this backend cannot keep inputs in device memory (tentative tokens)");
  }
  void* buffer = std::malloc(static_cast<size_t>(bytes > 0 ? bytes : 1));
  if (buffer == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes for a session's kept inputs"));
  }
  return buffer;
}

void Backend::FreeBuffer(lumen_memory /*memory*/, void* buffer) { std::free(buffer); }

absl::Status Backend::CopyBuffer(lumen_memory memory, void* dst, const void* src,
                                 int64_t bytes, void* /*stream*/) {
  if (memory != LUMEN_MEMORY_HOST) {
    return absl::UnimplementedError(
        "this backend cannot copy inputs in device memory (tentative tokens)");
  }
  if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const lumen_engine_options& options) {
  constexpr int32_t kMaxThreads = 1024;
  if (options.num_threads < 0 || options.num_threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat("num_threads is ", options.num_threads,
                                                   ", must be in [0, ", kMaxThreads,
                                                   "] (0 = all cores)"));
  }
  switch (options.backend) {
    case LUMEN_BACKEND_AUTO:
#ifdef LUMEN_WITH_CUDA
      if (cuda::CudaDevicePresent(options.device)) return cuda::CreateCudaBackend(options.device);
#endif
#ifdef LUMEN_WITH_ROCM
      if (rocm::RocmDevicePresent(options.device)) return rocm::CreateRocmBackend(options.device);
#endif
      [[fallthrough]];
    case LUMEN_BACKEND_CPU:
      return cpu::CreateCpuBackend(options.num_threads);
    case LUMEN_BACKEND_CUDA:
#ifdef LUMEN_WITH_CUDA
      return cuda::CreateCudaBackend(options.device);
#else
      return absl::UnimplementedError("this build of lumen has no CUDA backend");
#endif
    case LUMEN_BACKEND_ROCM:
#ifdef LUMEN_WITH_ROCM
      return rocm::CreateRocmBackend(options.device);
#else
      return absl::UnimplementedError("this build of lumen has no ROCm backend");
#endif
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown backend ", options.backend, " (expected a lumen_backend value)"));
  }
}

}  // namespace lumen
