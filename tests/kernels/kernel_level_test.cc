// The kernels' SIMD level (kernel_targets.h): what the CPU runs, the cap LUMEN_CPU_MAX_LEVEL
// puts on it (the *_at_avx2 and *_at_baseline suites set it to run the narrower builds on a
// wider CPU), and the table each level's build fills.

#include <cstdlib>

#include <catch2/catch.hpp>

#include "backends/cpu/kernel_table.h"
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
  CHECK(CpuKernelLevel() <= CpuSimdLevel());
  CHECK(&Kernels() == KernelsAt(CpuKernelLevel()));
}

TEST_CASE("each level the CPU runs has a full table of its own") {
  const KernelTable* baseline = KernelsAt(KernelLevel::kBaseline);
  REQUIRE(baseline != nullptr);
  for (KernelLevel level : {KernelLevel::kBaseline, KernelLevel::kAvx2, KernelLevel::kAvx512}) {
    const KernelTable* table = KernelsAt(level);
    CAPTURE(static_cast<int>(level));
#if LUMEN_KERNEL_LEVELS_X86
    REQUIRE(table != nullptr);
#else
    if (level != KernelLevel::kBaseline) CHECK(table == nullptr);
    if (table == nullptr) continue;
#endif
    CHECK(table->run_recurrent != nullptr);
    CHECK(table->apply_held_write != nullptr);
    CHECK(table->run_chunkwise != nullptr);
    CHECK(table->convolve_channels != nullptr);
    CHECK(table->scan_for_out_of_domain != nullptr);
    CHECK(table->scan_half_for_out_of_domain != nullptr);
    CHECK(table->prepare_head_inputs != nullptr);
    // Each level's own build, not the baseline's under another name.
    if (level != KernelLevel::kBaseline) CHECK(table->run_chunkwise != baseline->run_chunkwise);
  }
}

}  // namespace
}  // namespace lumen::cpu
