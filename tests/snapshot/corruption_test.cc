// Damaged snapshots through the public C API: every truncation and every single-bit flip is
// rejected with CORRUPT_SNAPSHOT and leaves the session bitwise unchanged, from memory and
// from a file; so is damage to large snapshots (copied and checked on two threads), and so
// are well-sealed snapshots with bad fields.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/reference/layer_reference.h"
#include "tests/snapshot/snapshot_test_util.h"

namespace lumen_snapshot_test {
namespace {

// ---------------------------------------------------------------------------------------------
// Damage
// ---------------------------------------------------------------------------------------------

// Restores damaged bytes from memory, or from a file (a separate, streamed reader).
enum class Source { kMemory, kFile };

lumen_status RestoreFrom(Source source, lumen_session* s, const Bytes& bytes,
                         const TempDir& dir) {
  if (source == Source::kMemory) {
    // An exact-size copy, so that reading past the end is caught by sanitizers.
    return lumen_session_restore(s, bytes.empty() ? nullptr : bytes.data(),
                                 static_cast<int64_t>(bytes.size()));
  }
  const fs::path path = dir.path() / "damaged.snap";
  WriteFile(path, bytes);
  return lumen_session_load(s, path.string().c_str());
}

TEST_CASE("every truncation is rejected and changes nothing", "[snapshot][corrupt]") {
  const int32_t dtype = GENERATE(LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_BFLOAT16);
  const Source from = GENERATE(Source::kMemory, Source::kFile);
  const TempDir dir;
  INFO((from == Source::kMemory ? "lumen_session_restore" : "lumen_session_load"));
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(11);
  SessionPtr source = stack.NewSession(), target = stack.NewSession();
  AddHistory(stack, {source.get()}, rng);
  AddHistory(stack, {target.get()}, rng, 25);  // its own, different state
  const Bytes snapshot = TakeSnapshot(source.get(), dtype);
  const SessionState before = Capture(target.get(), stack.model.get());

  int64_t wrong_status = 0, changed = 0, no_message = 0;
  for (size_t length = 0; length < snapshot.size(); ++length) {
    const Bytes truncated(snapshot.begin(), snapshot.begin() + length);
    // restore(NULL, 0) is an argument error; an empty snapshot is a non-NULL pointer.
    const lumen_status status =
        from == Source::kMemory && length == 0
            ? lumen_session_restore(target.get(), snapshot.data(), 0)
            : RestoreFrom(from, target.get(), truncated, dir);
    if (status != LUMEN_ERROR_CORRUPT_SNAPSHOT) {
      ++wrong_status;
      FAIL_CHECK("length " << length << " of " << snapshot.size() << ": " << Describe(status));
    }
    if (*lumen_last_error_message() == '\0') ++no_message;
    // Comparing the whole state every time is cheap at these sizes.
    if (!SameBits(before, Capture(target.get(), stack.model.get()))) {
      ++changed;
      FAIL_CHECK("length " << length << " changed the session");
    }
  }
  INFO(snapshot.size() << " truncations");
  CHECK(wrong_status == 0);
  CHECK(changed == 0);
  CHECK(no_message == 0);
  // The whole snapshot still restores.
  REQUIRE_OK(Restore(target.get(), snapshot));
  const SessionState expected = dtype == LUMEN_DTYPE_FLOAT32
                                    ? Capture(source.get(), stack.model.get())
                                    : RoundedToBFloat16(Capture(source.get(), stack.model.get()));
  CHECK(SameBits(expected, Capture(target.get(), stack.model.get())));
}

TEST_CASE("every single-bit flip is rejected and changes nothing", "[snapshot][corrupt]") {
  const int32_t dtype = GENERATE(LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_BFLOAT16);
  const Source from = GENERATE(Source::kMemory, Source::kFile);
  const TempDir dir;
  INFO((from == Source::kMemory ? "lumen_session_restore" : "lumen_session_load"));
  const Stack stack(MixedLayers(kSmall));
  std::mt19937 rng(12);
  SessionPtr source = stack.NewSession(), target = stack.NewSession();
  AddHistory(stack, {source.get()}, rng);
  AddHistory(stack, {target.get()}, rng, 25);
  const Bytes snapshot = TakeSnapshot(source.get(), dtype);
  REQUIRE(snapshot.size() < 8192);  // "a few KB": all bits are flipped, no stride
  const SessionState before = Capture(target.get(), stack.model.get());

  Bytes damaged = snapshot;
  int64_t wrong_status = 0, changed = 0;
  for (size_t bit = 0; bit < snapshot.size() * 8; ++bit) {
    damaged[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    const lumen_status status = RestoreFrom(from, target.get(), damaged, dir);
    damaged[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    if (status != LUMEN_ERROR_CORRUPT_SNAPSHOT) {
      ++wrong_status;
      FAIL_CHECK("bit " << bit << " (byte " << bit / 8 << "): " << Describe(status));
    }
    if (!SameBits(before, Capture(target.get(), stack.model.get()))) {
      ++changed;
      FAIL_CHECK("bit " << bit << " changed the session");
    }
  }
  std::cout << "[snapshot] bit flips (dtype " << dtype << "): all " << snapshot.size() * 8
            << " bits of a " << snapshot.size() << "-byte snapshot rejected\n";
  CHECK(wrong_status == 0);
  CHECK(changed == 0);
}

TEST_CASE("large snapshots, copied and checked on two threads, round-trip and reject damage",
          "[snapshot][corrupt]") {
  // Payloads of 1 MiB and more are copied and checksummed concurrently; smaller ones are not.
  const Stack stack({GatedDeltaNet({4, 32, 96, 96})});  // 32 x 96 x 96 fp32 = 1.1 MiB
  std::mt19937 rng(21);
  SessionPtr source = stack.NewSession(), target = stack.NewSession();
  AddHistory(stack, {source.get()}, rng, 70);
  AddHistory(stack, {target.get()}, rng, 30);
  const Bytes snapshot = TakeSnapshot(source.get());
  REQUIRE(snapshot.size() > (size_t{1} << 20));
  const SessionState before = Capture(target.get(), stack.model.get());

  // Damage at the start, in the middle and at the end of the payload, and truncations.
  Bytes damaged = snapshot;
  for (size_t at : {size_t{500}, snapshot.size() / 2, snapshot.size() - 9}) {
    damaged[at] ^= 0x10;
    CHECK(Restore(target.get(), damaged) == LUMEN_ERROR_CORRUPT_SNAPSHOT);
    damaged[at] ^= 0x10;
    CHECK(SameBits(before, Capture(target.get(), stack.model.get())));
  }
  for (size_t length : {snapshot.size() - 1, snapshot.size() / 2}) {
    const Bytes truncated(snapshot.begin(), snapshot.begin() + length);
    CHECK(Restore(target.get(), truncated) == LUMEN_ERROR_CORRUPT_SNAPSHOT);
    CHECK(SameBits(before, Capture(target.get(), stack.model.get())));
  }
  REQUIRE_OK(Restore(target.get(), snapshot));
  CHECK(SameBits(Capture(source.get(), stack.model.get()),
                 Capture(target.get(), stack.model.get())));
  CHECK(TakeSnapshot(target.get()) == snapshot);
}

TEST_CASE("sealed snapshots with bad fields are rejected and change nothing",
          "[snapshot][corrupt]") {
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(13);
  SessionPtr source = stack.NewSession(), target = stack.NewSession();
  AddHistory(stack, {source.get()}, rng);
  AddHistory(stack, {target.get()}, rng, 25);
  const Bytes snapshot = TakeSnapshot(source.get());
  const size_t record1 = kHeaderBytes + kRecordBytes;  // layer 1's record

  SECTION("another magic") {
    Bytes b = snapshot;
    b[0] = 'X';
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("format version 0") {
    Bytes b = snapshot;
    PutU32(b, kVersionOffset, 0);
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("an unknown payload dtype") {
    Bytes b = snapshot;
    PutU32(b, record1 + kRecordDType, LUMEN_DTYPE_FLOAT16);
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("bf16 declared on fp32 payload") {
    Bytes b = snapshot;
    PutU32(b, record1 + kRecordDType, LUMEN_DTYPE_BFLOAT16);
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("an unknown layout") {
    Bytes b = snapshot;
    PutU32(b, record1 + kRecordLayout, 2);
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("a negative token count") {
    Bytes b = snapshot;
    PutU64(b, record1 + kRecordTokens, static_cast<uint64_t>(int64_t{-1}));
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("a wrong payload size") {
    for (uint64_t size : {uint64_t{0}, uint64_t{4}, ~uint64_t{0}, uint64_t{1} << 62}) {
      Bytes b = snapshot;
      PutU64(b, record1 + kRecordPayloadBytes, size);
      Reseal(b);
      ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
    }
  }
  SECTION("extra bytes before the checksum") {
    Bytes b = snapshot;
    b.insert(b.end() - kChecksumBytes, 4, 0);
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("payload cut short, checksum resealed") {
    Bytes b = snapshot;
    b.erase(b.end() - kChecksumBytes - 4, b.end() - kChecksumBytes);
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("only a sealed header") {
    Bytes b(snapshot.begin(), snapshot.begin() + kHeaderBytes + kChecksumBytes);
    Reseal(b);
    ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
  SECTION("not a snapshot at all") {
    ExpectRejected(target.get(), stack.model.get(), Bytes(snapshot.size(), 0),
                   LUMEN_ERROR_CORRUPT_SNAPSHOT);
    ExpectRejected(target.get(), stack.model.get(), Bytes(snapshot.size(), 0xff),
                   LUMEN_ERROR_CORRUPT_SNAPSHOT);
  }
}

}  // namespace
}  // namespace lumen_snapshot_test
