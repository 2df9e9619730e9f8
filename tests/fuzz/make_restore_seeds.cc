// Writes the seed corpus of the restore fuzzer into the directory given as argument: valid
// snapshots of the fuzzer's model (fp32, bf16, per-layer mixed dtypes, an empty session), a
// newer version, another model's snapshot, truncations, token counts at and past
// the limit of 2^62, sizes at the overflow edge, and the same bodies in the fuzzer's "seal it
// for me" mode (odd first byte) so that mutations start past the checksum.
//
//   lumen_restore_seeds DIR

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <utility>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/fuzz/restore_fuzz_model.h"

namespace {

using namespace lumen_fuzz;
using Bytes = std::vector<uint8_t>;

int written = 0;

void Write(const std::string& dir, const std::string& name, const Bytes& bytes) {
  const std::string path = dir + "/" + name;
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), file) != bytes.size() ||
      std::fclose(file) != 0) {
    std::perror(path.c_str());
    std::exit(1);
  }
  ++written;
}

// The fuzzer's sealed modes: 0x01 + body (checksum appended), 0x03 + snapshot (checksum
// written over the last 8 bytes).
void WriteSealedForms(const std::string& dir, const std::string& name, const Bytes& snapshot) {
  Bytes appended = {0x01};
  appended.insert(appended.end(), snapshot.begin(), snapshot.end() - kChecksumBytes);
  Write(dir, name + ".body", appended);
  Bytes patched = {0x03};
  patched.insert(patched.end(), snapshot.begin(), snapshot.end());
  Write(dir, name + ".patch", patched);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  Objects objects = CreateObjects();
  lumen_session* session = nullptr;
  Check(lumen_session_create(objects.engine, &session), "session");

  const Bytes empty = TakeSnapshot(session, LUMEN_DTYPE_FLOAT32);
  AddHistory(session, objects.model, /*seed=*/1, /*tokens=*/7);
  AddHistory(session, objects.model, /*seed=*/2, /*tokens=*/70);
  const Bytes fp32 = TakeSnapshot(session, LUMEN_DTYPE_FLOAT32);
  const Bytes bf16 = TakeSnapshot(session, LUMEN_DTYPE_BFLOAT16);

  // Layer 0 in fp32, layer 1 in bf16: the writer never mixes, the format allows it.
  Bytes mixed(fp32.begin(), fp32.begin() + kHeaderBytes + kRecordBytes);
  const size_t record1 = kHeaderBytes + kRecordBytes;
  mixed.insert(mixed.end(), bf16.begin() + record1, bf16.begin() + record1 + kRecordBytes);
  const size_t fp32_payloads = kHeaderBytes + 2 * kRecordBytes;
  const size_t layer0_bytes = GetU64(fp32.data() + kHeaderBytes + kRecordPayloadBytes);
  const size_t layer0_bf16 = GetU64(bf16.data() + kHeaderBytes + kRecordPayloadBytes);
  mixed.insert(mixed.end(), fp32.begin() + fp32_payloads,
               fp32.begin() + fp32_payloads + layer0_bytes);
  mixed.insert(mixed.end(), bf16.begin() + fp32_payloads + layer0_bf16,
               bf16.end() - kChecksumBytes);
  AppendChecksum(mixed);
  {
    lumen_session* check = nullptr;
    Check(lumen_session_create(objects.engine, &check), "check session");
    Check(lumen_session_restore(check, mixed.data(), static_cast<int64_t>(mixed.size())),
          "restore the mixed-dtype seed");
    lumen_session_destroy(check);
  }

  Bytes newer = fp32;
  PutU32(newer.data() + 8, kFormatVersion + 1);
  Reseal(newer);

  // The same snapshot in format 1: 48-byte records (no conv width), which still restores.
  Bytes version1(fp32.begin(), fp32.begin() + kHeaderBytes);
  PutU32(version1.data() + 8, 1);
  for (size_t layer = 0; layer < 2; ++layer) {
    const auto record = fp32.begin() + kHeaderBytes + layer * kRecordBytes;
    version1.insert(version1.end(), record, record + kRecordBytesVersion1);
  }
  version1.insert(version1.end(), fp32.begin() + kHeaderBytes + 2 * kRecordBytes, fp32.end());
  Reseal(version1);
  {
    lumen_session* check = nullptr;
    Check(lumen_session_create(objects.engine, &check), "check session");
    Check(lumen_session_restore(check, version1.data(), static_cast<int64_t>(version1.size())),
          "restore the format-1 seed");
    lumen_session_destroy(check);
  }

  // Token counts at the limit (valid) and past it, and sizes at the overflow edge: payload
  // sizes near 2^63 and 2^64, a pair whose sum wraps around to the true total, and the
  // largest layer count.
  auto edited = [&](std::initializer_list<std::pair<size_t, uint64_t>> fields) {
    Bytes bytes = fp32;
    for (const auto& [offset, value] : fields) PutU64(bytes.data() + offset, value);
    Reseal(bytes);
    return bytes;
  };
  constexpr uint64_t kMaxTokens = uint64_t{1} << 62;
  const size_t tokens0 = kHeaderBytes + kRecordTokens;
  const size_t tokens1 = tokens0 + kRecordBytes;
  const size_t payload0 = kHeaderBytes + kRecordPayloadBytes;
  const size_t payload1 = payload0 + kRecordBytes;
  const uint64_t size0 = GetU64(fp32.data() + payload0);
  const uint64_t size1 = GetU64(fp32.data() + payload1);
  const Bytes tokens_at_max = edited({{tokens0, kMaxTokens}, {tokens1, kMaxTokens - 1}});
  Write(dir, "tokens_at_max", tokens_at_max);
  Write(dir, "tokens_past_max", edited({{tokens0, kMaxTokens + 1}}));
  Write(dir, "tokens_int64_max", edited({{tokens1, uint64_t{INT64_MAX}}}));
  Write(dir, "tokens_uint64_max", edited({{tokens0, ~uint64_t{0}}}));
  Write(dir, "payload_int64_max", edited({{payload0, uint64_t{INT64_MAX}}}));
  Write(dir, "payload_uint64_max", edited({{payload1, ~uint64_t{0}}}));
  constexpr uint64_t kHalfWrap = uint64_t{1} << 63;
  Write(dir, "payload_sum_wraps",
        edited({{payload0, size0 + kHalfWrap}, {payload1, size1 + kHalfWrap}}));
  Bytes most_layers = fp32;
  PutU32(most_layers.data() + 24, 0xffffffffu);
  Reseal(most_layers);
  Write(dir, "layers_uint32_max", most_layers);
  {
    lumen_session* check = nullptr;
    Check(lumen_session_create(objects.engine, &check), "check session");
    Check(lumen_session_restore(check, tokens_at_max.data(),
                                static_cast<int64_t>(tokens_at_max.size())),
          "restore the token-limit seed");
    lumen_session_destroy(check);
  }

  Objects other = CreateObjects(/*variant=*/1);
  lumen_session* other_session = nullptr;
  Check(lumen_session_create(other.engine, &other_session), "other session");
  AddHistory(other_session, other.model, /*seed=*/3, /*tokens=*/5);
  const Bytes foreign = TakeSnapshot(other_session, LUMEN_DTYPE_FLOAT32);

  Write(dir, "fp32", fp32);
  Write(dir, "bf16", bf16);
  Write(dir, "mixed", mixed);
  Write(dir, "empty_session", empty);
  Write(dir, "newer_version", newer);
  Write(dir, "version1", version1);
  Write(dir, "other_model", foreign);
  for (size_t length : {size_t{0}, size_t{8}, size_t{39}, kHeaderBytes + kChecksumBytes,
                        kHeaderBytes + kRecordBytes, kHeaderBytes + 2 * kRecordBytes + 8,
                        fp32.size() / 2, fp32.size() - 1}) {
    Write(dir, "truncated_" + std::to_string(length), Bytes(fp32.begin(), fp32.begin() + length));
  }
  WriteSealedForms(dir, "fp32", fp32);
  WriteSealedForms(dir, "bf16", bf16);
  WriteSealedForms(dir, "mixed", mixed);
  WriteSealedForms(dir, "other_model", foreign);
  WriteSealedForms(dir, "tokens_at_max", tokens_at_max);

  lumen_session_destroy(other_session);
  DestroyObjects(other);
  lumen_session_destroy(session);
  DestroyObjects(objects);
  std::printf("wrote %d seeds (snapshot of %zu bytes) to %s\n", written, fp32.size(),
              dir.c_str());
  return 0;
}
