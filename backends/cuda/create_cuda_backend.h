#pragma once
// Creating the CUDA backend, for src/backend.cc. Plain C++: no CUDA header, so the core
// compiles without the CUDA toolkit's headers.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "src/backend.h"

namespace lumen::cuda {

// Whether GPU `device` exists and a CUDA driver can run on it. False, never an error, on a
// machine without a GPU or driver.
bool CudaDevicePresent(int32_t device);

// The CUDA backend on GPU `device`; LUMEN_ERROR_UNSUPPORTED with a message when there is no
// such device or no driver.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int32_t device);

}  // namespace lumen::cuda
