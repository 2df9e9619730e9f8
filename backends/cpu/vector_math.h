#pragma once
// exp, log1p and softplus for fp32 in straight-line code (no branches, no calls) that GCC
// vectorises inside `#pragma omp simd` loops at the SIMD level of each kernel build; libm's
// calls run one value at a time. Accurate to a few units in the last place over the whole
// fp32 range, overflow to infinity and denormal results included
// (tests/kernels/vector_math_test.cc measures the bound against libm in float64).
// Inputs must not be NaN: the kernels' inputs are checked finite before they get here.

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernel_targets.h"

namespace lumen::cpu {
// This SIMD level's copy (kernel_targets.h).
inline namespace LUMEN_KERNEL_NAMESPACE {

inline float BitsToFloat(int32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// 2^n for an integer-valued n in [-126, 127].
inline float PowerOfTwo(int32_t n) { return BitsToFloat((n + 127) << 23); }

// e^x as e_r 2^n: Cephes' expf reduction x = n ln2 + r, |r| <= ln2 / 2, and its degree-6
// polynomial for e^r. x must lie in [-104, 88.75].
struct ExpParts {
  float e_r;
  int32_t n;
};

inline ExpParts ReduceExp(float x) {
  // Round x / ln2 to the nearest integer with the 1.5 * 2^23 trick: |x / ln2| < 2^22.
  constexpr float kRound = 12582912.0f;
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  // ln2 in two parts; n * kLn2High is exact for |n| <= 150.
  constexpr float kLn2High = 0.693359375f;
  constexpr float kLn2Low = -2.12194440e-4f;
  const float r = (x - n * kLn2High) - n * kLn2Low;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return {p * (r * r) + r + 1.0f, static_cast<int32_t>(n)};
}

// e^x. 2^n is applied in two halves so that results down to the smallest denormal
// (n = -150) and up to FLT_MAX (n = 128) need no special case. Below -104 the result rounds
// to 0, above 88.75 to infinity, as libm's do.
inline float VectorExp(float x) {
  x = x < -104.0f ? -104.0f : x;
  x = x > 88.75f ? 88.75f : x;
  const ExpParts parts = ReduceExp(x);
  const int32_t half = parts.n >> 1;  // floor: both halves in [-75, 64]
  return parts.e_r * PowerOfTwo(half) * PowerOfTwo(parts.n - half);
}

// e^x for x <= 0, with results below `floor` (at least 1e-37) taken as 0: VectorExp's value
// bit for bit wherever that is `floor` or more (2^n in one step is exact there, as in two),
// in fewer operations, for decays that drop what is negligible anyway.
inline float ExpAboveFloor(float x, float floor) {
  x = x < -87.0f ? -87.0f : x;  // n >= -126: 2^n stays a normal float
  const ExpParts parts = ReduceExp(x);
  const float value = parts.e_r * PowerOfTwo(parts.n);
  return value < floor ? 0.0f : value;
}

// log(1 + e) for e in [0, 1]: e (1 + e r(e)), r of degree 8, the minimax fit (Chebyshev
// interpolation at degree 9 of log1p(e) / e) in float64 rounded to fp32. Its truncation error
// is below 5e-9 relative; with fp32 rounding the result stays within 2.4 units of 2^-24
// relative over the interval. No division and no reduction: each value is 10 multiply-adds,
// and for tiny e (e^2 below fp32's range included) the result is e, as log1p's is.
inline float Log1pUnit(float e) {
  float r = -0.0032563782297074795f;
  r = r * e + 0.019907159730792046f;
  r = r * e - 0.05706419795751572f;
  r = r * e + 0.10614264756441116f;
  r = r * e - 0.15311862528324127f;
  r = r * e + 0.19678117334842682f;
  r = r * e - 0.24954558908939362f;
  r = r * e + 0.33330005407333374f;
  r = r * e - 0.4999990463256836f;
  return e + e * (r * e);
}

// softplus(x) = log(1 + e^x) = max(x, 0) + log1p(e^-|x|).
inline float VectorSoftplus(float x) {
  const float magnitude = x < 0.0f ? -x : x;
  return (x > 0.0f ? x : 0.0f) + Log1pUnit(VectorExp(-magnitude));
}

}  // namespace LUMEN_KERNEL_NAMESPACE
}  // namespace lumen::cpu
