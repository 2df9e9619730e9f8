#pragma once
// The loops vector_math_test.cc measures, written the kernels' way (`omp simd`) and built at
// each SIMD level as the kernels are (backends/cpu/kernel_targets.h), so that each level's
// vectorised code is what is measured.

#include <cstdint>

#include "backends/cpu/kernel_targets.h"

namespace lumen::cpu::vector_math_test {

struct VectorMathLoops {
  void (*exp)(const float* x, int64_t n, float* out);
  void (*exp_above_floor)(const float* x, int64_t n, float floor, float* out);
  void (*softplus)(const float* x, int64_t n, float* out);
  void (*log1p_unit)(const float* x, int64_t n, float* out);
};

// The loops of the level this file is compiled at (vector_math_loops.cc).
inline namespace LUMEN_KERNEL_NAMESPACE {
extern const VectorMathLoops kLevelLoops;
}

}  // namespace lumen::cpu::vector_math_test
