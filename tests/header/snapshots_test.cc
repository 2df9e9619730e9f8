// lumen.h's "Snapshots" section: sizes, buffers, restore's statuses, files.

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "lumen/lumen.h"
#include "tests/header/header_claims.h"
#include "tests/reference/layer_reference.h"
#include "tests/reference/session_fixture.h"
#include "tests/reference/temp_dir.h"

namespace lumen_fixture {
namespace {

namespace fs = std::filesystem;

using lumen_test::TempDir;

LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_snapshot_options.state_dtype",
                             "lumen_dtype of the stored state: FLOAT32 (default, exact) or "
                             "BFLOAT16 (half the size, rounded to nearest even: relative error "
                             "at most 2^-8 per element).",
                             "tests/snapshot/format_test.cc",
                             "bf16 snapshots are half the payload and within 2^-8 per element");

TEST_CASE("a snapshot's size never depends on the tokens consumed", "[header]") {
  LUMEN_CLAIM("lumen_session_snapshot_size",
              "The size depends on the model and the options only, never on the tokens "
              "consumed.");
  const Stack stack({SmallLayer(LUMEN_FAMILY_GLA), SmallLayer(LUMEN_FAMILY_DELTA_NET)});
  SessionPtr session = stack.NewSession();
  lumen_snapshot_options bf16;
  lumen_snapshot_options_init(&bf16);
  bf16.state_dtype = LUMEN_DTYPE_BFLOAT16;
  int64_t fresh = -1, fresh_bf16 = -1;
  REQUIRE_OK(lumen_session_snapshot_size(session.get(), nullptr, &fresh));
  REQUIRE_OK(lumen_session_snapshot_size(session.get(), &bf16, &fresh_bf16));
  CHECK(fresh_bf16 < fresh);
  for (int64_t tokens : {1, 7, 300}) {
    AddHistory(stack, session.get(), tokens, static_cast<uint32_t>(tokens));
    int64_t size = -1, size_bf16 = -1;
    REQUIRE_OK(lumen_session_snapshot_size(session.get(), nullptr, &size));
    REQUIRE_OK(lumen_session_snapshot_size(session.get(), &bf16, &size_bf16));
    CHECK(size == fresh);
    CHECK(size_bf16 == fresh_bf16);
    CHECK(static_cast<int64_t>(TakeSnapshot(session.get()).size()) == fresh);
  }
}

TEST_CASE("a buffer below the snapshot's size is BUFFER_TOO_SMALL and is not written",
          "[header]") {
  LUMEN_CLAIM("lumen_session_snapshot",
              "Returns LUMEN_ERROR_BUFFER_TOO_SMALL, writing nothing, when capacity is below "
              "lumen_session_snapshot_size.");
  const Stack stack({SmallLayer(LUMEN_FAMILY_GLA)});
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 3, 1);
  int64_t size = 0;
  REQUIRE_OK(lumen_session_snapshot_size(session.get(), nullptr, &size));
  for (int64_t capacity : {size - 1, size / 2, int64_t{1}, int64_t{0}}) {
    INFO("capacity " << capacity << " of " << size);
    std::vector<unsigned char> buffer(static_cast<size_t>(size), 0xa5);
    int64_t written = -7;
    CHECK(lumen_session_snapshot(session.get(), nullptr, buffer.data(), capacity, &written) ==
          LUMEN_ERROR_BUFFER_TOO_SMALL);
    CHECK(buffer == std::vector<unsigned char>(static_cast<size_t>(size), 0xa5));
    CHECK(written == -7);
  }
}

