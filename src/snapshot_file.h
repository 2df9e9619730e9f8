#pragma once
// Snapshots on disk: atomic, durable saves and whole-file loads.

#include <string>

#include "absl/status/status.h"
#include "src/layer_spec.h"
#include "src/session.h"

namespace lumen {

// Writes the session's snapshot to a temporary file beside the file `path` names (after its
// symbolic links), flushes it to disk, renames it over that file and flushes the directory,
// so that a crash leaves the old file or the new one. The temporary file's name is fixed per
// target and short, and a save holds it locked: the next save to the same path reuses what
// a killed save left. Fails with LUMEN_ERROR_IO naming the step and the system's reason.
absl::Status SaveSnapshotFile(const Session& session, DType dtype, const std::string& path);

// Restores the session from a regular file (all or nothing), streaming it through a small
// buffer; never waits on a FIFO or device, and reads only the head of a file whose size no
// snapshot of the session's model has.
absl::Status LoadSnapshotFile(Session& session, const std::string& path);

}  // namespace lumen
