// LUMEN_CPU_MAX_LEVEL: the cap on the SIMD level of the CPU kernels (kernel_targets.h), which
// the *_at_avx2 and *_at_baseline suites set to run the narrower builds on a wider CPU.

#include <cstdlib>

#include <catch2/catch.hpp>

#include "backends/cpu/kernel_targets.h"

namespace lumen::cpu {
namespace {

TEST_CASE("LUMEN_CPU_MAX_LEVEL names a cap, and anything else is none") {
  CHECK(MaxKernelLevelFromEnvironment("baseline") == KernelLevel::kBaseline);
  CHECK(MaxKernelLevelFromEnvironment("avx2") == KernelLevel::kAvx2);
  CHECK(MaxKernelLevelFromEnvironment("avx512") == KernelLevel::kAvx512);
  CHECK(MaxKernelLevelFromEnvironment("AVX2") == KernelLevel::kAvx512);
  CHECK(MaxKernelLevelFromEnvironment("") == KernelLevel::kAvx512);
  CHECK(MaxKernelLevelFromEnvironment(nullptr) == KernelLevel::kAvx512);
}

TEST_CASE("the kernels run at or below the level LUMEN_CPU_MAX_LEVEL allows") {
  const KernelLevel cap = MaxKernelLevelFromEnvironment(std::getenv("LUMEN_CPU_MAX_LEVEL"));
  CHECK(CpuKernelLevel() <= cap);
}

}  // namespace
}  // namespace lumen::cpu
