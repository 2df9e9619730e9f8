#include "src/snapshot_format.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/checked_int.h"
#include "src/dtype_convert.h"
#include "src/status.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "lumen's snapshot code stores the host's floats as they are: little-endian hosts only"
#endif

namespace lumen::snapshot {
namespace {

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
  return spec.state_count() * DTypeSize(dtype);
}

int64_t RecordBytes(uint32_t version) {
  return version == 1 ? kLayerRecordBytesVersion1 : kLayerRecordBytes;
}

// Layer record `layer` of a head that passed CheckHead.
const char* Record(const char* head, int32_t layer) {
  return head + kHeaderBytes + layer * RecordBytes(FormatVersion(head));
}

// Converts `count` state values between the two storage types (fp32 <-> bf16).
void ConvertState(const void* src, DType from, void* dst, DType to, int64_t count) {
  if (from == to) {
    std::memcpy(dst, src, count * DTypeSize(from));
  } else if (from == DType::kFloat32) {
    StoreFromFloat(static_cast<const float*>(src), to, dst, count);
  } else {
    LoadAsFloat(src, from, static_cast<float*>(dst), count);
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
absl::Status CheckLayerRecord(const char* record, uint32_t version, int32_t index,
                              const LayerSpec& spec) {
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
  if (GetU32(record + 24) != kLayoutCanonical) {
    return Corrupt(absl::StrCat("layer ", index, " has unknown layout ", GetU32(record + 24)));
  }
  if (GetU32(record + 28) != static_cast<uint32_t>(spec.normalize)) {
    return Mismatch(absl::StrCat("layer ", index, (spec.normalize ? " lacks" : " has"),
                                 " a normalizer in the snapshot"));
  }
  // Version 1 knew no convolutions: its layers have none.
  const uint32_t conv_size = version >= 2 ? GetU32(record + 48) : 0;
  if (conv_size != static_cast<uint32_t>(spec.conv_size)) {
    return Mismatch(absl::StrCat("layer ", index, " has conv_size ", conv_size,
                                 " in the snapshot but ", spec.conv_size,
                                 " in the session's model"));
  }
  if (version >= 2 && GetU32(record + 52) != 0) {
    return Corrupt(absl::StrCat("layer ", index, " has reserved bits set"));
  }
  const uint64_t tokens = GetU64(record + 32);
  if (static_cast<int64_t>(tokens) < 0) {
    return Corrupt(absl::StrCat("layer ", index, " has a negative token count"));
  }
  if (tokens > static_cast<uint64_t>(kMaxTokens)) {
    return Corrupt(absl::StrCat("layer ", index, " has consumed ", tokens,
                                " tokens, more than the limit of ", kMaxTokens));
  }
  if (GetU64(record + 40) != static_cast<uint64_t>(PayloadBytes(spec, static_cast<DType>(dtype)))) {
    return Corrupt(absl::StrCat("layer ", index, " payload size ", GetU64(record + 40),
                                " does not match its dims"));
  }
  return absl::OkStatus();
}

}  // namespace

uint32_t FormatVersion(const char* head) { return GetU32(head + 8); }

int64_t HeadBytes(const Model& model) { return HeadBytes(model, kFormatVersion); }

int64_t HeadBytes(const Model& model, uint32_t version) {
  return kHeaderBytes + model.num_layers() * RecordBytes(version);
}

// Model::Create bounds the layers and the state so that no snapshot size can overflow.
static_assert(kHeaderBytes + int64_t{kMaxLayers} * kLayerRecordBytes + kChecksumBytes <=
              INT64_MAX - kMaxSessionBytes);

int64_t SnapshotSize(const Model& model, DType dtype) {
  return HeadBytes(model) + model.state_elements() * DTypeSize(dtype) + kChecksumBytes;
}

void WriteHead(const Session& session, DType dtype, char* out) {
  const Model& model = session.model();
  std::memcpy(out, kMagic, 8);
  PutU32(out + 8, kFormatVersion);
  PutU32(out + 12, static_cast<uint32_t>(lumen_version_number()));
  PutU64(out + 16, model.fingerprint());
  PutU32(out + 24, static_cast<uint32_t>(model.num_layers()));
  PutU32(out + 28, 0);
  char* record = out + kHeaderBytes;
  for (int32_t i = 0; i < model.num_layers(); ++i, record += kLayerRecordBytes) {
    const LayerSpec& spec = model.layer(i);
    PutU32(record, static_cast<uint32_t>(spec.family));
    PutU32(record + 4, spec.num_heads);
    PutU32(record + 8, spec.num_value_heads);
    PutU32(record + 12, spec.key_dim);
    PutU32(record + 16, spec.value_dim);
    PutU32(record + 20, static_cast<uint32_t>(dtype));
    PutU32(record + 24, kLayoutCanonical);
    PutU32(record + 28, spec.normalize ? 1 : 0);
    PutU64(record + 32, static_cast<uint64_t>(session.tokens(i)));
    PutU64(record + 40, static_cast<uint64_t>(PayloadBytes(spec, dtype)));
    PutU32(record + 48, static_cast<uint32_t>(spec.conv_size));
    PutU32(record + 52, 0);
  }
}

absl::Status CheckMagic(const char* in, int64_t size) {
  if (size < kMinimumBytes) {
    return Corrupt(absl::StrCat("truncated: ", size, " bytes, a snapshot has at least ",
                                kMinimumBytes));
  }
  if (std::memcmp(in, kMagic, 8) != 0) {
    return Corrupt("not a lumen snapshot (its first 8 bytes are not \"LUMENSNP\")");
  }
  return absl::OkStatus();
}

absl::Status CheckHead(const Model& model, const char* in, int64_t size) {
  const uint32_t version = GetU32(in + 8);
  if (version > kFormatVersion) {
    const uint32_t writer = GetU32(in + 12);
    return LumenError(LUMEN_ERROR_SNAPSHOT_VERSION,
                      absl::StrCat("the snapshot is in format version ", version,
                                   " (written by lumen ", writer / 10000, ".",
                                   writer / 100 % 100, ".", writer % 100,
                                   "); this library reads versions up to ",
                                   kFormatVersion));
  }
  if (version == 0) return Corrupt("format version 0");
  if (GetU32(in + 28) != 0) return Corrupt("reserved flags are set");
  const uint32_t num_layers = GetU32(in + 24);
  if (num_layers != static_cast<uint32_t>(model.num_layers())) {
    return Mismatch(absl::StrCat("it has ", num_layers, " layers, the session's model has ",
                                 model.num_layers()));
  }
  const int64_t record_bytes = RecordBytes(version);
  CheckedInt64 expected_size =
      CheckedInt64(kHeaderBytes) + kChecksumBytes + CheckedInt64(num_layers) * record_bytes;
  if (size < expected_size.value()) return Corrupt("truncated layer records");
  const char* records = in + kHeaderBytes;
  for (int32_t i = 0; i < model.num_layers(); ++i) {
    const char* record = records + i * record_bytes;
    absl::Status status = CheckLayerRecord(record, version, i, model.layer(i));
    if (!status.ok()) return status;
    // Checked equal to the layer's payload size, which the model bounds.
    expected_size += static_cast<int64_t>(GetU64(record + 40));
  }
  if (GetU64(in + 16) != model.fingerprint()) {
    return Mismatch(absl::StrCat(
        "the layers have the same shapes but other options or parameters (model fingerprint ",
        absl::Hex(GetU64(in + 16)), " in the snapshot, ", absl::Hex(model.fingerprint()),
        " in the session)"));
  }
  if (!expected_size.ok() || size != expected_size.value()) {
    return Corrupt(absl::StrCat("it is ", size, " bytes, its layer records add up to ",
                                expected_size.value()));
  }
  return absl::OkStatus();
}

absl::Status ChecksumMismatch() {
  return Corrupt("checksum mismatch: the bytes are truncated or damaged");
}

bool PossibleSize(const Model& model, int64_t size) {
  return size >= SnapshotSize(model, DType::kBFloat16) &&
         size <= SnapshotSize(model, DType::kFloat32);
}

uint64_t StoredChecksum(const char* trailer) { return GetU64(trailer); }

std::vector<PayloadBlock> PayloadBlocks(const Model& model) {
  std::vector<PayloadBlock> blocks;
  const int64_t per_block = kBlockBytes / 4;
  for (int32_t i = 0; i < model.num_layers(); ++i) {
    const LayerSpec& spec = model.layer(i);
    const int64_t count = spec.state_count();
    for (int64_t first = 0; first < count; first += per_block) {
      blocks.push_back({i, first, std::min(per_block, count - first)});
    }
  }
  return blocks;
}

DType PayloadDType(const char* head, int32_t layer) {
  return static_cast<DType>(GetU32(Record(head, layer) + 20));
}

absl::Status ReadBlock(const Session& session, const PayloadBlock& block, DType dtype,
                       char* out, char* staging) {
  const LayerSpec& spec = session.model().layer(block.layer);
  const int64_t stored_size = DTypeSize(spec.state_dtype);
  const char* src =
      static_cast<const char*>(session.layer_state(block.layer)) + block.first * stored_size;
  Engine& engine = session.engine();
  if (spec.state_dtype == dtype) return engine.StateToHost(out, src, block.count * stored_size);
  absl::Status status = engine.StateToHost(staging, src, block.count * stored_size);
  if (status.ok()) ConvertState(staging, spec.state_dtype, out, dtype, block.count);
  return status;
}

absl::Status WriteBlock(const Session& session, const PayloadBlock& block, DType dtype,
                        const char* in, void* state_block, char* staging) {
  const Model& model = session.model();
  const LayerSpec& spec = model.layer(block.layer);
  const int64_t stored_size = DTypeSize(spec.state_dtype);
  char* dst = static_cast<char*>(state_block) + model.state_offset(block.layer) +
              block.first * stored_size;
  Engine& engine = session.engine();
  if (spec.state_dtype == dtype) return engine.StateFromHost(dst, in, block.count * stored_size);
  ConvertState(in, dtype, staging, spec.state_dtype, block.count);
  return engine.StateFromHost(dst, staging, block.count * stored_size);
}

void Commit(Session& session, void* state_block, const char* head) {
  Engine& engine = session.engine();
  engine.ReturnSpareState(session.ExchangeBlock(state_block));
  for (int32_t i = 0; i < session.model().num_layers(); ++i) {
    session.SetTokens(i, static_cast<int64_t>(GetU64(Record(head, i) + 32)));
  }
}

}  // namespace lumen::snapshot
