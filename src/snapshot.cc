#include "src/snapshot.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/dtype_convert.h"
#include "src/status.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

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

  XXH3_state_t hash;
  XXH3_64bits_reset(&hash);
  XXH3_64bits_update(&hash, out, record - out);
  char* payload = record;
  std::vector<char> staging;
  Backend& backend = session.engine().backend();
  for (int32_t i = 0; i < model.num_layers(); ++i) {
    const LayerSpec& spec = model.layer(i);
    const int64_t count = spec.matrix_count() + spec.normalizer_count();
    const int64_t stored_size = DTypeSize(spec.state_dtype);
    const int64_t out_size = DTypeSize(dtype);
    const char* state = static_cast<const char*>(session.layer_state(i));
    // Move whole elements per block, so each block converts on its own.
    const int64_t block_count = kBlockBytes / 4;
    for (int64_t first = 0; first < count; first += block_count) {
      const int64_t n = std::min(block_count, count - first);
      char* dst = payload + first * out_size;
      if (spec.state_dtype == dtype) {
        absl::Status status = backend.StateToHost(dst, state + first * stored_size, n * out_size);
        if (!status.ok()) return status;
      } else {
        staging.resize(n * stored_size);
        absl::Status status =
            backend.StateToHost(staging.data(), state + first * stored_size, n * stored_size);
        if (!status.ok()) return status;
        ConvertState(staging.data(), spec.state_dtype, dst, dtype, n);
      }
      XXH3_64bits_update(&hash, dst, n * out_size);
    }
    payload += count * out_size;
  }
  PutU64(payload, XXH3_64bits_digest(&hash));
  return absl::OkStatus();
}

absl::Status RestoreSnapshot(Session& session, const void* data, int64_t size) {
  const Model& model = session.model();
  const char* in = static_cast<const char*>(data);
  if (in == nullptr) return absl::InvalidArgumentError("snapshot data is NULL");
  if (size < kSnapshotHeaderBytes + kSnapshotChecksumBytes) {
    return Corrupt(absl::StrCat("truncated: ", size, " bytes, a snapshot has at least ",
                                kSnapshotHeaderBytes + kSnapshotChecksumBytes));
  }
  if (std::memcmp(in, kSnapshotMagic, 8) != 0) {
    return Corrupt("not a lumen snapshot (its first 8 bytes are not \"LUMENSNP\")");
  }
  // Every format version ends with the checksum of all the bytes before it, so damage is
  // told apart from a newer version before anything else is read.
  if (XXH3_64bits(in, size - kSnapshotChecksumBytes) != GetU64(in + size - 8)) {
    return Corrupt("checksum mismatch: the bytes are truncated or damaged");
  }
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

  // Everything is checked: now the state changes.
  Backend& backend = session.engine().backend();
  const char* payload = records + num_layers * kSnapshotLayerRecordBytes;
  std::vector<char> staging;
  for (int32_t i = 0; i < model.num_layers(); ++i) {
    const LayerSpec& spec = model.layer(i);
    const char* record = records + i * kSnapshotLayerRecordBytes;
    const DType dtype = static_cast<DType>(GetU32(record + 20));
    const int64_t count = spec.matrix_count() + spec.normalizer_count();
    void* state = session.layer_state(i);
    absl::Status status;
    if (dtype == spec.state_dtype) {
      status = backend.StateFromHost(state, payload, count * DTypeSize(dtype));
    } else {
      staging.resize(count * DTypeSize(spec.state_dtype));
      ConvertState(payload, dtype, staging.data(), spec.state_dtype, count);
      status = backend.StateFromHost(state, staging.data(), staging.size());
    }
    if (!status.ok()) return status;
    payload += count * DTypeSize(dtype);
  }
  for (int32_t i = 0; i < model.num_layers(); ++i) {
    session.SetTokens(i, static_cast<int64_t>(GetU64(records + i * kSnapshotLayerRecordBytes + 32)));
  }
  return absl::OkStatus();
}

}  // namespace lumen