TEST_CASE("restore: CORRUPT_SNAPSHOT for damage, SNAPSHOT_VERSION for a newer format, "
          "MODEL_MISMATCH for another model",
          "[header]") {
  LUMEN_CLAIM("lumen_session_restore",
              "Returns LUMEN_ERROR_CORRUPT_SNAPSHOT for truncated or damaged bytes (or a token "
              "count above 2^62, see lumen_session_tokens), LUMEN_ERROR_SNAPSHOT_VERSION for a "
              "newer format, LUMEN_ERROR_MODEL_MISMATCH when the snapshot's model differs from "
              "the session's (the message says which layer and what differs).");
  LUMEN_CLAIM("lumen_session_restore",
              "All or nothing: on any error the session is exactly as before.");
  const Stack stack({SmallLayer(LUMEN_FAMILY_GLA), SmallLayer(LUMEN_FAMILY_DELTA_NET)});
  SessionPtr source = stack.NewSession(), target = stack.NewSession();
  AddHistory(stack, source.get(), 4, 2);
  AddHistory(stack, target.get(), 6, 3);
  const SessionState before = Capture(target.get(), stack.layers);
  const Bytes snapshot = TakeSnapshot(source.get());
  std::string message;  // the last failure's, before the checks below clear it
  auto restore = [&](const Bytes& bytes) {
    const lumen_status status =
        lumen_session_restore(target.get(), bytes.data(), static_cast<int64_t>(bytes.size()));
    message = lumen_last_error_message();
    INFO(Describe(status));
    CHECK(Capture(target.get(), stack.layers).SameBits(before));
    return status;
  };
  Bytes truncated(snapshot.begin(), snapshot.end() - 1);
  CHECK(restore(truncated) == LUMEN_ERROR_CORRUPT_SNAPSHOT);
  Bytes damaged = snapshot;
  damaged[kHeaderBytes + 2 * kRecordBytes + 5] ^= 0x10;  // a bit of the payload
  CHECK(restore(damaged) == LUMEN_ERROR_CORRUPT_SNAPSHOT);
  CHECK(restore(WithTokenCount(source.get(), 1, (uint64_t{1} << 62) + 1)) ==
        LUMEN_ERROR_CORRUPT_SNAPSHOT);
  Bytes newer = snapshot;
  newer[8] = static_cast<unsigned char>(newer[8] + 1);  // the format version, u32 at 8
  Reseal(newer);
  CHECK(restore(newer) == LUMEN_ERROR_SNAPSHOT_VERSION);

  // A model whose layer 1 has other value dims.
  RefLayer other_layer = SmallLayer(LUMEN_FAMILY_DELTA_NET);
  other_layer.value_dim = 8;
  const Stack other({SmallLayer(LUMEN_FAMILY_GLA), other_layer});
  SessionPtr foreign = other.NewSession();
  CHECK(restore(TakeSnapshot(foreign.get())) == LUMEN_ERROR_MODEL_MISMATCH);
  INFO(message);
  CHECK(message.find("layer 1") != std::string::npos);
  CHECK((message.find("V") != std::string::npos || message.find("value") != std::string::npos));
}

TEST_CASE("snapshot and save only read the session, saves of distinct sessions run at once",
          "[header]") {
  LUMEN_CLAIM("lumen_session_snapshot", "The session is only read.");
  LUMEN_CLAIM("lumen_session_save", "Thread-safe for distinct sessions; the session is only read.");
  // A delta-rule layer on the CPU holds a step's last write beside the state: reading the
  // session must not show it either.
  const RefLayer layer = SmallLayer(LUMEN_FAMILY_DELTA_NET);
  const Stack stack({layer});
  SessionPtr a = stack.NewSession(), b = stack.NewSession();
  AddHistory(stack, a.get(), 5, 1);
  AddHistory(stack, b.get(), 6, 2);
  const SessionState a_before = Capture(a.get(), stack.layers);
  const SessionState b_before = Capture(b.get(), stack.layers);
  const Bytes a_snapshot = TakeSnapshot(a.get());
  CHECK(Capture(a.get(), stack.layers).SameBits(a_before));
  TempDir dir;
  const fs::path a_path = dir.path() / "a.lumen", b_path = dir.path() / "b.lumen";
  lumen_status a_status = LUMEN_ERROR_INTERNAL, b_status = LUMEN_ERROR_INTERNAL;
  for (int round = 0; round < 20; ++round) {
    std::thread other([&] { b_status = lumen_session_save(b.get(), b_path.c_str(), nullptr); });
    a_status = lumen_session_save(a.get(), a_path.c_str(), nullptr);
    other.join();
    REQUIRE(a_status == LUMEN_OK);
    REQUIRE(b_status == LUMEN_OK);
  }
  CHECK(Capture(a.get(), stack.layers).SameBits(a_before));
  CHECK(Capture(b.get(), stack.layers).SameBits(b_before));
  std::ifstream in(a_path, std::ios::binary);
  const Bytes a_file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(a_file == a_snapshot);
  SessionPtr loaded = stack.NewSession();
  REQUIRE_OK(lumen_session_load(loaded.get(), b_path.c_str()));
  CHECK(Capture(loaded.get(), stack.layers).SameBits(b_before));
}

TEST_CASE("a saved file is readable and writable by its owner only", "[header]") {
  LUMEN_CLAIM("lumen_session_save",
              "The file is readable and writable by its owner only (it holds a conversation).");
  const Stack stack({SmallLayer(LUMEN_FAMILY_GLA)});
  SessionPtr session = stack.NewSession();
  TempDir dir;
  const fs::path path = dir.path() / "session.lumen";
  // Whatever the process's umask lets through, and over a file that others could read.
  const mode_t old_mask = ::umask(0);
  {
    std::ofstream(path) << "an older file";
  }
  fs::permissions(path, fs::perms::all);
  const lumen_status status = lumen_session_save(session.get(), path.c_str(), nullptr);
  ::umask(old_mask);
  REQUIRE(status == LUMEN_OK);
  CHECK((fs::status(path).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write));
}

LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_session_restore",
                             "Replaces the session's state and token counts with those of a "
                             "snapshot (host memory, only read), exactly as saved (an fp32 "
                             "snapshot restores bit for bit, whatever values it holds).",
                             "tests/snapshot/memory_test.cc",
                             "snapshot then restore is bit exact and the session continues "
                             "exactly");

LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_session_save",
                             "A crash at any moment leaves the old file or the new one, never a "
                             "torn one.",
                             "tests/snapshot/file_edge_cases_test.cc",
                             "a save killed midway leaves no temporary file past the next save");

TEST_CASE("a save that fails is IO with the system's reason", "[header]") {
  LUMEN_CLAIM("lumen_session_save", "Returns LUMEN_ERROR_IO with the system's reason.");
  const Stack stack({SmallLayer(LUMEN_FAMILY_GLA)});
  SessionPtr session = stack.NewSession();
  TempDir dir;
  const fs::path missing = dir.path() / "no-such-directory" / "session.lumen";
  lumen_status status = lumen_session_save(session.get(), missing.c_str(), nullptr);
  std::string message = lumen_last_error_message();
  INFO(Describe(status));
  CHECK(status == LUMEN_ERROR_IO);
  CHECK(message.find(std::strerror(ENOENT)) != std::string::npos);
  // A directory where the file should be.
  const fs::path taken = dir.path() / "taken";
  fs::create_directory(taken);
  status = lumen_session_save(session.get(), taken.c_str(), nullptr);
  message = lumen_last_error_message();
  INFO(Describe(status));
  CHECK(status == LUMEN_ERROR_IO);
  CHECK(message.find(std::strerror(EISDIR)) != std::string::npos);
}

LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_session_load",
                             "Only a regular file is read: anything else (a FIFO, a device, a "
                             "directory) is LUMEN_ERROR_IO without waiting on it.",
                             "tests/snapshot/file_edge_cases_test.cc",
                             "loading something other than a regular file fails at once with IO");

// The bytes this process has read through read(2) and its kin (/proc/self/io rchar), as the
// file said when it was opened, and the length of the file's text: reading it counts too.
struct ReadCount {
  int64_t rchar = 0;
  int64_t own_bytes = 0;
};

ReadCount BytesReadSoFar() {
  std::ifstream in("/proc/self/io", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.find("rchar: ");
  REQUIRE(at != std::string::npos);
  return {std::stoll(text.substr(at + 7)), static_cast<int64_t>(text.size())};
}

TEST_CASE("load rejects a file of a size no snapshot has after reading at most 32 + 56 * "
          "layers bytes",
          "[header]") {
  LUMEN_CLAIM("lumen_session_load",
              "A file whose size no snapshot of the session's model can have is rejected after "
              "reading its head only (at most 32 + 56 * layers bytes).");
  for (int32_t layers : {1, 3, 40}) {
    INFO(layers << " layers");
    std::vector<RefLayer> list(static_cast<size_t>(layers), SmallLayer(LUMEN_FAMILY_GLA));
    const Stack stack(list);
    SessionPtr session = stack.NewSession();
    AddHistory(stack, session.get(), 2, 4);
    const SessionState before = Capture(session.get(), stack.layers);
    TempDir dir;
    const fs::path path = dir.path() / "session.lumen";
    REQUIRE_OK(lumen_session_save(session.get(), path.c_str(), nullptr));
    const int64_t size = static_cast<int64_t>(fs::file_size(path));
    for (int64_t wrong_size : {size + 1, size * 3, int64_t{1} << 36}) {
      INFO("a file of " << wrong_size << " bytes, the snapshot's " << size);
      REQUIRE(::truncate(path.c_str(), wrong_size) == 0);
      const ReadCount start = BytesReadSoFar();
      const lumen_status status = lumen_session_load(session.get(), path.c_str());
      // What the load read: the count since, less the first read of /proc/self/io itself.
      const int64_t read = BytesReadSoFar().rchar - start.rchar - start.own_bytes;
      INFO(Describe(status) << "; read " << read << " bytes");
      CHECK(status == LUMEN_ERROR_CORRUPT_SNAPSHOT);
      CHECK(read <= 32 + 56 * int64_t{layers});
      CHECK(read > 0);
      CHECK(Capture(session.get(), stack.layers).SameBits(before));
    }
  }
}

}  // namespace
}  // namespace lumen_fixture
