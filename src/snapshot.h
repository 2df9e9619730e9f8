#pragma once
// Snapshots in memory: a session's state and token counts as self-describing, checksummed
// bytes in a caller's buffer, and back (format: src/snapshot_format.h).

#include <cstdint>

#include "absl/status/status.h"
#include "src/layer_spec.h"
#include "src/session.h"

namespace lumen {

// Bytes of a snapshot of a session of `model` with its state stored as `dtype`.
int64_t SnapshotSize(const Model& model, DType dtype);

// Writes the snapshot into buffer[0..capacity); fails with LUMEN_ERROR_BUFFER_TOO_SMALL
// before writing anything when it does not fit.
absl::Status WriteSnapshot(const Session& session, DType dtype, void* buffer,
                           int64_t capacity);

// Checks every byte of a snapshot against the session's model and, only if all is well,
// replaces the session's state and token counts.
absl::Status RestoreSnapshot(Session& session, const void* data, int64_t size);

// The same for a session the caller keeps resident: the engine's SessionResidency, which
// evicts and reloads sessions with them under its lock (the two above pin the session).
// RestoreResidentSnapshot also gives an evicted session (no state block) a block of its own.
absl::Status WriteResidentSnapshot(const Session& session, DType dtype, void* buffer,
                                   int64_t capacity);
absl::Status RestoreResidentSnapshot(Session& session, const void* data, int64_t size);

}  // namespace lumen
