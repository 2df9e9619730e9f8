#pragma once
// The element types of inputs, outputs and stored state, and conversions between fp32 and
// the 16-bit types (bf16, IEEE fp16). Round to nearest even; NaN stays NaN; infinities and
// subnormals are exact where the target type can hold them.

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "lumen/lumen.h"
#include "src/layer_traits.h"

namespace lumen {

inline int64_t DTypeSize(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

inline float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

inline uint32_t FloatToBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float BFloat16ToFloat(uint16_t value) { return BitsToFloat(uint32_t{value} << 16); }

// Branch-free, so that loops over it vectorise.
inline uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = FloatToBits(value);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

inline float Float16ToFloat(uint16_t value) {
  const uint32_t sign = uint32_t{value & 0x8000u} << 16;
  const uint32_t exponent = (value >> 10) & 0x1fu;
  const uint32_t mantissa = value & 0x3ffu;
  if (exponent == 0x1f) return BitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Subnormal: mantissa * 2^-24.
  const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
  return sign ? -magnitude : magnitude;
}

inline uint16_t FloatToFloat16(float value) {
  const uint32_t bits = FloatToBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // rounds to infinity
  if (magnitude < 0x38800000u) {                        // below the smallest normal
    // Scale so that one fp16 subnormal step is 1.0f, then round to nearest even.
    const float scaled = BitsToFloat(magnitude) * 16777216.0f;
    const uint32_t scaled_bits = FloatToBits(scaled + 8388608.0f) - 0x4b000000u;
    return sign | static_cast<uint16_t>(scaled_bits);
  }
  uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

// Reads `count` elements of `dtype` at src as fp32 into dst.
inline void LoadAsFloat(const void* src, DType dtype, float* dst, int64_t count) {
  const uint16_t* half = static_cast<const uint16_t*>(src);
  switch (dtype) {
    case DType::kFloat32:
      std::copy_n(static_cast<const float*>(src), count, dst);
      break;
    case DType::kBFloat16:
      for (int64_t i = 0; i < count; ++i) dst[i] = BFloat16ToFloat(half[i]);
      break;
    case DType::kFloat16:
      for (int64_t i = 0; i < count; ++i) dst[i] = Float16ToFloat(half[i]);
      break;
  }
}

// Writes `count` fp32 values at src as `dtype` into dst.
inline void StoreFromFloat(const float* src, DType dtype, void* dst, int64_t count) {
  uint16_t* half = static_cast<uint16_t*>(dst);
  switch (dtype) {
    case DType::kFloat32:
      std::copy_n(src, count, static_cast<float*>(dst));
      break;
    case DType::kBFloat16:
      for (int64_t i = 0; i < count; ++i) half[i] = FloatToBFloat16(src[i]);
      break;
    case DType::kFloat16:
      for (int64_t i = 0; i < count; ++i) half[i] = FloatToFloat16(src[i]);
      break;
  }
}

}  // namespace lumen
