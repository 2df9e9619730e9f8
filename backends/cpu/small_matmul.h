#pragma once
// Row-major fp32 matrix products for the chunkwise form, register-blocked. Sizes are at most
// a chunk (32) by a head width, all in L1/L2, so the products run from cache: the speed is in
// keeping enough independent accumulators in registers that every cycle issues its
// multiply-adds. A tile of Rows x (Vectors * Width) floats of C is summed in registers while
// the rows of B stream past, one broadcast of A per row and multiply-add row; the tile's size
// follows the SIMD level it is compiled for (MatMulShape), so each kernel build picks its own.
// GCC vector extensions lower to whatever the target has (SSE, AVX2, AVX-512, NEON); GCC
// contracts the multiply and add into an FMA where the target has one.

#include <cstdint>
#include <cstring>

namespace lumen::cpu {

// A tile shape: rows of C, vectors per row, floats per vector.
template <int32_t kRowsArg, int32_t kVectorsArg, int32_t kWidthArg>
struct MatMulShape {
  static constexpr int32_t kRows = kRowsArg;
  static constexpr int32_t kVectors = kVectorsArg;
  static constexpr int32_t kWidth = kWidthArg;
};

// AVX-512 (32 registers of 16 floats): 8 x 32 floats, 16 accumulators, 2 loads of B and 8
// broadcasts per 16 multiply-adds. 8 rows divide the chunk (32) and the head widths.
using Avx512Shape = MatMulShape<8, 2, 16>;
// AVX2 (16 registers of 8 floats): 6 x 16, 12 accumulators + 2 of B + 1 broadcast.
using Avx2Shape = MatMulShape<6, 2, 8>;
// 128-bit vectors (SSE2: 16 registers; NEON: 32): 4 x 8, 8 accumulators.
using Vector128Shape = MatMulShape<4, 2, 4>;

template <int32_t kWidth>
struct FloatVector;
template <>
struct FloatVector<4> {
  typedef float Type __attribute__((vector_size(16)));
};
template <>
struct FloatVector<8> {
  typedef float Type __attribute__((vector_size(32)));
};
template <>
struct FloatVector<16> {
  typedef float Type __attribute__((vector_size(64)));
};

// Where A's element (r, q) lies: a[r * lda + q] (rows), or a[q * lda + r] (A given as its
// transpose, [p, m]: a product that needs A^T of a row-major matrix reads it in place instead
// of transposing it first; the tile's broadcasts then come from one row of it).
enum class ALayout { kRows, kColumns };

template <ALayout kA>
[[gnu::always_inline]] inline const float* AAt(const float* a, int64_t lda, int64_t r,
                                               int64_t q) {
  return kA == ALayout::kRows ? a + r * lda + q : a + q * lda + r;
}

// How a product lands in C.
enum class Landing {
  kAdd,        // C += A B
  kOverwrite,  // C = A B (C's old values are never read: they may be NaN)
  kScaleAdd,   // C = diag(row_scale) C + A B
};

// C[kRows, kVectors * kWidth] (+)= A[kRows, p] B[p, kVectors * kWidth].
template <int32_t kWidth, int32_t kRows, int32_t kVectors, ALayout kA>
[[gnu::always_inline]] inline void MatMulTile(int32_t p, const float* a, int64_t lda,
                                              const float* b, int64_t ldb, float* c,
                                              int64_t ldc, Landing landing,
                                              const float* row_scale) {
  using Vec = typename FloatVector<kWidth>::Type;
  Vec acc[kRows][kVectors];
#pragma GCC unroll 16
  for (int32_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int32_t v = 0; v < kVectors; ++v) acc[r][v] = Vec{};
  }
  for (int32_t q = 0; q < p; ++q) {
    Vec b_row[kVectors];
#pragma GCC unroll 4
    for (int32_t v = 0; v < kVectors; ++v) {
      std::memcpy(&b_row[v], b + q * ldb + v * kWidth, sizeof(Vec));
    }
#pragma GCC unroll 16
    for (int32_t r = 0; r < kRows; ++r) {
      const float a_rq = *AAt<kA>(a, lda, r, q);
#pragma GCC unroll 4
      for (int32_t v = 0; v < kVectors; ++v) acc[r][v] += a_rq * b_row[v];
    }
  }
#pragma GCC unroll 16
  for (int32_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int32_t v = 0; v < kVectors; ++v) {
      float* out = c + r * ldc + v * kWidth;
      Vec sum = acc[r][v];
      if (landing != Landing::kOverwrite) {
        Vec old;
        std::memcpy(&old, out, sizeof(Vec));
        if (landing == Landing::kScaleAdd) old *= row_scale[r];
        sum += old;
      }
      std::memcpy(out, &sum, sizeof(Vec));
    }
  }
}

