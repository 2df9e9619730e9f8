#include "src/snapshot.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/checksum.h"
#include "src/dtype_convert.h"
#include "src/status.h"


#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "lumen's snapshot code stores the host's floats as they are: little-endian hosts only"
#endif

namespace lumen {
namespace {

// State moves through the checksum in blocks small enough to be hashed while still in cache.
constexpr int64_t kBlockBytes = 256 * 1024;

void PutU32(char* out, uint32_t value) { std::memcpy(out, &value, 4); }
void PutU64(char* out, uint64_t value) { std::memcpy(out, &value, 8); }
uint32_t GetU32(const char* in) {
  uint32_t value;
  std::memcpy(&value, in, 4);
  return value;
}
uint64_t GetU64(const char* in) {
  uint64_t value;
  std::memcpy(&value, in, 8);
  return value;
}

int64_t PayloadBytes(const LayerSpec& spec, DType dtype) {
  return (spec.matrix_count() + spec.normalizer_count()) * DTypeSize(dtype);
}

// Converts `count` state values between the two storage types (fp32 <-> bf16).
void ConvertState(const void* src, DType from, void* dst, DType to, int64_t count) {
  if (from == to) {
    std::memcpy(dst, src, count * DTypeSize(from));
  } else if (from == DType::kFloat32) {
    for (int64_t i = 0; i < count; ++i) {
      static_cast<uint16_t*>(dst)[i] = FloatToBFloat16(static_cast<const float*>(src)[i]);
    }
  } else {
    for (int64_t i = 0; i < count; ++i) {
      static_cast<float*>(dst)[i] = BFloat16ToFloat(static_cast<const uint16_t*>(src)[i]);
    }
  }
}

std::string DescribeLayer(Family family, uint32_t h, uint32_t hv, uint32_t k, uint32_t v) {
  return absl::StrCat(FamilyName(family), " H=", h, " HV=", hv, " K=", k, " V=", v);
}

absl::Status Corrupt(absl::string_view what) {
  return LumenError(LUMEN_ERROR_CORRUPT_SNAPSHOT, absl::StrCat("corrupt snapshot: ", what));
}

absl::Status Mismatch(absl::string_view what) {
  return LumenError(LUMEN_ERROR_MODEL_MISMATCH,
                    absl::StrCat("the snapshot is of another model: ", what));
}

// Checks a layer record against the session's layer; the payload must match too.
absl::Status CheckLayerRecord(const char* record, int32_t index, const LayerSpec& spec) {
  const uint32_t family = GetU32(record);
  const uint32_t h = GetU32(record + 4), hv = GetU32(record + 8);
  const uint32_t k = GetU32(record + 12), v = GetU32(record + 16);
  if (family != static_cast<uint32_t>(spec.family) ||
      h != static_cast<uint32_t>(spec.num_heads) ||
      hv != static_cast<uint32_t>(spec.num_value_heads) ||
      k != static_cast<uint32_t>(spec.key_dim) || v != static_cast<uint32_t>(spec.value_dim)) {
    const std::string snapshot_layer =
        family >= LUMEN_FAMILY_LINEAR_ATTN && family <= LUMEN_FAMILY_KDA
            ? DescribeLayer(static_cast<Family>(family), h, hv, k, v)
            : absl::StrCat("family ", family);
    return Mismatch(absl::StrCat(
        "layer ", index, " is ", snapshot_layer, " in the snapshot but ",
        DescribeLayer(spec.family, spec.num_heads, spec.num_value_heads, spec.key_dim,
                      spec.value_dim),
        " in the session's model"));
  }
  const uint32_t dtype = GetU32(record + 20);
  if (dtype != LUMEN_DTYPE_FLOAT32 && dtype != LUMEN_DTYPE_BFLOAT16) {
    return Corrupt(absl::StrCat("layer ", index, " has unknown state dtype ", dtype));
  }
  if (GetU32(record + 24) != kSnapshotLayoutCanonical) {
    return Corrupt(absl::StrCat("layer ", index, " has unknown layout ", GetU32(record + 24)));
  }
  if (GetU32(record + 28) != static_cast<uint32_t>(spec.normalize)) {
    return Mismatch(absl::StrCat("layer ", index, (spec.normalize ? " lacks" : " has"),
                                 " a normalizer in the snapshot"));
  }
  if (static_cast<int64_t>(GetU64(record + 32)) < 0) {
    return Corrupt(absl::StrCat("layer ", index, " has a negative token count"));
  }
  if (GetU64(record + 40) != static_cast<uint64_t>(PayloadBytes(spec, static_cast<DType>(dtype)))) {
    return Corrupt(absl::StrCat("layer ", index, " payload size ", GetU64(record + 40),
                                " does not match its dims"));
  }
  return absl::OkStatus();
}

// Below this many payload bytes a second thread costs more than it saves.
constexpr int64_t kConcurrentBytes = int64_t{1} << 20;

// The payload cut into blocks of whole elements: block i covers elements
// [first, first + count) of one layer's state.
struct PayloadBlock {
  int32_t layer;
  int64_t first;
  int64_t count;
};

std::vector<PayloadBlock> PayloadBlocks(const Model& model) {
  std::vector<PayloadBlock> blocks;
  const int64_t per_block = kBlockBytes / 4;
  for (int32_t i = 0; i < model.num_layers(); ++i) {
    const LayerSpec& spec = model.layer(i);
    const int64_t count = spec.matrix_count() + spec.normalizer_count();
    for (int64_t first = 0; first < count; first += per_block) {
      blocks.push_back({i, first, std::min(per_block, count - first)});
    }
  }
  return blocks;
}

// Runs `copy` and then `hash`, concurrently when the payload is large. `hash` may wait for
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

}  // namespace

int64_t SnapshotSize(const Model& model, DType dtype) {
  int64_t size = kSnapshotHeaderBytes + kSnapshotChecksumBytes;
  for (int32_t i = 0; i < model.num_layers(); ++i) {
    size += kSnapshotLayerRecordBytes + PayloadBytes(model.layer(i), dtype);
  }
  return size;
}

absl::Status WriteSnapshot(const Session& session, DType dtype, void* buffer,
                           int64_t capacity) {
  const Model& model = session.model();
  const int64_t size = SnapshotSize(model, dtype);
  if (capacity < size) {
    return LumenError(LUMEN_ERROR_BUFFER_TOO_SMALL,
                      absl::StrCat("the snapshot needs ", size, " bytes, the buffer has ",
                                   capacity));
  }
  char* out = static_cast<char*>(buffer);
  std::memcpy(out, kSnapshotMagic, 8);
  PutU32(out + 8, kSnapshotFormatVersion);
  PutU32(out + 12, static_cast<uint32_t>(lumen_version_number()));
  PutU64(out + 16, model.fingerprint());
  PutU32(out + 24, static_cast<uint32_t>(model.num_layers()));
  PutU32(out + 28, 0);
  char* record = out + kSnapshotHeaderBytes;
  for (int32_t i = 0; i < model.num_layers(); ++i, record += kSnapshotLayerRecordBytes) {
    const LayerSpec& spec = model.layer(i);
    PutU32(record, static_cast<uint32_t>(spec.family));
    PutU32(record + 4, spec.num_heads);
    PutU32(record + 8, spec.num_value_heads);
    PutU32(record + 12, spec.key_dim);
    PutU32(record + 16, spec.value_dim);
    PutU32(record + 20, static_cast<uint32_t>(dtype));
    PutU32(record + 24, kSnapshotLayoutCanonical);
    PutU32(record + 28, spec.normalize ? 1 : 0);
    PutU64(record + 32, static_cast<uint64_t>(session.tokens(i)));
    PutU64(record + 40, static_cast<uint64_t>(PayloadBytes(spec, dtype)));
  }

  // The copy writes the payload block by block and publishes its progress; the checksum
  // follows it, hashing each block once it is written.
  char* payload = record;
  const std::vector<PayloadBlock> blocks = PayloadBlocks(model);
  std::vector<char*> block_out(blocks.size());
  {
    char* at = payload;
    for (size_t b = 0; b < blocks.size(); ++b) {
      block_out[b] = at;
      at += blocks[b].count * DTypeSize(dtype);
    }
  }
  std::vector<char> staging(kBlockBytes);
  Backend& backend = session.engine().backend();
  std::atomic<size_t> copied{0};
  std::atomic<bool> copy_failed{false};
  absl::Status copy_status;
  auto copy = [&] {
    for (size_t b = 0; b < blocks.size(); ++b) {
      const LayerSpec& spec = model.layer(blocks[b].layer);
      const int64_t stored_size = DTypeSize(spec.state_dtype);
      const char* src = static_cast<const char*>(session.layer_state(blocks[b].layer)) +
                        blocks[b].first * stored_size;
      if (spec.state_dtype == dtype) {
        copy_status = backend.StateToHost(block_out[b], src, blocks[b].count * stored_size);
      } else {
        copy_status = backend.StateToHost(staging.data(), src, blocks[b].count * stored_size);
        if (copy_status.ok()) {
          ConvertState(staging.data(), spec.state_dtype, block_out[b], dtype, blocks[b].count);
        }
      }
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
    stream.Update(out, payload - out);
    for (size_t b = 0; b < blocks.size(); ++b) {
      while (copied.load(std::memory_order_acquire) <= b) {
        if (copy_failed.load(std::memory_order_acquire)) return;
        std::this_thread::yield();
      }
      stream.Update(block_out[b], blocks[b].count * DTypeSize(dtype));
    }
    checksum = stream.Digest();
  };
  CopyAndHash(session.engine(), size - (payload - out) - kSnapshotChecksumBytes, copy, hash);
  if (!copy_status.ok()) return copy_status;
  PutU64(out + size - kSnapshotChecksumBytes, checksum);
  return absl::OkStatus();
}

namespace {

// Checks everything but the checksum: format version, the model, and the records' fields
// and sizes. Returns the first problem in the order docs/snapshot_format.md gives.
absl::Status CheckStructure(const Model& model, const char* in, int64_t size) {
  const uint32_t version = GetU32(in + 8);
  if (version > kSnapshotFormatVersion) {
    const uint32_t writer = GetU32(in + 12);
    return LumenError(LUMEN_ERROR_SNAPSHOT_VERSION,
                      absl::StrCat("the snapshot is in format version ", version,
                                   " (written by lumen ", writer / 10000, ".",
                                   writer / 100 % 100, ".", writer % 100,
                                   "); this library reads versions up to ",
                                   kSnapshotFormatVersion));
  }
  if (version == 0) return Corrupt("format version 0");
  if (GetU32(in + 28) != 0) return Corrupt("reserved flags are set");
  const uint32_t num_layers = GetU32(in + 24);
  if (num_layers != static_cast<uint32_t>(model.num_layers())) {
    return Mismatch(absl::StrCat("it has ", num_layers, " layers, the session's model has ",
                                 model.num_layers()));
  }
  int64_t expected_size = kSnapshotHeaderBytes + kSnapshotChecksumBytes +
                          num_layers * kSnapshotLayerRecordBytes;
  if (size < expected_size) return Corrupt("truncated layer records");
  const char* records = in + kSnapshotHeaderBytes;
  for (int32_t i = 0; i < model.num_layers(); ++i) {
    const char* record = records + i * kSnapshotLayerRecordBytes;
    absl::Status status = CheckLayerRecord(record, i, model.layer(i));
    if (!status.ok()) return status;
    expected_size += static_cast<int64_t>(GetU64(record + 40));
  }
  if (GetU64(in + 16) != model.fingerprint()) {
    return Mismatch(absl::StrCat(
        "the layers have the same shapes but other options or parameters (model fingerprint ",
        absl::Hex(GetU64(in + 16)), " in the snapshot, ", absl::Hex(model.fingerprint()),
        " in the session)"));
  }
  if (size != expected_size) {
    return Corrupt(absl::StrCat("it is ", size, " bytes, its layer records add up to ",
                                expected_size));
  }
  return absl::OkStatus();
}

bool ChecksumMatches(const char* in, int64_t size) {
  return Checksum(in, size - kSnapshotChecksumBytes) ==
         GetU64(in + size - kSnapshotChecksumBytes);
}

absl::Status ChecksumMismatch() {
  return Corrupt("checksum mismatch: the bytes are truncated or damaged");
}

}  // namespace

absl::Status RestoreSnapshot(Session& session, const void* data, int64_t size) {
  const Model& model = session.model();
  const char* in = static_cast<const char*>(data);
  if (size < kSnapshotHeaderBytes + kSnapshotChecksumBytes) {
    return Corrupt(absl::StrCat("truncated: ", size, " bytes, a snapshot has at least ",
                                kSnapshotHeaderBytes + kSnapshotChecksumBytes));
  }
  if (std::memcmp(in, kSnapshotMagic, 8) != 0) {
    return Corrupt("not a lumen snapshot (its first 8 bytes are not \"LUMENSNP\")");
  }
  // Every format version ends with the checksum of all the bytes before it, so damage is
  // reported as such before anything the damaged bytes say.
  absl::Status structure = CheckStructure(model, in, size);
  if (!structure.ok()) return ChecksumMatches(in, size) ? structure : ChecksumMismatch();

  // The payload goes into a spare block while the checksum is computed; only a verified
  // block replaces the session's, so a failure at any point leaves the session as it was.
  Engine& engine = session.engine();
  absl::StatusOr<void*> spare = engine.TakeSpareState();
  if (!spare.ok()) return spare.status();
  const char* records = in + kSnapshotHeaderBytes;
  const char* payload = records + model.num_layers() * kSnapshotLayerRecordBytes;
  std::vector<char> staging;
  for (int32_t i = 0; i < model.num_layers(); ++i) {
    const LayerSpec& spec = model.layer(i);
    if (static_cast<DType>(GetU32(records + i * kSnapshotLayerRecordBytes + 20)) !=
        spec.state_dtype) {
      staging.resize(std::max<size_t>(staging.size(), spec.state_bytes()));
    }
  }
  absl::Status copy_status;
  auto copy = [&] {
    const char* at = payload;
    for (int32_t i = 0; i < model.num_layers() && copy_status.ok(); ++i) {
      const LayerSpec& spec = model.layer(i);
      const DType dtype =
          static_cast<DType>(GetU32(records + i * kSnapshotLayerRecordBytes + 20));
      const int64_t count = spec.matrix_count() + spec.normalizer_count();
      void* state = static_cast<char*>(*spare) + model.state_offset(i);
      if (dtype == spec.state_dtype) {
        copy_status = engine.backend().StateFromHost(state, at, count * DTypeSize(dtype));
      } else {
        ConvertState(at, dtype, staging.data(), spec.state_dtype, count);
        copy_status = engine.backend().StateFromHost(state, staging.data(), spec.state_bytes());
      }
      at += count * DTypeSize(dtype);
    }
  };
  bool checksum_ok = false;
  auto hash = [&] { checksum_ok = ChecksumMatches(in, size); };
  CopyAndHash(engine, size - (payload - in) - kSnapshotChecksumBytes, copy, hash);
  if (!copy_status.ok() || !checksum_ok) {
    engine.ReturnSpareState(*spare);
    return copy_status.ok() ? ChecksumMismatch() : copy_status;
  }

  engine.ReturnSpareState(session.ExchangeBlock(*spare));
  for (int32_t i = 0; i < model.num_layers(); ++i) {
    session.SetTokens(i, static_cast<int64_t>(GetU64(records + i * kSnapshotLayerRecordBytes + 32)));
  }
  return absl::OkStatus();
}

}  // namespace lumen
