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

#include "backends/cpu/kernel_targets.h"

namespace lumen::cpu {
// This SIMD level's copy (kernel_targets.h).
inline namespace LUMEN_KERNEL_NAMESPACE {

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

// A second product that a tile sums with the first before it lands: tril(A)[m, m] B[m, n],
// entries of A above the diagonal zero. The tile at rows [i, i + R) reads A[i:i+R, 0:i+R]
// and those rows of B, so the triangle past its corner costs nothing.
struct LowerTerm {
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
};

// acc[kRows][kVectors] += A[kRows, p] B[p, kVectors * kWidth].
template <int32_t kWidth, int32_t kRows, int32_t kVectors, ALayout kA, class Vec>
[[gnu::always_inline]] inline void AccumulateTile(Vec (&acc)[kRows][kVectors], int32_t p,
                                                  const float* a, int64_t lda, const float* b,
                                                  int64_t ldb) {
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
}

// C[kRows, kVectors * kWidth] (+)= A[kRows, p] B[p, kVectors * kWidth], plus `lower`'s
// rows [row, row + kRows) where it is given.
template <int32_t kWidth, int32_t kRows, int32_t kVectors, ALayout kA>
[[gnu::always_inline]] inline void MatMulTile(int32_t p, const float* a, int64_t lda,
                                              const float* b, int64_t ldb, float* c,
                                              int64_t ldc, Landing landing,
                                              const float* row_scale, const LowerTerm* lower,
                                              int32_t row) {
  using Vec = typename FloatVector<kWidth>::Type;
  Vec acc[kRows][kVectors];
#pragma GCC unroll 16
  for (int32_t r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int32_t v = 0; v < kVectors; ++v) acc[r][v] = Vec{};
  }
  AccumulateTile<kWidth, kRows, kVectors, kA>(acc, p, a, lda, b, ldb);
  if (lower != nullptr) {
    AccumulateTile<kWidth, kRows, kVectors, ALayout::kRows>(
        acc, row + kRows, lower->a + row * lower->lda, lower->lda, lower->b, lower->ldb);
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

// The tile of kRows rows at row i of a strip (MatMulStrip's arguments).
template <class Shape, int32_t kRows, int32_t kVectors, ALayout kA>
[[gnu::always_inline]] inline void StripTile(int32_t i, int32_t p, const float* a, int64_t lda,
                                             const float* b, int64_t ldb, float* c,
                                             int64_t ldc, Landing landing,
                                             const float* row_scale, const LowerTerm* lower) {
  MatMulTile<Shape::kWidth, kRows, kVectors, kA>(p, AAt<kA>(a, lda, i, 0), lda, b, ldb,
                                                 c + i * ldc, ldc, landing,
                                                 row_scale ? row_scale + i : nullptr, lower, i);
}

// One column strip of kVectors * kWidth floats, all m rows: whole tiles, then 4-, 2- and
// 1-row tiles for the rest. The strip of B (p x strip floats) stays in L1 across the tiles.
// `lower`, where given, is summed into every tile (its B a strip of the same columns).
template <class Shape, int32_t kVectors, ALayout kA>
[[gnu::always_inline]] inline void MatMulStrip(int32_t m, int32_t p, const float* a,
                                               int64_t lda, const float* b, int64_t ldb,
                                               float* c, int64_t ldc, Landing landing,
                                               const float* row_scale,
                                               const LowerTerm* lower = nullptr) {
  int32_t i = 0;
  for (; i + Shape::kRows <= m; i += Shape::kRows) {
    StripTile<Shape, Shape::kRows, kVectors, kA>(i, p, a, lda, b, ldb, c, ldc, landing,
                                                 row_scale, lower);
  }
  if (Shape::kRows > 4 && i + 4 <= m) {
    StripTile<Shape, 4, kVectors, kA>(i, p, a, lda, b, ldb, c, ldc, landing, row_scale, lower);
    i += 4;
  }
  if (Shape::kRows > 2 && i + 2 <= m) {
    StripTile<Shape, 2, kVectors, kA>(i, p, a, lda, b, ldb, c, ldc, landing, row_scale, lower);
    i += 2;
  }
  for (; i < m; ++i) {
    StripTile<Shape, 1, kVectors, kA>(i, p, a, lda, b, ldb, c, ldc, landing, row_scale, lower);
  }
}

// Rows of B one packed panel holds: a panel of kPanelDepth x 32 floats (AVX-512) is 16 KiB,
// half of L1.
inline constexpr int32_t kPanelDepth = 128;

// Copies `rows` rows of kRowWidth floats from src (src_ld apart) to dst (dst_ld apart): each
// row a few vector moves of a compile-time size.
template <int32_t kRowWidth>
[[gnu::always_inline]] inline void CopyRows(int32_t rows, const float* src, int64_t src_ld,
                                            float* dst, int64_t dst_ld) {
  for (int32_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * dst_ld, src + r * src_ld, kRowWidth * sizeof(float));
  }
}

// Copies `depth` rows of kStripWidth floats (ldb apart in b) into panel, contiguous. The
// tiles then read B at a fixed stride from one block of L1: read in place, a strip of a
// [128, 128] state or a chunk's [K, C] keys spans rows 512 or 4C bytes apart that share few
// L1 sets, and the products ran at 55-70% of the speed they reach from a packed panel.
template <int32_t kStripWidth>
[[gnu::always_inline]] inline void PackPanel(int32_t depth, const float* b, int64_t ldb,
                                             float* panel) {
  CopyRows<kStripWidth>(depth, b, ldb, panel, kStripWidth);
}

// One strip of columns, kVectors * kWidth wide, through packed panels of kPanelDepth rows of B
// (and one of the lower term's B, which the last panel's tiles sum in too). A strip whose rows
// are already contiguous (ldb is its width: a matrix in panels, or one that narrow) is read
// in place.
template <class Shape, int32_t kVectors, ALayout kA>
[[gnu::always_inline]] inline void PackedStrip(int32_t m, int32_t p, const float* a,
                                               int64_t lda, const float* b, int64_t ldb,
                                               float* c, int64_t ldc, Landing landing,
                                               const float* row_scale, const LowerTerm* lower,
                                               float* panel, float* lower_panel) {
  constexpr int32_t kStripWidth = kVectors * Shape::kWidth;
  LowerTerm packed{};
  if (lower != nullptr) {
    PackPanel<kStripWidth>(m, lower->b, lower->ldb, lower_panel);
    packed = {lower->a, lower->lda, lower_panel, kStripWidth};
  }
  const bool in_place = ldb == kStripWidth;
  int32_t d = 0;
  do {  // at least once: with p = 0 the tiles still land (and sum the lower term)
    const int32_t depth = p - d < kPanelDepth ? p - d : kPanelDepth;
    const float* rows = b + d * ldb;
    if (!in_place) PackPanel<kStripWidth>(depth, rows, ldb, panel);
    const bool last = d + depth >= p;
    MatMulStrip<Shape, kVectors, kA>(m, depth, AAt<kA>(a, lda, 0, d), lda,
                                     in_place ? rows : panel, kStripWidth, c, ldc,
                                     d == 0 ? landing : Landing::kAdd, row_scale,
                                     last && lower != nullptr ? &packed : nullptr);
    d += depth;
  } while (d < p);
}

// How MatMul's B or C lies in memory: row-major with a leading dimension, or in panels: for
// each strip of columns that MatMul takes (Shape::kVectors vectors wide, then one vector,
// then the last columns), all rows of the strip contiguous, the strips one after another.
// Element (r, c) of the strip that starts at column j and is w wide is data[j * rows +
// r * w + c - j]. Tiles read B in panels in place, as they would a packed copy, and write
// C in panels as one block per tile: a state kept in panels across a prefill's chunks is
// never packed again (ToPanels, FromPanels).
enum class MatrixLayout { kRows, kPanels };

// The width of the strip MatMul takes at column j (a strip's start) of n columns: whole
// strips of Shape::kVectors vectors first, then single vectors, then the last columns.
template <class Shape>
constexpr int32_t StripWidthAt(int32_t j, int32_t n) {
  constexpr int32_t kStrip = Shape::kVectors * Shape::kWidth;
  return n - j >= kStrip ? kStrip : n - j >= Shape::kWidth ? Shape::kWidth : n - j;
}

// CopyRows for one of MatMul's strips (StripWidthAt): whole strips and single vectors at
// their compile-time widths, rather than a call of memcpy per row; the last columns at theirs.
template <class Shape>
inline void CopyStrip(int32_t rows, int32_t width, const float* src, int64_t src_ld,
                      float* dst, int64_t dst_ld) {
  constexpr int32_t kWidth = Shape::kWidth;
  constexpr int32_t kStrip = Shape::kVectors * kWidth;
  if (width == kStrip) return CopyRows<kStrip>(rows, src, src_ld, dst, dst_ld);
  if (width == kWidth) return CopyRows<kWidth>(rows, src, src_ld, dst, dst_ld);
  for (int32_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * dst_ld, src + r * src_ld, width * sizeof(float));
  }
}

// dst [rows, n] in panels (MatrixLayout::kPanels for Shape) = src [rows, n] row-major (ld
// apart).
template <class Shape>
inline void ToPanels(int32_t rows, int32_t n, const float* src, int64_t ld, float* dst) {
  for (int32_t j = 0, width = 0; j < n; j += width) {
    width = StripWidthAt<Shape>(j, n);
    CopyStrip<Shape>(rows, width, src + j, ld, dst + int64_t{j} * rows, width);
  }
}

// dst [rows, n] row-major (ld apart) = src [rows, n] in panels.
template <class Shape>
inline void FromPanels(int32_t rows, int32_t n, const float* src, float* dst, int64_t ld) {
  for (int32_t j = 0, width = 0; j < n; j += width) {
    width = StripWidthAt<Shape>(j, n);
    CopyStrip<Shape>(rows, width, src + int64_t{j} * rows, width, dst + j, ld);
  }
}

// c[m, n] (+)= a[m, p] b[p, n] as `landing` says; leading dimensions in floats; row_scale
// [m] with Landing::kScaleAdd only. kA = ALayout::kColumns: `a` holds A^T, [p, m].
// b_layout, c_layout: how b and c lie (MatrixLayout); ldb or ldc is not read for one in
// panels. (Runtime arguments: they only place each strip, and one build serves both.)
// `lower`, where given, adds tril(lower.a)[m, m] lower.b[m, n] in the same register tiles,
// so that each tile of c is written once: the chunk's O = Qh S0 + P U in one pass over O
// (m <= kPanelDepth; lower.a zero above the diagonal).
template <class Shape, ALayout kA = ALayout::kRows>
inline void MatMul(int32_t m, int32_t n, int32_t p, const float* a, int64_t lda,
                   const float* b, int64_t ldb, float* c, int64_t ldc,
                   Landing landing = Landing::kAdd, const float* row_scale = nullptr,
                   const LowerTerm* lower = nullptr,
                   MatrixLayout b_layout = MatrixLayout::kRows,
                   MatrixLayout c_layout = MatrixLayout::kRows) {
  constexpr int32_t kWidth = Shape::kWidth;
  constexpr int32_t kStrip = Shape::kVectors * kWidth;
  alignas(64) float panel[kPanelDepth * kStrip];
  alignas(64) float lower_panel[kPanelDepth * kStrip];
  LowerTerm strip_lower = lower != nullptr ? *lower : LowerTerm{};  // its B from column j on
  const LowerTerm* strip = lower != nullptr ? &strip_lower : nullptr;
  const bool b_panels = b_layout == MatrixLayout::kPanels;
  const bool c_panels = c_layout == MatrixLayout::kPanels;
  for (int32_t j = 0, width = 0; j < n; j += width) {
    width = StripWidthAt<Shape>(j, n);
    const float* b_j = b_panels ? b + int64_t{j} * p : b + j;
    const int64_t ldb_j = b_panels ? width : ldb;
    float* c_j = c_panels ? c + int64_t{j} * m : c + j;
    const int64_t ldc_j = c_panels ? width : ldc;
    if (strip != nullptr) strip_lower.b = lower->b + j;
    if (width == kStrip) {
      PackedStrip<Shape, Shape::kVectors, kA>(m, p, a, lda, b_j, ldb_j, c_j, ldc_j, landing,
                                              row_scale, strip, panel, lower_panel);
      continue;
    }
    if (width == kWidth) {
      PackedStrip<Shape, 1, kA>(m, p, a, lda, b_j, ldb_j, c_j, ldc_j, landing, row_scale,
                                strip, panel, lower_panel);
      continue;
    }
    for (int32_t i = 0; i < m; ++i) {  // the last columns, fewer than a vector
      for (int32_t jj = 0; jj < width; ++jj) {
        float sum = 0.0f;
        for (int32_t q = 0; q < p; ++q) sum += *AAt<kA>(a, lda, i, q) * b_j[q * ldb_j + jj];
        if (lower != nullptr) {
          for (int32_t q = 0; q <= i; ++q) {
            sum += lower->a[i * lower->lda + q] * strip_lower.b[q * lower->ldb + jj];
          }
        }
        float& out = c_j[i * ldc_j + jj];
        switch (landing) {
          case Landing::kAdd: out += sum; break;
          case Landing::kOverwrite: out = sum; break;
          case Landing::kScaleAdd: out = row_scale[i] * out + sum; break;
        }
      }
    }
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

}  // namespace LUMEN_KERNEL_NAMESPACE
}  // namespace lumen::cpu
