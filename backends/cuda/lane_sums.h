#pragma once
// Sums across the lanes of a warp, written once for any warp width and any way of moving a
// value between lanes. On the GPU the lanes are a warp (32) or an AMD wavefront (32 or 64) and
// the move is the hardware's shuffle (gpu_compat.cuh); tests/kernels/lane_sums_test.cc runs
// the same code on an emulated warp of 32 and of 64 threads, so the wave64 logic runs in CI,
// which has no AMD GPU. Plain C++: no GPU runtime header.

// Both macros are undefined at the end of this header.
#if defined(__CUDACC__) || defined(__HIP__)
#define LUMEN_LANE_SUM_FUNCTION __host__ __device__ __forceinline__
#else
#define LUMEN_LANE_SUM_FUNCTION inline
#endif
// Unrolled in device code; the host compiler (g++ behind nvcc, or in tests) does not know it.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define LUMEN_LANE_SUM_UNROLL _Pragma("unroll")
#else
#define LUMEN_LANE_SUM_UNROLL
#endif

namespace lumen::cuda {

// Sum of `value` over the lanes of a warp of kWidth lanes whose index differs only in the
// bits of [kFirstMask, kWidth): lanes that share the bits below kFirstMask add together, so
// kFirstMask = 1 sums the whole warp and kFirstMask = 8 gives each of the 8 lane classes
// (lane % 8) its own sum. Every lane of a class ends with the same bits (a butterfly: a + b
// on one side is b + a on the other). `shuffle_xor(v, mask)` returns lane (lane ^ mask)'s v;
// every lane of the warp must call this together.
template <int kFirstMask, int kWidth, typename ShuffleXor>
LUMEN_LANE_SUM_FUNCTION float LaneGroupSum(float value, ShuffleXor shuffle_xor) {
  static_assert(kWidth == 32 || kWidth == 64, "warps and wavefronts are 32 or 64 lanes");
  static_assert(kFirstMask > 0 && (kFirstMask & (kFirstMask - 1)) == 0 && kFirstMask < kWidth,
                "kFirstMask is a power of two below the warp width");
  LUMEN_LANE_SUM_UNROLL
  for (int mask = kFirstMask; mask < kWidth; mask <<= 1) value += shuffle_xor(value, mask);
  return value;
}

}  // namespace lumen::cuda

#undef LUMEN_LANE_SUM_FUNCTION
#undef LUMEN_LANE_SUM_UNROLL
