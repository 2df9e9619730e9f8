#pragma once
// fp32 matrix products on the tensor cores at fp32 accuracy ("3xTF32", as CUTLASS's
// tfloat32x3 operator): each fp32 operand x splits into big = tf32(x) and
// small = tf32(x - big), and a b ~= a_big b_big + a_big b_small + a_small b_big, each product
// an mma.sync m16n8k8 TF32 with fp32 accumulation. The dropped small x small term and the
// rounding of small leave a relative error near 2^-21 per product, like fp32 itself; plain
// TF32 (one product) would leave about 2^-11. NVIDIA only (sm_80 and later): callers keep a
// portable path beside it (LUMEN_GPU_NVIDIA_PATHS).
//
// Fragment layout of m16n8k8 (PTX ISA, warp-level mma): lane = 4 g + j with g in [0, 8) and
// j in [0, 4); A (16 x 8) holds (g, j), (g + 8, j), (g, j + 4), (g + 8, j + 4); B (8 x 8)
// holds (j, g), (j + 4, g); the accumulator (16 x 8) holds (g, 2 j), (g, 2 j + 1),
// (g + 8, 2 j), (g + 8, 2 j + 1).

#include <cstdint>

#include "backends/cuda/gpu_compat.cuh"

#if LUMEN_GPU_NVIDIA_PATHS
namespace lumen::cuda {

static_assert(kWarpSize == 32, "mma.sync fragments are laid out over 32 lanes");

// x as big + small, both TF32 bit patterns.
__device__ __forceinline__ void SplitTf32(float x, uint32_t& big, uint32_t& small) {
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(big) : "f"(x));
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(small) : "f"(x - __uint_as_float(big)));
}

// d += a b, one m16n8k8 TF32 product with fp32 accumulation.
__device__ __forceinline__ void MmaTf32(float (&d)[4], const uint32_t (&a)[4],
                                        const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// An operand fragment of m16n8k8, split into its big and small TF32 parts.
struct FragmentA {
  uint32_t big[4], small[4];
};
struct FragmentB {
  uint32_t big[2], small[2];
};

// The A fragment (16 x 8) whose entry (r, c) is element(r, c): shared-memory reads, or values
// computed on the way in (a decay factor applied, say).
template <typename Element>
__device__ __forceinline__ FragmentA MakeFragmentA(Element element) {
  const int g = threadIdx.x % kWarpSize / 4;
  const int j = threadIdx.x % 4;
  FragmentA a;
  SplitTf32(element(g, j), a.big[0], a.small[0]);
  SplitTf32(element(g + 8, j), a.big[1], a.small[1]);
  SplitTf32(element(g, j + 4), a.big[2], a.small[2]);
  SplitTf32(element(g + 8, j + 4), a.big[3], a.small[3]);
  return a;
}

// The B fragment (8 x 8) whose entry (k, n) is element(k, n).
template <typename Element>
__device__ __forceinline__ FragmentB MakeFragmentB(Element element) {
  const int g = threadIdx.x % kWarpSize / 4;
  const int j = threadIdx.x % 4;
  FragmentB b;
  SplitTf32(element(j, g), b.big[0], b.small[0]);
  SplitTf32(element(j + 4, g), b.big[1], b.small[1]);
  return b;
}

// d += a b at fp32 accuracy: the three TF32 products, small terms first.
__device__ __forceinline__ void MmaTf32x3(float (&d)[4], const FragmentA& a, const FragmentB& b) {
  MmaTf32(d, a.small, b.big);
  MmaTf32(d, a.big, b.small);
  MmaTf32(d, a.big, b.big);
}

// One warp accumulates C0 += A0 B and, when kTwo, C1 += A1 B for a 16 x (8 kTiles)
// block of C, over `depth` (a multiple of 8) steps of the inner dimension. A (16 rows) is read
// as a[row * a_row + i * a_inner] from shared memory, B as b[i * b_inner + column]. The
// accumulators hold the fragment layout above: c[n] is the 16 x 8 tile of columns 8 n.
template <int kTiles, bool kTwo>
__device__ __forceinline__ void WarpProductTf32x3(float (&c0)[kTiles][4], float (&c1)[kTiles][4],
                                                  const float* a0, const float* a1, int a_row,
                                                  int a_inner, const float* b, int b_inner,
                                                  int depth) {
  const int lane = threadIdx.x % kWarpSize;
  const int g = lane / 4;
  const int j = lane % 4;
#pragma unroll 1
  for (int i = 0; i < depth; i += 8) {
    uint32_t a0_big[4], a0_small[4], a1_big[4], a1_small[4];
    const int offsets[4] = {g * a_row + (i + j) * a_inner, (g + 8) * a_row + (i + j) * a_inner,
                            g * a_row + (i + j + 4) * a_inner,
                            (g + 8) * a_row + (i + j + 4) * a_inner};
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      SplitTf32(a0[offsets[r]], a0_big[r], a0_small[r]);
      if (kTwo) SplitTf32(a1[offsets[r]], a1_big[r], a1_small[r]);
    }
#pragma unroll
    for (int n = 0; n < kTiles; ++n) {
      uint32_t b_big[2], b_small[2];
      SplitTf32(b[(i + j) * b_inner + 8 * n + g], b_big[0], b_small[0]);
      SplitTf32(b[(i + j + 4) * b_inner + 8 * n + g], b_big[1], b_small[1]);
      MmaTf32(c0[n], a0_small, b_big);
      MmaTf32(c0[n], a0_big, b_small);
      MmaTf32(c0[n], a0_big, b_big);
      if (kTwo) {
        MmaTf32(c1[n], a1_small, b_big);
        MmaTf32(c1[n], a1_big, b_small);
        MmaTf32(c1[n], a1_big, b_big);
      }
    }
  }
}

}  // namespace lumen::cuda
#endif  // LUMEN_GPU_NVIDIA_PATHS
