#pragma once
// Creating the ROCm backend, for src/backend.cc. Plain C++: no HIP header, so the core
// compiles without the HIP toolchain's headers.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "src/backend.h"

namespace lumen::rocm {

// Whether AMD GPU `device` exists, the HIP runtime loads, and the GPU is one of the targets
// the library's kernels were built for. False, never an error, where any of that is missing.
bool RocmDevicePresent(int32_t device);

// The ROCm backend (the CUDA backend's sources compiled as HIP) on AMD GPU `device`;
// LUMEN_ERROR_UNSUPPORTED with a message when the HIP runtime is missing, there is no such
// device, or the kernels were not built for its target.
absl::StatusOr<std::unique_ptr<Backend>> CreateRocmBackend(int32_t device);

}  // namespace lumen::rocm
