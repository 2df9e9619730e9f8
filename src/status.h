#pragma once
// absl::Status carrying an exact lumen_status, for the codes absl has no twin for
// (a buffer too small, a corrupt snapshot, a newer snapshot format, file errors).

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "lumen/lumen.h"

namespace lumen {

// An error whose lumen_status is `code`.
absl::Status LumenError(lumen_status code, absl::string_view message);

// The lumen_status of any status: the one LumenError attached, else the natural mapping
// of absl's code.
lumen_status LumenStatusOf(const absl::Status& status);

}  // namespace lumen
