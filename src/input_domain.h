#pragma once
// The values a layer call accepts in each of its inputs, as pure functions with no library
// calls, so that every backend applies the same rule: the CPU backend while it prepares the
// inputs, a GPU kernel on the device (hence LUMEN_HOST_DEVICE). Messages are built on the
// host from the index found here (src/input_domain_error.h).

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define LUMEN_HOST_DEVICE __host__ __device__
#else
#define LUMEN_HOST_DEVICE
#endif

namespace lumen {

// A closed range of accepted values. NaN lies in none: every comparison with it is false.
struct InputDomain {
  float low;
  float high;
  const char* rule;  // completes "<tensor> ... is <value>: it <rule>"
};

inline constexpr float kLargestFloat = 3.40282347e+38f;  // FLT_MAX

// q, k, v, a raw gate (gate_raw) and a beta logit (beta_sigmoid).
inline constexpr InputDomain kFiniteValues = {-kLargestFloat, kLargestFloat, "must be finite"};
// g as a natural-log decay: exp(g) in (0, 1].
inline constexpr InputDomain kLogGateValues = {
    -kLargestFloat, 0.0f, "is a log-decay and must be finite and <= 0 (gate_raw takes raw values)"};
// beta as a write strength.
inline constexpr InputDomain kUnitValues = {
    0.0f, 1.0f, "must lie in [0, 1] (beta_sigmoid takes logits)"};
// beta as a write strength under allow_neg_eigval: the transition I - beta k k^T may have
// negative eigenvalues (down to -1 for a unit key).
inline constexpr InputDomain kDoubleUnitValues = {
    0.0f, 2.0f, "must lie in [0, 2] with allow_neg_eigval (beta_sigmoid takes logits)"};

LUMEN_HOST_DEVICE inline constexpr InputDomain GateDomain(bool gate_raw) {
  return gate_raw ? kFiniteValues : kLogGateValues;
}
LUMEN_HOST_DEVICE inline constexpr InputDomain BetaDomain(bool beta_sigmoid,
                                                          bool allow_neg_eigval) {
  if (beta_sigmoid) return kFiniteValues;
  return allow_neg_eigval ? kDoubleUnitValues : kUnitValues;
}

LUMEN_HOST_DEVICE inline bool InDomain(float value, const InputDomain& domain) {
  return value >= domain.low && value <= domain.high;
}

// Index of the first of values[0..count) outside the domain, or count when none is. One
// pass without early exit decides (it vectorises); only a failing array is scanned again.
inline int64_t FirstOutOfDomain(const float* values, int64_t count, const InputDomain& domain) {
  const float low = domain.low, high = domain.high;
  int outside = 0;
#pragma omp simd reduction(| : outside)
  // & rather than &&: no branch per value, so the loop vectorises.
  for (int64_t i = 0; i < count; ++i) outside |= !((values[i] >= low) & (values[i] <= high));
  if (!outside) return count;
  for (int64_t i = 0; i < count; ++i) {
    if (!InDomain(values[i], domain)) return i;
  }
  return count;
}

}  // namespace lumen
