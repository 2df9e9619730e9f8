// libFuzzer target for lumen_session_restore: whatever the bytes, restore either fails and
// leaves the session bitwise unchanged, or succeeds and leaves exactly the state and token
// counts the snapshot holds. Any violation abort()s, so libFuzzer reports it with the input.
//
// Every input is also written to a file and loaded with lumen_session_load, whose streamed
// reader must agree with restore: the same status, and on success the same state.
//
// Input modes (chosen by the first byte):
//   even first byte  the input is restored as it is (valid snapshots start with 'L', even);
//   odd first byte   the rest of the input is a snapshot body: a correct XXH3-64 checksum is
//                    appended (bit 1 clear) or written over its last 8 bytes (bit 1 set), so
//                    mutations get past the checksum and reach the parsing behind it.
//
// The model (tests/fuzz/restore_fuzz_model.h) has an fp32-state gated_delta_net layer and a
// bf16-state linear_attn layer with a normalizer. Before every input the session is put back
// into one fixed, non-zero base state.
//
// Invariants on success, beyond the state itself: re-snapshotting gives the input back, up to
// the fields the writer does not copy from the input (the writer's version and the reserved
// word of the header), whenever the input is in the form the writer produces (one payload
// dtype that the layers hold exactly, no NaN, which bf16 conversion may quiet).

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "lumen/lumen.h"
#include "tests/fuzz/restore_fuzz_model.h"

