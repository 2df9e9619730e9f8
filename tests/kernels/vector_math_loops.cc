// vector_math.h's functions over arrays, built once per SIMD level (vector_math_loops.h).

#include "tests/kernels/vector_math_loops.h"

#include "backends/cpu/vector_math.h"

namespace lumen::cpu::vector_math_test {
namespace {

void ExpAll(const float* x, int64_t n, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = VectorExp(x[i]);
}

void ExpAboveFloorAll(const float* x, int64_t n, float floor, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = ExpAboveFloor(x[i], floor);
}

void SoftplusAll(const float* x, int64_t n, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = VectorSoftplus(x[i]);
}

void Log1pUnitAll(const float* x, int64_t n, float* out) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = Log1pUnit(x[i]);
}

}  // namespace

inline namespace LUMEN_KERNEL_NAMESPACE {
extern const VectorMathLoops kLevelLoops = {ExpAll, ExpAboveFloorAll, SoftplusAll,
                                            Log1pUnitAll};
}

}  // namespace lumen::cpu::vector_math_test
