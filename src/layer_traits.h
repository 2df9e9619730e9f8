#pragma once
// What a layer's family and options mean to every kernel, CPU and GPU alike: its family, the
// feature map, the element types, how its state decays and whether it runs the delta rule.
// One spelling each, numbered as lumen.h's enums so that values cross the C ABI unchanged.
// Plain C++ over lumen.h alone: device code includes it too.

#include <cstdint>

#include "lumen/lumen.h"

namespace lumen {

enum class Family : int32_t {
  kLinearAttn = LUMEN_FAMILY_LINEAR_ATTN,
  kRetention = LUMEN_FAMILY_RETENTION,
  kSsd = LUMEN_FAMILY_SSD,
  kGla = LUMEN_FAMILY_GLA,
  kDeltaNet = LUMEN_FAMILY_DELTA_NET,
  kGatedDeltaNet = LUMEN_FAMILY_GATED_DELTA_NET,
  kKda = LUMEN_FAMILY_KDA,
};

enum class FeatureMap : int32_t {
  kIdentity = LUMEN_FEATURE_MAP_IDENTITY,
  kElu1 = LUMEN_FEATURE_MAP_ELU1,
  kRelu = LUMEN_FEATURE_MAP_RELU,
};

// Element types of inputs, outputs and stored state.
enum class DType : int32_t {
  kFloat32 = LUMEN_DTYPE_FLOAT32,
  kBFloat16 = LUMEN_DTYPE_BFLOAT16,
  kFloat16 = LUMEN_DTYPE_FLOAT16,
};

// How the state decays before each token's write (docs/spec.md §2). Retention's fixed
// per-head decay is a scalar gate whose log value the backend materialises from the layer.
enum class GateKind : int32_t {
  kNone = 0,        // linear_attn, delta_net
  kScalar = 1,      // retention, ssd, gated_delta_net: one log-decay per token and head
  kPerChannel = 2,  // gla, kda: one log-decay per token, head and key channel
};

// The family's name as the bindings and fla spell it ("gated_delta_net"); "unknown" for a
// value that is no family (lumen_family_string).
constexpr const char* FamilyName(Family family) {
  switch (family) {
    case Family::kLinearAttn: return "linear_attn";
    case Family::kRetention: return "retention";
    case Family::kSsd: return "ssd";
    case Family::kGla: return "gla";
    case Family::kDeltaNet: return "delta_net";
    case Family::kGatedDeltaNet: return "gated_delta_net";
    case Family::kKda: return "kda";
  }
  return "unknown";
}

constexpr GateKind FamilyGateKind(Family family) {
  switch (family) {
    case Family::kRetention:
    case Family::kSsd:
    case Family::kGatedDeltaNet:
      return GateKind::kScalar;
    case Family::kGla:
    case Family::kKda:
      return GateKind::kPerChannel;
    default:
      return GateKind::kNone;
  }
}

// delta_net, gated_delta_net and kda: erase before the write (docs/spec.md §2).
constexpr bool FamilyDeltaRule(Family family) {
  return family == Family::kDeltaNet || family == Family::kGatedDeltaNet ||
         family == Family::kKda;
}

}  // namespace lumen