// One column strip of kVectors * kWidth floats, all m rows: whole tiles, then 4-, 2- and
// 1-row tiles for the rest. The strip of B (p x strip floats) stays in L1 across the tiles.
template <class Shape, int32_t kVectors, ALayout kA>
[[gnu::always_inline]] inline void MatMulStrip(int32_t m, int32_t p, const float* a,
                                               int64_t lda, const float* b, int64_t ldb,
                                               float* c, int64_t ldc, Landing landing,
                                               const float* row_scale) {
  constexpr int32_t kWidth = Shape::kWidth;
  int32_t i = 0;
  for (; i + Shape::kRows <= m; i += Shape::kRows) {
    MatMulTile<kWidth, Shape::kRows, kVectors, kA>(p, AAt<kA>(a, lda, i, 0), lda, b, ldb,
                                                   c + i * ldc, ldc, landing,
                                                   row_scale ? row_scale + i : nullptr);
  }
  if (Shape::kRows > 4 && i + 4 <= m) {
    MatMulTile<kWidth, 4, kVectors, kA>(p, AAt<kA>(a, lda, i, 0), lda, b, ldb, c + i * ldc, ldc,
                                        landing, row_scale ? row_scale + i : nullptr);
    i += 4;
  }
  if (Shape::kRows > 2 && i + 2 <= m) {
    MatMulTile<kWidth, 2, kVectors, kA>(p, AAt<kA>(a, lda, i, 0), lda, b, ldb, c + i * ldc, ldc,
                                        landing, row_scale ? row_scale + i : nullptr);
    i += 2;
  }
  for (; i < m; ++i) {
    MatMulTile<kWidth, 1, kVectors, kA>(p, AAt<kA>(a, lda, i, 0), lda, b, ldb, c + i * ldc, ldc,
                                        landing, row_scale ? row_scale + i : nullptr);
  }
}

// Rows of B one packed panel holds: a panel of kPanelDepth x 32 floats (AVX-512) is 16 KiB,
// half of L1.
inline constexpr int32_t kPanelDepth = 128;

// Copies `depth` rows of kStripWidth floats (ldb apart in b) into panel, contiguous. The
// tiles then read B at a fixed stride from one block of L1: read in place, a strip of a
// [128, 128] state or a chunk's [K, C] keys spans rows 512 or 4C bytes apart that share few
// L1 sets, and the products ran at 55-70% of the speed they reach from a packed panel.
template <int32_t kStripWidth>
[[gnu::always_inline]] inline void PackPanel(int32_t depth, const float* b, int64_t ldb,
                                             float* panel) {
  for (int32_t q = 0; q < depth; ++q) {
    std::memcpy(panel + q * kStripWidth, b + q * ldb, kStripWidth * sizeof(float));
  }
}

// One strip of columns, kVectors * kWidth wide, through packed panels of kPanelDepth rows of B.
template <class Shape, int32_t kVectors, ALayout kA>
[[gnu::always_inline]] inline void PackedStrip(int32_t m, int32_t p, const float* a,
                                               int64_t lda, const float* b, int64_t ldb,
                                               float* c, int64_t ldc, Landing landing,
                                               const float* row_scale, float* panel) {
  constexpr int32_t kStripWidth = kVectors * Shape::kWidth;
  for (int32_t d = 0; d < p; d += kPanelDepth) {
    const int32_t depth = p - d < kPanelDepth ? p - d : kPanelDepth;
    PackPanel<kStripWidth>(depth, b + d * ldb, ldb, panel);
    MatMulStrip<Shape, kVectors, kA>(m, depth, AAt<kA>(a, lda, 0, d), lda, panel, kStripWidth,
                                     c, ldc, d == 0 ? landing : Landing::kAdd, row_scale);
  }
}

