#pragma once
// The history of every extensible public struct: the size of its first version and the
// fields added since, in order. A caller built against an older header passes (or, for
// out-structs, owns) a struct that ends after one of those fields, or at the first version's
// end. A struct still at its first version has no fields added since (the primary template).
//
// Adding a field to a struct (at its end, marked "Since" in lumen.h): list it here, giving
// the struct a specialization if it has none (kFirstSize then is the old sizeof), so that
// callers of the older header keep working; AddedFieldsTile checks the list, and the
// struct_size tests of tests/header/conventions_test.cc list each struct's versions.

#include <array>
#include <cstddef>
#include <cstdint>

#include "lumen/lumen.h"

namespace lumen {

// A field added after a struct's first version: bytes [offset, offset + size).
struct AddedField {
  const char* name;
  uint32_t offset;
  uint32_t size;
};

#define LUMEN_ADDED_FIELD(type, field) \
  AddedField { #field, offsetof(type, field), sizeof(type::field) }

// A struct still at its first version: every caller's struct holds every field.
template <typename Struct>
struct StructHistory {
  static constexpr uint32_t kFirstSize = sizeof(Struct);
  static constexpr std::array<AddedField, 0> kAddedFields{};
};

// 0.1.0's lumen_layer_options ended before conv_size: its layers have no convolution. 0.3's
// ended before allow_neg_eigval: its layers keep beta in [0, 1] and the raw gate unbounded.
template <>
struct StructHistory<lumen_layer_options> {
  static constexpr uint32_t kFirstSize = offsetof(lumen_layer_options, conv_size);
  static constexpr std::array<AddedField, 4> kAddedFields{
      {LUMEN_ADDED_FIELD(lumen_layer_options, conv_size),
       LUMEN_ADDED_FIELD(lumen_layer_options, conv_activation),
       LUMEN_ADDED_FIELD(lumen_layer_options, allow_neg_eigval),
       LUMEN_ADDED_FIELD(lumen_layer_options, gate_lower_bound)}};
};

// 0.1.0's lumen_layer_inputs ended before stream: its calls use the default stream.
template <>
struct StructHistory<lumen_layer_inputs> {
  static constexpr uint32_t kFirstSize = offsetof(lumen_layer_inputs, stream);
  static constexpr std::array<AddedField, 1> kAddedFields{
      {LUMEN_ADDED_FIELD(lumen_layer_inputs, stream)}};
};

// 0.2's lumen_engine_options ended before memory_budget_bytes: its engines have no budget.
template <>
struct StructHistory<lumen_engine_options> {
  static constexpr uint32_t kFirstSize = offsetof(lumen_engine_options, memory_budget_bytes);
  static constexpr std::array<AddedField, 2> kAddedFields{
      {LUMEN_ADDED_FIELD(lumen_engine_options, memory_budget_bytes),
       LUMEN_ADDED_FIELD(lumen_engine_options, spill_directory)}};
};

#undef LUMEN_ADDED_FIELD

// Whether the added fields follow the first version and each other without a gap and end at
// sizeof: then every byte between the first version's end and sizeof belongs to exactly one
// added field, and a size in between either ends between two fields or cuts one.
template <typename Struct>
constexpr bool AddedFieldsTile() {
  uint32_t end = StructHistory<Struct>::kFirstSize;
  for (const AddedField& field : StructHistory<Struct>::kAddedFields) {
    if (field.offset != end) return false;
    end = field.offset + field.size;
  }
  return end == sizeof(Struct);
}

static_assert(AddedFieldsTile<lumen_layer_options>());
static_assert(AddedFieldsTile<lumen_layer_inputs>());
static_assert(AddedFieldsTile<lumen_layer_output>());
static_assert(AddedFieldsTile<lumen_engine_options>());
static_assert(AddedFieldsTile<lumen_reservation>());
static_assert(AddedFieldsTile<lumen_snapshot_options>());

// 0.3's lumen_memory_stats is the first: a caller's struct is at least that.
inline constexpr uint32_t kEngineStatsSizeV0 = sizeof(lumen_memory_stats);

}  // namespace lumen
