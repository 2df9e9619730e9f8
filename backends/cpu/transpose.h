#pragma once
// Transposed copies of the chunkwise form's operands (keys as [K, C], so that Q K^T and
// K^T U run as plain row-major products). Blocks of 8 x 8 move through registers in three
// rounds of `__builtin_shufflevector` (GCC 12 and clang alike: AVX2 and AVX-512 builds get
// vunpck/vshuf/vperm2f128, baseline and NEON builds pairs of 128-bit shuffles); a plain loop
// takes the edges. A scalar scatter of the same copy wrote one float per store, 8 to 16 times
// the instructions.

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernel_targets.h"

namespace lumen::cpu {
// This SIMD level's copy (kernel_targets.h).
inline namespace LUMEN_KERNEL_NAMESPACE {

// dst[j, i] = src[i, j] for i < rows, j < cols; leading dimensions in floats.
inline void Transpose(int32_t rows, int32_t cols, const float* src, int64_t lds, float* dst,
                      int64_t ldd) {
  typedef float Vec8 __attribute__((vector_size(32)));
  int32_t i = 0;
  for (; i + 8 <= rows; i += 8) {
    int32_t j = 0;
    for (; j + 8 <= cols; j += 8) {
      Vec8 r[8];
      for (int32_t x = 0; x < 8; ++x) std::memcpy(&r[x], src + (i + x) * lds + j, sizeof(Vec8));
      // Round 1: pairs of rows interleaved; round 2: quadruples; round 3: 128-bit halves.
      Vec8 t[8];
      for (int32_t x = 0; x < 8; x += 2) {
        t[x] = __builtin_shufflevector(r[x], r[x + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[x + 1] = __builtin_shufflevector(r[x], r[x + 1], 2, 10, 3, 11, 6, 14, 7, 15);
      }
      Vec8 u[8];
      for (int32_t x = 0; x < 8; x += 4) {
        u[x] = __builtin_shufflevector(t[x], t[x + 2], 0, 1, 8, 9, 4, 5, 12, 13);
        u[x + 1] = __builtin_shufflevector(t[x], t[x + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        u[x + 2] = __builtin_shufflevector(t[x + 1], t[x + 3], 0, 1, 8, 9, 4, 5, 12, 13);
        u[x + 3] = __builtin_shufflevector(t[x + 1], t[x + 3], 2, 3, 10, 11, 6, 7, 14, 15);
      }
      for (int32_t x = 0; x < 4; ++x) {
        const Vec8 low = __builtin_shufflevector(u[x], u[x + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        const Vec8 high = __builtin_shufflevector(u[x], u[x + 4], 4, 5, 6, 7, 12, 13, 14, 15);
        std::memcpy(dst + (j + x) * ldd + i, &low, sizeof(Vec8));
        std::memcpy(dst + (j + x + 4) * ldd + i, &high, sizeof(Vec8));
      }
    }
    for (; j < cols; ++j) {
      for (int32_t x = 0; x < 8; ++x) dst[j * ldd + i + x] = src[(i + x) * lds + j];
    }
  }
  for (; i < rows; ++i) {
    for (int32_t j = 0; j < cols; ++j) dst[j * ldd + i] = src[i * lds + j];
  }
}

}  // namespace LUMEN_KERNEL_NAMESPACE
}  // namespace lumen::cpu
