#pragma once
// The snapshot format: a session's state and token counts as self-describing, checksummed
// bytes. docs/snapshot_format.md is the specification; this is its one implementation.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/layer_spec.h"
#include "src/session.h"

namespace lumen {

inline constexpr char kSnapshotMagic[8] = {'L', 'U', 'M', 'E', 'N', 'S', 'N', 'P'};
inline constexpr uint32_t kSnapshotFormatVersion = 1;
inline constexpr int64_t kSnapshotHeaderBytes = 32;
inline constexpr int64_t kSnapshotLayerRecordBytes = 48;
inline constexpr int64_t kSnapshotChecksumBytes = 8;
inline constexpr uint32_t kSnapshotLayoutCanonical = 1;  // [HV, K, V], then [HV, K]

// Bytes of a snapshot of a session of `model` with its state stored as `dtype`.
int64_t SnapshotSize(const Model& model, DType dtype);

// Writes the snapshot into buffer[0..capacity); fails with LUMEN_ERROR_BUFFER_TOO_SMALL
// before writing anything when it does not fit.
absl::Status WriteSnapshot(const Session& session, DType dtype, void* buffer,
                           int64_t capacity);

// Checks every byte of a snapshot against the session's model and, only if all is well,
// replaces the session's state and token counts.
absl::Status RestoreSnapshot(Session& session, const void* data, int64_t size);

}  // namespace lumen
