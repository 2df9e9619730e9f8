#pragma once
// Creating the CPU backend, for src/backend.cc: the one name the core needs from backends/cpu,
// so that the core never sees the kernels' headers.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "src/backend.h"

namespace lumen::cpu {

// The CPU backend on `num_threads` threads, the caller's included (0: one per core);
// RESOURCE_EXHAUSTED when its threads cannot start.
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(int32_t num_threads);

}  // namespace lumen::cpu
