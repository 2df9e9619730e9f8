#pragma once
// The file:// session store: one directory, one file per key.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "src/session_store.h"

namespace lumen {

// Opens (creating its last component, mode 0700, if missing) the directory of a
// file:///path URI.
absl::StatusOr<std::unique_ptr<SessionStore>> OpenFileStore(const std::string& uri);

}  // namespace lumen