// c[m, n] (+)= a[m, p] b[p, n] as `landing` says; leading dimensions in floats; row_scale
// [m] with Landing::kScaleAdd only. kA = ALayout::kColumns: `a` holds A^T, [p, m].
template <class Shape, ALayout kA = ALayout::kRows>
inline void MatMul(int32_t m, int32_t n, int32_t p, const float* a, int64_t lda,
                   const float* b, int64_t ldb, float* c, int64_t ldc,
                   Landing landing = Landing::kAdd, const float* row_scale = nullptr) {
  constexpr int32_t kWidth = Shape::kWidth;
  constexpr int32_t kStrip = Shape::kVectors * kWidth;
  alignas(64) float panel[kPanelDepth * kStrip];
  int32_t j = 0;
  for (; j + kStrip <= n; j += kStrip) {
    PackedStrip<Shape, Shape::kVectors, kA>(m, p, a, lda, b + j, ldb, c + j, ldc, landing,
                                            row_scale, panel);
  }
  for (; j + kWidth <= n; j += kWidth) {
    PackedStrip<Shape, 1, kA>(m, p, a, lda, b + j, ldb, c + j, ldc, landing, row_scale, panel);
  }
  if (j == n) return;
  for (int32_t i = 0; i < m; ++i) {  // the last columns, fewer than a vector
    for (int32_t jj = j; jj < n; ++jj) {
      float sum = 0.0f;
      for (int32_t q = 0; q < p; ++q) sum += *AAt<kA>(a, lda, i, q) * b[q * ldb + jj];
      float& out = c[i * ldc + jj];
      switch (landing) {
        case Landing::kAdd: out += sum; break;
        case Landing::kOverwrite: out = sum; break;
        case Landing::kScaleAdd: out = row_scale[i] * out + sum; break;
      }
    }
  }
}

// One strip of LowerMatMulAdd: each panel of B is packed once and read by every block of
// rows that reaches it.
template <class Shape, int32_t kVectors>
[[gnu::always_inline]] inline void LowerStrip(int32_t m, const float* a, int64_t lda,
                                              const float* b, int64_t ldb, float* c,
                                              int64_t ldc, float* panel) {
  constexpr int32_t kStripWidth = kVectors * Shape::kWidth;
  for (int32_t d = 0; d < m; d += kPanelDepth) {
    const int32_t depth = m - d < kPanelDepth ? m - d : kPanelDepth;
    PackPanel<kStripWidth>(depth, b + d * ldb, ldb, panel);
    for (int32_t i = d / Shape::kRows * Shape::kRows; i < m; i += Shape::kRows) {
      const int32_t rows = m - i < Shape::kRows ? m - i : Shape::kRows;
      const int32_t end = i + rows < d + depth ? i + rows : d + depth;  // a's last column + 1
      MatMulStrip<Shape, kVectors, ALayout::kRows>(rows, end - d, a + i * lda + d, lda, panel,
                                                   kStripWidth, c + i * ldc, ldc, Landing::kAdd,
                                                   nullptr);
    }
  }
}

// c[m, n] += tril(a)[m, m] b[m, n]: row i of c reads rows 0..i of b (diagonal included).
// Entries of a above the diagonal must be zero: each block of rows reads a[i, 0:end of the
// block].
template <class Shape>
inline void LowerMatMulAdd(int32_t m, int32_t n, const float* a, int64_t lda, const float* b,
                           int64_t ldb, float* c, int64_t ldc) {
  constexpr int32_t kWidth = Shape::kWidth;
  constexpr int32_t kStrip = Shape::kVectors * kWidth;
  alignas(64) float panel[kPanelDepth * kStrip];
  int32_t j = 0;
  for (; j + kStrip <= n; j += kStrip) {
    LowerStrip<Shape, Shape::kVectors>(m, a, lda, b + j, ldb, c + j, ldc, panel);
  }
  for (; j + kWidth <= n; j += kWidth) {
    LowerStrip<Shape, 1>(m, a, lda, b + j, ldb, c + j, ldc, panel);
  }
  if (j == n) return;
  for (int32_t i = 0; i < m; i += Shape::kRows) {  // the last columns, fewer than a vector
    const int32_t rows = m - i < Shape::kRows ? m - i : Shape::kRows;
    MatMul<Shape>(rows, n - j, i + rows, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc);
  }
}

// Partial sums kept in independent lanes: GCC vectorises this fixed-width loop even where
// it does not vectorise a `#pragma omp simd reduction`.
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

}  // namespace lumen::cpu
