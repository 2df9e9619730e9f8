#pragma once
// Snapshots on disk: atomic, durable saves and whole-file loads.

#include <string>

#include "absl/status/status.h"
#include "src/layer_spec.h"
#include "src/session.h"

namespace lumen {

// Writes the session's snapshot to a temporary file beside `path`, flushes it to disk,
// renames it over `path` and flushes the directory, so that a crash leaves the old file or
// the new one. Fails with LUMEN_ERROR_IO naming the step and the system's reason.
absl::Status SaveSnapshotFile(const Session& session, DType dtype, const std::string& path);

// Reads the file whole and restores the session from it (all or nothing).
absl::Status LoadSnapshotFile(Session& session, const std::string& path);

}  // namespace lumen
