#include "src/snapshot.h"

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/checksum.h"
#include "src/snapshot_format.h"
#include "src/status.h"

namespace lumen {
namespace {

using snapshot::PayloadBlock;

// Below this many payload bytes a second thread costs more than it saves.
constexpr int64_t kConcurrentBytes = int64_t{1} << 20;

// Runs `copy` and `hash`, on two threads when the payload is large. `hash` may wait for
// `copy`'s progress; `copy` never waits, so the pair always finishes.
void CopyAndHash(Engine& engine, int64_t payload_bytes, const std::function<void()>& copy,
                 const std::function<void()>& hash) {
  if (payload_bytes < kConcurrentBytes) {
    copy();
    hash();
  } else {
    engine.RunConcurrently(copy, hash);
  }
}

// Where each block's bytes start, the payload being `payload`, blocks back to back.
template <typename Char>
std::vector<Char*> BlockStarts(const std::vector<PayloadBlock>& blocks, Char* payload,
                               const std::function<DType(int32_t)>& dtype_of_layer) {
  std::vector<Char*> starts(blocks.size());
  for (size_t b = 0; b < blocks.size(); ++b) {
    starts[b] = payload;
    payload += blocks[b].count * DTypeSize(dtype_of_layer(blocks[b].layer));
  }
  return starts;
}

}  // namespace

int64_t SnapshotSize(const Model& model, DType dtype) {
  return snapshot::SnapshotSize(model, dtype);
}

absl::Status WriteSnapshot(const Session& session, DType dtype, void* buffer,
                           int64_t capacity) {
  if (absl::Status status = session.CheckNoTentativeTokens(); !status.ok()) return status;
  Session* self = const_cast<Session*>(&session);  // pinning changes residency only
  PinnedSessions pinned(session.engine(), {&self, 1});
  if (!pinned.status().ok()) return pinned.status();
  return WriteResidentSnapshot(session, dtype, buffer, capacity);
}

absl::Status RestoreSnapshot(Session& session, const void* data, int64_t size) {
  if (absl::Status status = session.CheckNoTentativeTokens(); !status.ok()) return status;
  Session* self = &session;
  PinnedSessions pinned(session.engine(), {&self, 1});
  if (!pinned.status().ok()) return pinned.status();
  absl::Status status = RestoreResidentSnapshot(session, data, size);
  // The restored state has no history to go back to.
  if (status.ok()) session.rewind().Reset(session.rewind().depth());
  return status;
}

absl::Status WriteResidentSnapshot(const Session& session, DType dtype, void* buffer,
                                   int64_t capacity) {
  const Model& model = session.model();
  const int64_t size = snapshot::SnapshotSize(model, dtype);
  if (capacity < size) {
    return LumenError(LUMEN_ERROR_BUFFER_TOO_SMALL,
                      absl::StrCat("the snapshot needs ", size, " bytes, the buffer has ",
                                   capacity));
  }
  char* out = static_cast<char*>(buffer);
  const int64_t head_bytes = snapshot::HeadBytes(model);
  snapshot::WriteHead(session, dtype, out);

  // The copy writes the payload block by block and publishes its progress; the checksum
  // follows it, hashing each block once it is written.
  const std::vector<PayloadBlock> blocks = snapshot::PayloadBlocks(model);
  const std::vector<char*> starts =
      BlockStarts<char>(blocks, out + head_bytes, [dtype](int32_t) { return dtype; });
  std::unique_ptr<char[]> staging(new char[snapshot::kBlockBytes]);
  std::atomic<size_t> copied{0};
  std::atomic<bool> copy_failed{false};
  absl::Status copy_status;
  auto copy = [&] {
    for (size_t b = 0; b < blocks.size(); ++b) {
      copy_status = snapshot::ReadBlock(session, blocks[b], dtype, starts[b], staging.get());
      if (!copy_status.ok()) {
        copy_failed.store(true, std::memory_order_release);
        return;
      }
      copied.store(b + 1, std::memory_order_release);
    }
  };
  uint64_t checksum = 0;
  auto hash = [&] {
    ChecksumStream stream;
    stream.Update(out, head_bytes);
    for (size_t b = 0; b < blocks.size(); ++b) {
      while (copied.load(std::memory_order_acquire) <= b) {
        if (copy_failed.load(std::memory_order_acquire)) return;
        std::this_thread::yield();
      }
      stream.Update(starts[b], blocks[b].count * DTypeSize(dtype));
    }
    checksum = stream.Digest();
  };
  CopyAndHash(session.engine(), size - head_bytes - snapshot::kChecksumBytes, copy, hash);
  if (!copy_status.ok()) return copy_status;
  std::memcpy(out + size - snapshot::kChecksumBytes, &checksum, snapshot::kChecksumBytes);
  return absl::OkStatus();
}

absl::Status RestoreResidentSnapshot(Session& session, const void* data, int64_t size) {
  const Model& model = session.model();
  const char* in = static_cast<const char*>(data);
  if (absl::Status status = snapshot::CheckMagic(in, size); !status.ok()) return status;
  const int64_t checked = size - snapshot::kChecksumBytes;
  auto checksum_ok = [&] {
    return Checksum(in, checked) == snapshot::StoredChecksum(in + checked);
  };
  // Every format version ends with the checksum of all the bytes before it, so damage is
  // reported as such before anything the damaged bytes say.
  if (absl::Status head = snapshot::CheckHead(model, in, size); !head.ok()) {
    if (!snapshot::PossibleSize(model, size)) return head;
    return checksum_ok() ? head : snapshot::ChecksumMismatch();
  }

  // The payload goes into a spare block while the checksum is computed; only a verified
  // block replaces the session's, so a failure at any point leaves the session as it was.
  Engine& engine = session.engine();
  absl::StatusOr<void*> spare = engine.TakeSpareState();
  if (!spare.ok()) return spare.status();
  const std::vector<PayloadBlock> blocks = snapshot::PayloadBlocks(model);
  const int64_t head_bytes = snapshot::HeadBytes(model, snapshot::FormatVersion(in));
  auto dtype_of = [in](int32_t layer) { return snapshot::PayloadDType(in, layer); };
  const std::vector<const char*> starts = BlockStarts<const char>(blocks, in + head_bytes, dtype_of);
  std::unique_ptr<char[]> staging(new char[snapshot::kBlockBytes]);
  absl::Status copy_status;
  auto copy = [&] {
    for (size_t b = 0; b < blocks.size() && copy_status.ok(); ++b) {
      copy_status = snapshot::WriteBlock(session, blocks[b], dtype_of(blocks[b].layer),
                                         starts[b], *spare, staging.get());
    }
  };
  bool verified = false;
  auto hash = [&] { verified = checksum_ok(); };
  CopyAndHash(engine, checked - head_bytes, copy, hash);
  if (!copy_status.ok() || !verified) {
    engine.ReturnSpareState(*spare);
    return copy_status.ok() ? snapshot::ChecksumMismatch() : copy_status;
  }
  snapshot::Commit(session, *spare, in);
  return absl::OkStatus();
}

}  // namespace lumen
