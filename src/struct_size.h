#pragma once
// The struct_size check of every extensible struct a caller passes (layer, engine and
// snapshot options, reservations, layer inputs and output), after the Linux kernel's
// convention for extensible structs (copy_struct_from_user): a caller built against an older
// header passes a smaller size, one built against a newer header a larger one. lumen.h states
// the rule ("Conventions"); tests/header/conventions_test.cc proves it.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/struct_versions.h"

namespace lumen {

// Structs larger than this are not lumen structs of any version.
inline constexpr uint32_t kMaxStructSize = 4096;

// OK when struct_size is first_size (the struct's first version), or ends one of the fields
// added since (added_fields, in order, tiling [first_size, known_size)), or when it is larger
// than known_size (sizeof in this library's header), at most kMaxStructSize, and every byte
// of user_struct beyond known_size is zero: fields this library does not know, left at their
// defaults. Otherwise INVALID_ARGUMENT: below first_size, ending inside an added field (no
// header ever had that size), above kMaxStructSize, or naming the offset of the first
// non-zero byte beyond the known fields. user_struct must hold struct_size bytes.
// `type_name` names the struct in the message; its init function is type_name_init.
absl::Status CheckStructSize(const void* user_struct, uint32_t struct_size, size_t first_size,
                             absl::Span<const AddedField> added_fields, size_t known_size,
                             absl::string_view type_name);

template <typename Struct>
absl::Status CheckStructSize(const Struct& user_struct, absl::string_view type_name) {
  return CheckStructSize(&user_struct, user_struct.struct_size,
                         StructHistory<Struct>::kFirstSize,
                         StructHistory<Struct>::kAddedFields, sizeof(Struct), type_name);
}

// The caller's struct as this library's version of it: the bytes the caller passed (at most
// sizeof(Struct)), and zeros, each added field's default, for the fields an older caller's
// struct lacks. Call after CheckStructSize.
template <typename Struct>
Struct CurrentLayout(const Struct& user_struct) {
  Struct current{};
  std::memcpy(&current, &user_struct,
              std::min<size_t>(user_struct.struct_size, sizeof(Struct)));
  return current;
}

// The bytes of an out-struct of `size` bytes that this library fills: the fields that lie
// wholly inside it, at least the first version's and at most sizeof(Struct).
template <typename Struct>
uint32_t WholeFieldsSize(uint32_t size) {
  uint32_t whole = StructHistory<Struct>::kFirstSize;
  for (const AddedField& field : StructHistory<Struct>::kAddedFields) {
    if (field.offset + field.size <= size) whole = field.offset + field.size;
  }
  return whole;
}

}  // namespace lumen
