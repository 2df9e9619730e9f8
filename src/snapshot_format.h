#pragma once
// The pieces of the snapshot format that every reader and writer shares: the head (header
// and layer records), its checks, and moving payload blocks between the bytes and a state
// block. docs/snapshot_format.md is the specification.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "src/layer_spec.h"
#include "src/model.h"
#include "src/session.h"

namespace lumen::snapshot {

inline constexpr char kMagic[8] = {'L', 'U', 'M', 'E', 'N', 'S', 'N', 'P'};
// Version 2 added the conv windows (payload) and the conv width (layer records); version 1
// snapshots, of layers without convolutions, still restore.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr int64_t kHeaderBytes = 32;
inline constexpr int64_t kLayerRecordBytes = 56;
inline constexpr int64_t kLayerRecordBytesVersion1 = 48;
inline constexpr int64_t kChecksumBytes = 8;
inline constexpr int64_t kMinimumBytes = kHeaderBytes + kChecksumBytes;
// [HV, K, V], then [HV, K], then (version 2) the conv windows [C, W-1] of q, k, v.
inline constexpr uint32_t kLayoutCanonical = 1;

// Payload moves in blocks of at most this many bytes of fp32 state, small enough to stay in
// cache between a copy and its checksum.
inline constexpr int64_t kBlockBytes = 256 * 1024;

// The format version a head says it is in (valid once CheckMagic has passed).
uint32_t FormatVersion(const char* head);
// Bytes of the header and the layer records, as written now or in a given format version
// (versions from 1 to kFormatVersion), and of a whole snapshot.
int64_t HeadBytes(const Model& model);
int64_t HeadBytes(const Model& model, uint32_t version);
int64_t SnapshotSize(const Model& model, DType dtype);

// Writes the header and layer records of the session's snapshot: HeadBytes(model) bytes.
void WriteHead(const Session& session, DType dtype, char* out);

// The checks a reader makes before the checksum: enough bytes and the magic.
absl::Status CheckMagic(const char* in, int64_t size);
// Everything but the checksum, from the head alone: format version, the model, the records'
// fields, and that they add up to `size`. The first problem in the specification's order.
absl::Status CheckHead(const Model& model, const char* head, int64_t size);
absl::Status ChecksumMismatch();
// Whether a snapshot of `model` can be `size` bytes: from every layer in bf16 to every layer
// in fp32. When the head has a problem, readers verify the checksum (to report damage before
// anything the damaged bytes say) only for a possible size: reading the rest of a file of
// any size could take as long as the file is large, and restore reports what load does.
bool PossibleSize(const Model& model, int64_t size);
uint64_t StoredChecksum(const char* trailer);

// A run of whole elements [first, first + count) of one layer's state.
struct PayloadBlock {
  int32_t layer;
  int64_t first;
  int64_t count;
};
// The payload in order, cut into blocks; `head` gives each layer's payload dtype.
std::vector<PayloadBlock> PayloadBlocks(const Model& model);
DType PayloadDType(const char* head, int32_t layer);

// Copies a block of the session's state into `out` as `dtype`. staging: kBlockBytes.
absl::Status ReadBlock(const Session& session, const PayloadBlock& block, DType dtype,
                       char* out, char* staging);
// Copies a block of payload bytes (in `dtype`) into a full state block of the session's
// engine. staging: kBlockBytes.
absl::Status WriteBlock(const Session& session, const PayloadBlock& block, DType dtype,
                        const char* in, void* state_block, char* staging);

// Makes a filled and verified state block the session's state and sets the token counts
// from the head; the replaced block goes back to the engine.
void Commit(Session& session, void* state_block, const char* head);

}  // namespace lumen::snapshot
