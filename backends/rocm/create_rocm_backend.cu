// The ROCm backend's factory: what differs from CUDA's is how a usable device is recognised
// (the HIP runtime is loaded at run time, and a GPU is usable when the library carries code
// for its target). The backend itself is the CUDA backend's class, compiled as HIP.

#include "backends/rocm/create_rocm_backend.h"

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/rocm/hip_runtime_loader.h"
#include "src/status.h"

namespace lumen::rocm {
namespace {

// The targets the kernels were compiled for, comma-separated (LUMEN_HIP_ARCHITECTURES).
constexpr std::string_view kBuiltTargets = LUMEN_HIP_TARGETS;

bool Built(std::string_view target) {
  std::string_view rest = kBuiltTargets;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    if (rest.substr(0, comma) == target) return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}

// OK when the backend can run on `device`, else why not (LUMEN_ERROR_UNSUPPORTED).
absl::Status CheckDevice(int32_t device) {
  std::string error;
  if (!LoadHipRuntime(&error)) {
    return LumenError(LUMEN_ERROR_UNSUPPORTED, absl::StrCat("the ROCm backend cannot run: ", error));
  }
  int count = 0;
  if (const hipError_t status = hipGetDeviceCount(&count); status != hipSuccess) {
    (void)hipGetLastError();
    return LumenError(LUMEN_ERROR_UNSUPPORTED, absl::StrCat("no ROCm device is usable: ",
                                                            hipGetErrorString(status)));
  }
  if (device < 0 || device >= count) {
    return LumenError(LUMEN_ERROR_UNSUPPORTED,
                      absl::StrCat("no ROCm device ", device, ": this machine has ", count));
  }
  hipDeviceProp_t properties;
  if (const hipError_t status = hipGetDeviceProperties(&properties, device);
      status != hipSuccess) {
    (void)hipGetLastError();
    return LumenError(LUMEN_ERROR_UNSUPPORTED,
                      absl::StrCat("cannot query ROCm device ", device, ": ",
                                   hipGetErrorString(status)));
  }
  // "gfx90a:sramecc+:xnack-" names target gfx90a with its features.
  const std::string_view name = properties.gcnArchName;
  const std::string_view target = name.substr(0, name.find(':'));
  if (!Built(target)) {
    return LumenError(LUMEN_ERROR_UNSUPPORTED,
                      absl::StrCat("ROCm device ", device, " is ", std::string(target),
                                   "; this library's kernels are built for ",
                                   std::string(kBuiltTargets),
                                   " (CMake option LUMEN_HIP_ARCHITECTURES)"));
  }
  return absl::OkStatus();
}

}  // namespace

bool RocmDevicePresent(int32_t device) { return CheckDevice(device).ok(); }

absl::StatusOr<std::unique_ptr<Backend>> CreateRocmBackend(int32_t device) {
  if (absl::Status status = CheckDevice(device); !status.ok()) return status;
  auto backend = std::make_unique<CudaBackend>(device);
  if (absl::Status status = backend->Initialize(); !status.ok()) return status;
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace lumen::rocm