namespace {

using namespace lumen_fuzz;

// Everything the session holds, as the public API shows it.
struct SessionState {
  std::vector<std::vector<float>> parts;  // per layer: matrix, then normalizer if any
  std::vector<int64_t> tokens;
};

[[noreturn]] void Violation(const char* what) {
  std::fprintf(stderr, "restore fuzzer: invariant violated: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

struct Fixture {
  Objects objects;
  lumen_session* session = nullptr;
  lumen_session* scratch = nullptr;  // for re-snapshot checks
  lumen_session* loaded = nullptr;   // lumen_session_load of the same bytes
  std::string file;                  // where the input is written for it
  int32_t num_layers = 0;
  int32_t layer_dtype[2] = {};
  std::vector<uint8_t> base;  // fp32 snapshot of the base state
  SessionState base_state;
  bool dirty = false;  // the last input was restored: go back to the base state first
};

SessionState Capture(const Fixture& f, const lumen_session* s) {
  SessionState state;
  for (int32_t i = 0; i < f.num_layers; ++i) {
    for (lumen_state_part part : {LUMEN_STATE_MATRIX, LUMEN_STATE_NORMALIZER}) {
      int64_t count = 0;
      Check(lumen_model_state_count(f.objects.model, i, part, &count), "state count");
      if (count == 0) continue;
      std::vector<float> values(static_cast<size_t>(count));
      Check(lumen_session_read_state(s, i, part, values.data(), count), "read state");
      state.parts.push_back(std::move(values));
    }
    int64_t tokens = -1;
    Check(lumen_session_tokens(s, i, &tokens), "tokens");
    state.tokens.push_back(tokens);
  }
  return state;
}

bool SameBits(const SessionState& a, const SessionState& b) {
  if (a.tokens != b.tokens || a.parts.size() != b.parts.size()) return false;
  for (size_t i = 0; i < a.parts.size(); ++i) {
    if (a.parts[i].size() != b.parts[i].size() ||
        std::memcmp(a.parts[i].data(), b.parts[i].data(), a.parts[i].size() * 4) != 0) {
      return false;
    }
  }
  return true;
}

Fixture* CreateFixture() {
  Fixture* f = new Fixture;
  f->objects = CreateObjects();
  Check(lumen_session_create(f->objects.engine, &f->session), "session");
  Check(lumen_session_create(f->objects.engine, &f->scratch), "scratch session");
  Check(lumen_session_create(f->objects.engine, &f->loaded), "session for loads");
  f->file = std::string(std::getenv("TMPDIR") != nullptr ? std::getenv("TMPDIR") : "/tmp") +
            "/lumen-restore-fuzzer-" + std::to_string(::getpid()) + ".snap";
  Check(lumen_model_num_layers(f->objects.model, &f->num_layers), "num layers");
  if (f->num_layers != 2) Violation("the fuzzer's model must have two layers");
  for (int32_t i = 0; i < 2; ++i) {
    lumen_layer_options o;
    Check(lumen_model_layer_options(f->objects.model, i, &o), "layer options");
    f->layer_dtype[i] = o.state_dtype;
  }
  // A base state that differs from every seed (seeds use other histories).
  AddHistory(f->session, f->objects.model, /*seed=*/99, /*tokens=*/13);
  f->base = TakeSnapshot(f->session, LUMEN_DTYPE_FLOAT32);
  f->base_state = Capture(*f, f->session);
  Check(lumen_session_restore(f->loaded, f->base.data(), static_cast<int64_t>(f->base.size())),
        "restore the base state for loads");
  return f;
}

float FromBits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}
uint32_t ToBits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return bits;
}

// A value of the payload as the session must hold it: read in the payload's dtype, stored in
// the layer's dtype (round to nearest even for bf16), read back as fp32.
float Expected(const uint8_t* payload, int64_t index, uint32_t payload_dtype,
               int32_t layer_dtype) {
  float value = payload_dtype == LUMEN_DTYPE_FLOAT32
                    ? FromBits(GetU32(payload + 4 * index))
                    : FromBits(uint32_t{payload[2 * index]} << 16 |
                               uint32_t{payload[2 * index + 1]} << 24);
  if (layer_dtype == LUMEN_DTYPE_BFLOAT16 && !std::isnan(value)) {
    uint32_t bits = ToBits(value);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    value = FromBits(bits & 0xffff0000u);
  }
  return value;
}

void CheckRestored(Fixture& f, const std::vector<uint8_t>& input) {
  const SessionState got = Capture(f, f.session);
  // The records were all accepted, so the layout is the one the writer produces, in format 2
  // or format 1 (48-byte records: the fuzzer's layers have no convolution).
  const uint32_t version = GetU32(input.data() + 8);
  if (version != 1 && version != kFormatVersion) Violation("restore accepted an unknown version");
  const size_t record_bytes = version == 1 ? kRecordBytesVersion1 : kRecordBytes;
  const uint8_t* records = input.data() + kHeaderBytes;
  const uint8_t* payload = records + f.num_layers * record_bytes;
  size_t part = 0;
  bool uniform = true, any_nan = false, exact = true;
  const uint32_t first_dtype = GetU32(records + kRecordDType);
  for (int32_t i = 0; i < f.num_layers; ++i) {
    const uint8_t* record = records + i * record_bytes;
    const uint32_t dtype = GetU32(record + kRecordDType);
    if (dtype != LUMEN_DTYPE_FLOAT32 && dtype != LUMEN_DTYPE_BFLOAT16) {
      Violation("restore accepted an unknown payload dtype");
    }
    uniform = uniform && dtype == first_dtype;
    // Holding the payload's values exactly: same dtype, or bf16 values in an fp32 layer.
    exact = exact && (static_cast<int32_t>(dtype) == f.layer_dtype[i] ||
                      dtype == LUMEN_DTYPE_BFLOAT16);
    if (static_cast<int64_t>(GetU64(record + kRecordTokens)) != got.tokens[i]) {
      Violation("token count differs from the snapshot's");
    }
    int64_t index = 0;
    const size_t parts_of_layer = i == 1 ? 2 : 1;  // layer 1 keeps a normalizer
    for (size_t p = 0; p < parts_of_layer; ++p, ++part) {
      for (float value : got.parts.at(part)) {
        const float want = Expected(payload, index++, dtype, f.layer_dtype[i]);
        if (std::isnan(want)) {
          any_nan = true;
          if (!std::isnan(value)) Violation("a NaN of the snapshot was not restored as NaN");
        } else if (ToBits(value) != ToBits(want)) {
          Violation("a state value differs from the snapshot's");
        }
      }
    }
    const uint64_t payload_bytes = GetU64(record + kRecordPayloadBytes);
    if (payload_bytes != static_cast<uint64_t>(index) * (dtype == LUMEN_DTYPE_FLOAT32 ? 4 : 2)) {
      Violation("restore accepted a payload size that does not match the state");
    }
    payload += payload_bytes;
  }
  if (payload + kChecksumBytes != input.data() + input.size()) {
    Violation("restore accepted bytes beyond the payloads");
  }

  if (uniform && exact && !any_nan && version == kFormatVersion) {
    const std::vector<uint8_t> again = TakeSnapshot(f.session, static_cast<int32_t>(first_dtype));
    std::vector<uint8_t> expected = input;
    if (again.size() != expected.size()) Violation("re-snapshot has another size");
    std::memcpy(expected.data() + kWriterVersionOffset, again.data() + kWriterVersionOffset, 4);
    std::memcpy(expected.data() + kReservedOffset, again.data() + kReservedOffset, 4);
    Reseal(expected);
    if (expected != again) Violation("re-snapshot differs from the restored snapshot");
  }
  // Whatever the input's form, the session's own snapshot restores to the same state.
  const std::vector<uint8_t> own = TakeSnapshot(f.session, LUMEN_DTYPE_FLOAT32);
  if (lumen_session_restore(f.scratch, own.data(), static_cast<int64_t>(own.size())) !=
      LUMEN_OK) {
    Violation("the session's own snapshot does not restore");
  }
  if (!SameBits(Capture(f, f.scratch), got)) {
    // NaN payloads may differ in their bits after a bf16 round trip; compare only without.
    if (!any_nan) Violation("the session's own snapshot restores to another state");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* fixture = CreateFixture();
  Fixture& f = *fixture;

  std::vector<uint8_t> input;
  if (size > 0 && (data[0] & 1)) {
    input.assign(data + 1, data + size);
    if ((data[0] & 2) && input.size() >= kChecksumBytes) input.resize(input.size() - 8);
    AppendChecksum(input);
  } else {
    input.assign(data, data + size);
  }

  if (f.dirty) {
    for (lumen_session* s : {f.session, f.loaded}) {
      Check(lumen_session_restore(s, f.base.data(), static_cast<int64_t>(f.base.size())),
            "restore the base state");
    }
    f.dirty = false;
  }
  std::FILE* file = std::fopen(f.file.c_str(), "wb");
  if (file == nullptr || std::fwrite(input.data(), 1, input.size(), file) != input.size() ||
      std::fclose(file) != 0) {
    Violation("cannot write the input file");
  }
  const lumen_status load_status = lumen_session_load(f.loaded, f.file.c_str());
  // restore(NULL, ...) is an argument error, tested elsewhere: always pass a real pointer.
  static const uint8_t kEmpty = 0;
  const uint8_t* bytes = input.empty() ? &kEmpty : input.data();
  const lumen_status status =
      lumen_session_restore(f.session, bytes, static_cast<int64_t>(input.size()));
  const std::string message = lumen_last_error_message();  // before any other lumen call
  if (load_status != status) {
    std::fprintf(stderr, "restore: %s, load: %s\n", lumen_status_string(status),
                 lumen_status_string(load_status));
    Violation("loading the bytes from a file and restoring them disagree");
  }
  if (!SameBits(Capture(f, f.loaded), Capture(f, f.session))) {
    Violation("loading the bytes from a file gave another state than restoring them");
  }
  if (status == LUMEN_OK) {
    f.dirty = true;
    CheckRestored(f, input);
    return 0;
  }
  if (status != LUMEN_ERROR_CORRUPT_SNAPSHOT && status != LUMEN_ERROR_SNAPSHOT_VERSION &&
      status != LUMEN_ERROR_MODEL_MISMATCH) {
    std::fprintf(stderr, "restore returned %s: %s\n", lumen_status_string(status),
                 lumen_last_error_message());
    Violation("restore failed with a status other than CORRUPT, VERSION or MISMATCH");
  }
  if (message.empty()) Violation("a failed restore left no message");
  if (!SameBits(Capture(f, f.session), f.base_state)) {
    Violation("a failed restore changed the session");
  }
  return 0;
}
