#include "tests/backends/cuda/spin_kernel.h"

namespace lumen_test {
namespace {

__device__ uint64_t GlobalNanoseconds() {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

__global__ void SpinUntilFlag(const volatile int* flag, uint64_t timeout_ns) {
  const uint64_t start = GlobalNanoseconds();
  while (*flag == 0 && GlobalNanoseconds() - start < timeout_ns) {
    __nanosleep(1000);
  }
}

}  // namespace

cudaError_t LaunchSpinUntilFlag(const volatile int* flag, uint64_t timeout_ns,
                                cudaStream_t stream) {
  SpinUntilFlag<<<1, 1, 0, stream>>>(flag, timeout_ns);
  return cudaGetLastError();
}

}  // namespace lumen_test
