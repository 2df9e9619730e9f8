// Writes the seed corpus of the restore fuzzer into the directory given as argument: valid
// snapshots of the fuzzer's model (fp32, bf16, per-layer mixed dtypes, an empty session), a
// newer version, another model's snapshot, truncations, and the same bodies in the fuzzer's
// "seal it for me" mode (odd first byte) so that mutations start past the checksum.
//
//   lumen_restore_seeds DIR

#include <cstdint>
#include <cstdio>
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

  lumen_session_destroy(other_session);
  DestroyObjects(other);
  lumen_session_destroy(session);
  DestroyObjects(objects);
  std::printf("wrote %d seeds (snapshot of %zu bytes) to %s\n", written, fp32.size(),
              dir.c_str());
  return 0;
}
