#pragma once
// Tiny row-major fp32 matrix helpers for the chunkwise form. Sizes are at most a chunk
// (64) by a head width, so plain loops that GCC vectorises beat a BLAS call. The loops
// run i-p-j with the innermost index contiguous, or as dot products whose reduction
// `#pragma omp simd` is allowed to reorder (-fopenmp-simd, no -ffast-math needed).

#include <cstdint>

namespace lumen::cpu {

// Partial sums kept in independent lanes: GCC vectorises this fixed-width loop even where
// it does not vectorise a `#pragma omp simd reduction` (it left the inlined reduction scalar
// in the chunkwise kernel, where dot products took half the time).
inline constexpr int32_t kDotLanes = 16;

inline float Dot(const float* x, const float* y, int32_t n) {
  float lanes[kDotLanes] = {};
  int32_t i = 0;
  for (; i + kDotLanes <= n; i += kDotLanes) {
    for (int32_t j = 0; j < kDotLanes; ++j) lanes[j] += x[i + j] * y[i + j];
  }
  float sum = 0.0f;
  for (int32_t j = 0; j < kDotLanes; ++j) sum += lanes[j];
  for (; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

// y[0:n] += alpha * x[0:n]
inline void Axpy(int32_t n, float alpha, const float* x, float* y) {
#pragma omp simd
  for (int32_t j = 0; j < n; ++j) y[j] += alpha * x[j];
}

// Columns of c kept in registers while a row of a streams past: one load of b per
// multiply-add instead of reloading and storing c for every term.
inline constexpr int32_t kMatMulTile = 16;

// c_row[0:n] += a_row[0:p] b[p, n], tile by tile.
inline void RowMatMulAdd(int32_t n, int32_t p, const float* a_row, const float* b,
                         int64_t ldb, float* c_row) {
  int32_t j0 = 0;
  for (; j0 + kMatMulTile <= n; j0 += kMatMulTile) {
    float acc[kMatMulTile];
    for (int32_t j = 0; j < kMatMulTile; ++j) acc[j] = c_row[j0 + j];
    for (int32_t r = 0; r < p; ++r) {
      const float a = a_row[r];
      const float* b_row = b + r * ldb + j0;
#pragma omp simd
      for (int32_t j = 0; j < kMatMulTile; ++j) acc[j] += a * b_row[j];
    }
    for (int32_t j = 0; j < kMatMulTile; ++j) c_row[j0 + j] = acc[j];
  }
  if (j0 < n) {
    for (int32_t r = 0; r < p; ++r) Axpy(n - j0, a_row[r], b + r * ldb + j0, c_row + j0);
  }
}

// Rows of c computed together: each load of b feeds this many multiply-adds, which keeps
// the products from waiting on loads (4 x kMatMulTile accumulators fit the registers).
inline constexpr int32_t kMatMulRows = 4;

// c[kMatMulRows, n] += a[kMatMulRows, p] b[p, n].
inline void RowsMatMulAdd(int32_t n, int32_t p, const float* a, int64_t lda, const float* b,
                          int64_t ldb, float* c, int64_t ldc) {
  int32_t j0 = 0;
  for (; j0 + kMatMulTile <= n; j0 += kMatMulTile) {
    float acc[kMatMulRows][kMatMulTile];
    for (int32_t r = 0; r < kMatMulRows; ++r) {
      for (int32_t j = 0; j < kMatMulTile; ++j) acc[r][j] = c[r * ldc + j0 + j];
    }
    for (int32_t q = 0; q < p; ++q) {
      const float* b_row = b + q * ldb + j0;
      for (int32_t r = 0; r < kMatMulRows; ++r) {
        const float a_rq = a[r * lda + q];
#pragma omp simd
        for (int32_t j = 0; j < kMatMulTile; ++j) acc[r][j] += a_rq * b_row[j];
      }
    }
    for (int32_t r = 0; r < kMatMulRows; ++r) {
      for (int32_t j = 0; j < kMatMulTile; ++j) c[r * ldc + j0 + j] = acc[r][j];
    }
  }
  if (j0 < n) {
    for (int32_t r = 0; r < kMatMulRows; ++r) {
      for (int32_t q = 0; q < p; ++q) {
        Axpy(n - j0, a[r * lda + q], b + q * ldb + j0, c + r * ldc + j0);
      }
    }
  }
}

// c[m, n] += a[m, p] b[p, n]; leading dimensions in floats.
inline void MatMulAdd(int32_t m, int32_t n, int32_t p, const float* a, int64_t lda,
                      const float* b, int64_t ldb, float* c, int64_t ldc) {
  int32_t i = 0;
  for (; i + kMatMulRows <= m; i += kMatMulRows) {
    RowsMatMulAdd(n, p, a + i * lda, lda, b, ldb, c + i * ldc, ldc);
  }
  for (; i < m; ++i) RowMatMulAdd(n, p, a + i * lda, b, ldb, c + i * ldc);
}

// c[m, n] += tril(a)[m, m] b[m, n]: row i of c reads rows 0..i of b (diagonal included).
inline void LowerMatMulAdd(int32_t m, int32_t n, const float* a, int64_t lda,
                           const float* b, int64_t ldb, float* c, int64_t ldc) {
  for (int32_t i = 0; i < m; ++i) RowMatMulAdd(n, i + 1, a + i * lda, b, ldb, c + i * ldc);
}

}  // namespace lumen::cpu
