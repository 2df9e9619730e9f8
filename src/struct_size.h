#pragma once
// The struct_size check of every extensible struct a caller passes (layer, engine and
// snapshot options, layer inputs and output), after the Linux kernel's convention for
// extensible structs (copy_struct_from_user): a caller built against an older header passes
// a smaller size, one built against a newer header a larger one.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace lumen {

// Structs larger than this are not lumen structs of any version.
inline constexpr uint32_t kMaxStructSize = 4096;

// OK when min_size <= struct_size <= known_size (known_size: sizeof the struct in this
// library's header; min_size: the size of its first version, so an older caller's struct is
// accepted and the fields it lacks take their defaults), or when struct_size is larger and
// every byte of user_struct beyond known_size is zero: fields this library does not know,
// left at their defaults. Otherwise INVALID_ARGUMENT: smaller than min_size, above
// kMaxStructSize, or naming the offset of the first non-zero byte beyond the known fields.
// user_struct must hold struct_size bytes. `type_name` names the struct in the message; its
// init function is type_name_init.
absl::Status CheckStructSize(const void* user_struct, uint32_t struct_size, size_t min_size,
                             size_t known_size, absl::string_view type_name);

// For a struct still at its first version (min_size = sizeof), or with the size of its
// first version given.
template <typename Struct>
absl::Status CheckStructSize(const Struct& user_struct, absl::string_view type_name,
                             size_t min_size = sizeof(Struct)) {
  return CheckStructSize(&user_struct, user_struct.struct_size, min_size, sizeof(Struct),
                         type_name);
}

// The caller's struct as this library's version of it: the bytes the caller passed (at most
// sizeof(Struct)), and zeros, each new field's default, for the fields an older caller's
// struct lacks. Call after CheckStructSize.
template <typename Struct>
Struct CurrentLayout(const Struct& user_struct) {
  Struct current{};
  std::memcpy(&current, &user_struct,
              std::min<size_t>(user_struct.struct_size, sizeof(Struct)));
  return current;
}

}  // namespace lumen
