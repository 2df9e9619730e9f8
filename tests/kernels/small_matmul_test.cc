// The chunkwise form's register-blocked products against a plain triple loop: every landing,
// both layouts of A, B and C in panels, with and without a lower term, sizes that leave partial tiles, partial
// strips and columns past the last vector, and depths of none and over one packed panel
// (kPanelDepth), so that each path of small_matmul.h runs.

#include "backends/cpu/small_matmul.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

namespace lumen::cpu {
namespace {

struct Operands {
  int32_t m, n, p;
  int64_t lda, ldb, ldc;
  std::vector<float> a, b, c, row_scale;
  // The lower term tril(l)[m, m] u[m, n], where the product has one (else empty).
  int64_t ldl = 0, ldu = 0;
  std::vector<float> l, u;
};

Operands MakeOperands(int32_t m, int32_t n, int32_t p, bool lower, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Operands o{m, n, p, p + 3, n + 5, n + 7, {}, {}, {}, {}, 0, 0, {}, {}};
  o.a.resize(static_cast<size_t>(m) * o.lda);
  o.b.resize(static_cast<size_t>(p) * o.ldb);
  o.c.resize(static_cast<size_t>(m) * o.ldc);
  o.row_scale.resize(m);
  for (float& x : o.a) x = normal(rng);
  for (float& x : o.b) x = normal(rng);
  for (float& x : o.c) x = normal(rng);
  for (float& x : o.row_scale) x = normal(rng);
  if (lower) {  // zero above the diagonal, as the lower term requires
    o.ldl = m + 2;
    o.ldu = n + 1;
    o.l.resize(static_cast<size_t>(m) * o.ldl);
    o.u.resize(static_cast<size_t>(m) * o.ldu);
    for (int32_t i = 0; i < m; ++i)
      for (int32_t q = 0; q < o.ldl; ++q) o.l[i * o.ldl + q] = q <= i ? normal(rng) : 0.0f;
    for (float& x : o.u) x = normal(rng);
  }
  return o;
}

// What c should hold afterwards, in float64, and whether out matches it to fp32 sums' rounding.
void CheckProduct(const Operands& before, const std::vector<float>& out, Landing landing) {
  double worst = 0.0;
  for (int32_t i = 0; i < before.m; ++i) {
    for (int32_t j = 0; j < before.n; ++j) {
      double sum = 0.0, magnitude = 0.0;
      for (int32_t q = 0; q < before.p; ++q) {
        const double term = double(before.a[i * before.lda + q]) * before.b[q * before.ldb + j];
        sum += term;
        magnitude += std::abs(term);
      }
      for (int32_t q = 0; q <= i && !before.l.empty(); ++q) {
        const double term = double(before.l[i * before.ldl + q]) * before.u[q * before.ldu + j];
        sum += term;
        magnitude += std::abs(term);
      }
      const double old = before.c[i * before.ldc + j];
      if (landing == Landing::kAdd) sum += old, magnitude += std::abs(old);
      if (landing == Landing::kScaleAdd) {
        sum += before.row_scale[i] * old;
        magnitude += std::abs(before.row_scale[i] * old);
      }
      worst = std::max(worst, std::abs(out[i * before.ldc + j] - sum) / (magnitude + 1e-30));
    }
  }
  // fp32 sums' rounding measures below 3e-7 of the terms' magnitude at these sizes.
  CHECK(worst < 2e-6);
  // Columns past n (the padding of each row) are left alone.
  bool padding_untouched = true;
  for (int32_t i = 0; i < before.m; ++i)
    for (int64_t j = before.n; j < before.ldc; ++j)
      padding_untouched &= out[i * before.ldc + j] == before.c[i * before.ldc + j];
  CHECK(padding_untouched);
}

template <class Shape>
void CheckShape() {
  std::mt19937 rng(0x5eed0011);
  const int32_t sizes[] = {1, 7, 19, 33, 130};
  for (int32_t m : sizes) {
    for (int32_t n : sizes) {
      for (int32_t p : {0, 1, 19, 129}) {  // 129: two panels
        for (Landing landing : {Landing::kAdd, Landing::kOverwrite, Landing::kScaleAdd}) {
          const Operands o = MakeOperands(m, n, p, false, rng);
          std::vector<float> c = o.c;
          MatMul<Shape>(m, n, p, o.a.data(), o.lda, o.b.data(), o.ldb, c.data(), o.ldc,
                        landing, o.row_scale.data());
          CheckProduct(o, c, landing);
          // B and C in panels (ToPanels, FromPanels), read and written in place.
          std::vector<float> b_panels(static_cast<size_t>(p) * n), c_panels(
              static_cast<size_t>(m) * n);
          ToPanels<Shape>(p, n, o.b.data(), o.ldb, b_panels.data());
          ToPanels<Shape>(m, n, o.c.data(), o.ldc, c_panels.data());
          MatMul<Shape>(m, n, p, o.a.data(), o.lda, b_panels.data(), 0, c_panels.data(), 0,
                        landing, o.row_scale.data(), nullptr, MatrixLayout::kPanels,
                        MatrixLayout::kPanels);
          c = o.c;
          FromPanels<Shape>(m, n, c_panels.data(), c.data(), o.ldc);
          CheckProduct(o, c, landing);
          if (m <= kPanelDepth) {  // the same with a lower term summed in
            const Operands lo = MakeOperands(m, n, p, true, rng);
            const LowerTerm lower{lo.l.data(), lo.ldl, lo.u.data(), lo.ldu};
            c = lo.c;
            MatMul<Shape>(m, n, p, lo.a.data(), lo.lda, lo.b.data(), lo.ldb, c.data(), lo.ldc,
                          landing, lo.row_scale.data(), &lower);
            CheckProduct(lo, c, landing);
          }
          // A given as its transpose, [p, m] with a padded leading dimension.
          const int64_t lda_t = m + 3;
          std::vector<float> a_t(static_cast<size_t>(p) * lda_t, std::nanf(""));
          for (int32_t i = 0; i < m; ++i)
            for (int32_t q = 0; q < p; ++q) a_t[q * lda_t + i] = o.a[i * o.lda + q];
          c = o.c;
          MatMul<Shape, ALayout::kColumns>(m, n, p, a_t.data(), lda_t, o.b.data(), o.ldb,
                                           c.data(), o.ldc, landing, o.row_scale.data());
          CheckProduct(o, c, landing);
        }
      }
    }
  }
}

// Every level's tile shape, built here at the baseline level: GCC's and clang's vector
// extensions lower a vector wider than the target's to narrower ones, so each shape's
// tiling, edges and landings are checked on any CPU. Each level's own build of the products
// is checked through the kernels that use them (head_kernels_test.cc, at every level).
TEST_CASE("Chunk products match a plain product", "[kernels][cpu]") {
  CheckShape<Vector128Shape>();
  CheckShape<Avx2Shape>();
  CheckShape<Avx512Shape>();
}

}  // namespace
}  // namespace lumen::cpu
