#include "src/struct_size.h"

#include "absl/strings/str_cat.h"
#include "lumen/lumen.h"

namespace lumen {
namespace {

// sizeof must end at the last field: a new field can never hide in tail padding, where the
// zero check beyond sizeof would not see it.
#define LUMEN_ENDS_AT_LAST_FIELD(type, last) \
  static_assert(offsetof(type, last) + sizeof(type::last) == sizeof(type))
LUMEN_ENDS_AT_LAST_FIELD(lumen_layer_options, gate_lower_bound);
LUMEN_ENDS_AT_LAST_FIELD(lumen_engine_options, spill_directory);
LUMEN_ENDS_AT_LAST_FIELD(lumen_layer_inputs, stream);
LUMEN_ENDS_AT_LAST_FIELD(lumen_layer_output, o_count);
LUMEN_ENDS_AT_LAST_FIELD(lumen_snapshot_options, state_dtype);
LUMEN_ENDS_AT_LAST_FIELD(lumen_store_options, part_bytes);
LUMEN_ENDS_AT_LAST_FIELD(lumen_store_save_options, expected_version);
LUMEN_ENDS_AT_LAST_FIELD(lumen_memory_stats, bytes_reloaded);
#undef LUMEN_ENDS_AT_LAST_FIELD

}  // namespace

absl::Status CheckStructSize(const void* user_struct, uint32_t struct_size, size_t first_size,
                             absl::Span<const AddedField> added_fields, size_t known_size,
                             absl::string_view type_name) {
  if (struct_size < first_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        type_name, ".struct_size is ", struct_size, ", smaller than the ", first_size,
        " bytes of its first version: the struct is too small; fill it with ", type_name,
        "_init"));
  }
  for (const AddedField& field : added_fields) {
    if (field.offset < struct_size && struct_size < field.offset + field.size) {
      return absl::InvalidArgumentError(absl::StrCat(
          type_name, ".struct_size is ", struct_size, ", which ends inside field ", field.name,
          " (bytes ", field.offset, " to ", field.offset + field.size,
          "): no lumen.h has that size; fill it with ", type_name, "_init"));
    }
  }
  if (struct_size > kMaxStructSize) {
    return absl::InvalidArgumentError(absl::StrCat(type_name, ".struct_size is ", struct_size,
                                                   ", more than any lumen struct (",
                                                   kMaxStructSize, "): fill it with ",
                                                   type_name, "_init"));
  }
  const unsigned char* bytes = static_cast<const unsigned char*>(user_struct);
  for (size_t offset = known_size; offset < struct_size; ++offset) {
    if (bytes[offset] != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          type_name, ".struct_size is ", struct_size, " and byte ", offset,
          " is not zero, but this library (lumen ", lumen_version_string(), ") knows only the ",
          known_size, " bytes before it: the caller sets a field from a newer lumen.h"));
    }
  }
  return absl::OkStatus();
}

}  // namespace lumen
