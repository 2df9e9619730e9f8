#pragma once
// A caller's long-running kernel, for tests that check that lumen does not wait for work that
// is not its own.

#include <cstdint>

#include <cuda_runtime.h>

namespace lumen_test {

// Enqueues one thread on `stream` that spins until *flag (host memory mapped for the device)
// is non-zero or `timeout_ns` nanoseconds have passed, so that a test that goes wrong ends.
cudaError_t LaunchSpinUntilFlag(const volatile int* flag, uint64_t timeout_ns,
                                cudaStream_t stream);

}  // namespace lumen_test
