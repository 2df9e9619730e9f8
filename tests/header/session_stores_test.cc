// lumen.h's "Session stores" section: options, opening, versions and compare-and-set, missing
// keys, expiry, what a failed load or save leaves, on a file:// store in a temporary
// directory. What needs a Redis server (parts, unreachable, slow or killed servers, readers
// racing a writer) is proven by tests/store, which starts a private redis-server.

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
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

struct StoreDeleter {
  void operator()(lumen_store* store) const { lumen_store_destroy(store); }
};
using StorePtr = std::unique_ptr<lumen_store, StoreDeleter>;

Bytes ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteBytes(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  REQUIRE(out);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out);
}

// Expects `status` to be `expected`, with a message that holds `word`.
void ExpectFailure(lumen_status status, lumen_status expected, const std::string& word) {
  const std::string message = lumen_last_error_message();
  INFO(lumen_status_string(status) << ": " << message);
  CHECK(status == expected);
  CHECK(message.find(word) != std::string::npos);
}

// Two layers, sessions with different histories, and a file:// store in a fresh directory.
struct StoreCase {
  TempDir dir;
  Stack stack{{SmallLayer(LUMEN_FAMILY_GLA), SmallLayer(LUMEN_FAMILY_DELTA_NET)}};
  SessionPtr a = stack.NewSession();
  SessionPtr b = stack.NewSession();
  SessionPtr target = stack.NewSession();
  StorePtr store;

  StoreCase() {
    AddHistory(stack, a.get(), 5, 1);
    AddHistory(stack, b.get(), 7, 2);
    AddHistory(stack, target.get(), 3, 3);
    lumen_store* raw = nullptr;
    REQUIRE_OK(lumen_store_open(uri().c_str(), nullptr, &raw));
    store.reset(raw);
  }
  std::string uri() const { return "file://" + dir.path().string(); }
  fs::path file(const std::string& key) const { return dir.path() / (key + ".lumen-store"); }
  lumen_status Save(const std::string& key, const lumen_session* session,
                    int64_t expected_version = -1, int64_t* version = nullptr,
                    int64_t expiry_ms = 0) {
    lumen_store_save_options options;
    lumen_store_save_options_init(&options);
    options.expected_version = expected_version;
    options.expiry_ms = expiry_ms;
    return lumen_store_save(store.get(), key.c_str(), session, &options, version);
  }
  // The key's value loads, with `version`, and equals `expected` bit for bit.
  void ExpectValue(const std::string& key, const lumen_session* expected, int64_t version) {
    SessionPtr check = stack.NewSession();
    int64_t loaded = -1;
    REQUIRE_OK(lumen_store_load(store.get(), key.c_str(), check.get(), &loaded));
    CHECK(loaded == version);
    CHECK(TakeSnapshot(check.get()) == TakeSnapshot(expected));
  }
};

TEST_CASE("store options' inits and lumen_store_destroy take NULL", "[header][store]") {
  LUMEN_CLAIM("lumen_store_options_init", "NULL is a no-op.");
  LUMEN_CLAIM("lumen_store_save_options_init", "NULL is a no-op.");
  LUMEN_CLAIM("lumen_store_destroy", "NULL is a no-op.");
  lumen_store_options_init(nullptr);
  lumen_store_save_options_init(nullptr);
  lumen_store_destroy(nullptr);
  lumen_store_options options;
  lumen_store_options_init(&options);
  CHECK(options.part_bytes == 4194304);
  lumen_store_save_options save;
  lumen_store_save_options_init(&save);
  CHECK(save.expiry_ms == 0);
  CHECK(save.expected_version == -1);
}

TEST_CASE("lumen_store_open: bad URIs and options, directories that cannot be one",
          "[header][store]") {
  LUMEN_CLAIM("lumen_store_open",
              "Returns LUMEN_ERROR_INVALID_ARGUMENT for a URI that is not one of these (the "
              "message says what is wrong) or bad options; LUMEN_ERROR_UNSUPPORTED for redis:// "
              "in a library built without hiredis; LUMEN_ERROR_IO when the directory cannot be "
              "made or is not one; LUMEN_ERROR_UNAVAILABLE or LUMEN_ERROR_TIMEOUT when the "
              "server cannot be reached, and LUMEN_ERROR_IO when it refuses the password or the "
              "database.");
  LUMEN_CLAIM("lumen_store_options.part_bytes",
              "At least 4096 and at most 512 MiB (Redis's largest string).");
  TempDir dir;
  const std::string uri = "file://" + dir.path().string();
  lumen_store* raw = nullptr;
  ExpectFailure(lumen_store_open("ftp://example.com/x", nullptr, &raw),
                LUMEN_ERROR_INVALID_ARGUMENT, "ftp://");
  lumen_store_options options;
  for (int64_t part_bytes : {int64_t{4095}, (int64_t{512} << 20) + 1, int64_t{-1}}) {
    INFO("part_bytes " << part_bytes);
    lumen_store_options_init(&options);
    options.part_bytes = part_bytes;
    ExpectFailure(lumen_store_open(uri.c_str(), &options, &raw), LUMEN_ERROR_INVALID_ARGUMENT,
                  "part_bytes");
  }
  CHECK(raw == nullptr);
  for (int64_t part_bytes : {int64_t{4096}, int64_t{512} << 20}) {
    INFO("part_bytes " << part_bytes);
    lumen_store_options_init(&options);
    options.part_bytes = part_bytes;
    REQUIRE_OK(lumen_store_open(uri.c_str(), &options, &raw));
    lumen_store_destroy(raw);
    raw = nullptr;
  }
  // A directory that is a file, and one whose parent does not exist.
  const fs::path file = dir.path() / "plain";
  WriteBytes(file, Bytes{1, 2, 3});
  ExpectFailure(lumen_store_open(("file://" + file.string()).c_str(), nullptr, &raw),
                LUMEN_ERROR_IO, "plain");
  ExpectFailure(
      lumen_store_open(("file://" + (dir.path() / "no" / "such").string()).c_str(), nullptr, &raw),
      LUMEN_ERROR_IO, "such");
  CHECK(raw == nullptr);
  // A Redis server that cannot be reached: a loopback port nobody listens on (the kernel's
  // free port, its socket closed).
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  socklen_t length = sizeof(address);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  ::close(fd);
  const std::string redis = "redis://127.0.0.1:" + std::to_string(ntohs(address.sin_port));
#ifdef LUMEN_TEST_WITH_HIREDIS
  ExpectFailure(lumen_store_open(redis.c_str(), nullptr, &raw), LUMEN_ERROR_UNAVAILABLE,
                "cannot be reached");
#else
  ExpectFailure(lumen_store_open(redis.c_str(), nullptr, &raw), LUMEN_ERROR_UNSUPPORTED,
                "hiredis");
#endif
  CHECK(raw == nullptr);
}
LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_store_open",
                             "Returns LUMEN_ERROR_INVALID_ARGUMENT for a URI that is not one of "
                             "these (the message says what is wrong) or bad options; "
                             "LUMEN_ERROR_UNSUPPORTED for redis:// in a library built without "
                             "hiredis; LUMEN_ERROR_IO when the directory cannot be made or is not "
                             "one; LUMEN_ERROR_UNAVAILABLE or LUMEN_ERROR_TIMEOUT when the server "
                             "cannot be reached, and LUMEN_ERROR_IO when it refuses the password "
                             "or the database.",
                             "tests/store/store_contract_test.cc",
                             "store calls check their arguments");
LUMEN_CLAIM_UNPROVEN("lumen_store_open",
                     "Returns LUMEN_ERROR_INVALID_ARGUMENT for a URI that is not one of these "
                     "(the message says what is wrong) or bad options; LUMEN_ERROR_UNSUPPORTED "
                     "for redis:// in a library built without hiredis; LUMEN_ERROR_IO when the "
                     "directory cannot be made or is not one; LUMEN_ERROR_UNAVAILABLE or "
                     "LUMEN_ERROR_TIMEOUT when the server cannot be reached, and LUMEN_ERROR_IO "
                     "when it refuses the password or the database.",
                     "TIMEOUT on connecting (a server that accepts but never answers) and IO for "
                     "a refused password or database need a Redis server set up for it; no test "
                     "in tests/store starts one with a password or fewer databases yet. The "
                     "test above proves UNAVAILABLE or UNSUPPORTED, whichever this build has.");

LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_store_options.part_bytes",
                             "redis://: a snapshot larger than this many bytes is stored as parts "
                             "of at most this size; 0 means 4 MiB (4194304).",
                             "tests/store/redis_store_test.cc",
                             "redis store: a value in parts, replaced whole, parts without expiry");
LUMEN_CLAIM_UNPROVEN("lumen_store_options.part_bytes",
                     "redis://: a snapshot larger than this many bytes is stored as parts of at "
                     "most this size; 0 means 4 MiB (4194304).",
                     "0 meaning 4 MiB: proving it needs a snapshot above 4 MiB saved to a Redis "
                     "server with part_bytes 0 and its parts counted; the Redis tests save with "
                     "explicit part sizes. (lumen_store_options_init's 4 MiB is checked above.)");

TEST_CASE("versions count saves; an expected version that differs is VERSION_CONFLICT",
          "[header][store]") {
  LUMEN_CLAIM("Session stores",
              "Every successful save stores the previous version + 1 (1 for a key that holds "
              "nothing: never saved, removed or expired).");
  LUMEN_CLAIM("Session stores",
              "A save may name the version it expects to replace (compare-and-set); if another "
              "writer saved in between, the save fails with LUMEN_ERROR_VERSION_CONFLICT and "
              "stores nothing, so that two machines cannot silently overwrite each other's "
              "newer state.");
  LUMEN_CLAIM("lumen_store_save_options.expected_version",
              "Otherwise LUMEN_ERROR_VERSION_CONFLICT.");
  LUMEN_CLAIM("lumen_store_save",
              "Returns LUMEN_ERROR_VERSION_CONFLICT, naming the stored version, when "
              "options->expected_version is not -1 and differs from it (nothing is written), and "
              "the errors listed above; after any error the key holds what it held before.");
  StoreCase c;
  int64_t version = -7;
  // n > 0 where nothing is stored, 0 where something is, n other than the stored version.
  ExpectFailure(c.Save("k", c.a.get(), 1, &version), LUMEN_ERROR_VERSION_CONFLICT, "holds nothing");
  CHECK(version == -7);
  CHECK_FALSE(fs::exists(c.file("k")));
  REQUIRE_OK(c.Save("k", c.a.get(), 0, &version));
  CHECK(version == 1);
  REQUIRE_OK(c.Save("k", c.a.get(), -1, &version));
  CHECK(version == 2);
  const Bytes stored = ReadBytes(c.file("k"));
  for (int64_t expected : {int64_t{0}, int64_t{1}, int64_t{3}}) {
    INFO("expected version " << expected);
    version = -7;
    ExpectFailure(c.Save("k", c.b.get(), expected, &version), LUMEN_ERROR_VERSION_CONFLICT,
                  "holds version 2");
    CHECK(version == -7);
    CHECK(ReadBytes(c.file("k")) == stored);  // nothing written
  }
  c.ExpectValue("k", c.a.get(), 2);
  REQUIRE_OK(c.Save("k", c.b.get(), 2, &version));
  CHECK(version == 3);
  c.ExpectValue("k", c.b.get(), 3);
  // Removed, the key holds nothing: the next save is version 1 again.
  REQUIRE_OK(lumen_store_remove(c.store.get(), "k"));
  REQUIRE_OK(c.Save("k", c.a.get(), 0, &version));
  CHECK(version == 1);
}

TEST_CASE("a save only reads the session", "[header][store]") {
  LUMEN_CLAIM("lumen_store_save", "The session is only read.");
  LUMEN_CLAIM("Session stores",
              "A load that fails leaves the session exactly as it was; a save only reads the "
              "session.");
  StoreCase c;
  const Bytes before = TakeSnapshot(c.a.get());
  REQUIRE_OK(c.Save("k", c.a.get()));
  CHECK(TakeSnapshot(c.a.get()) == before);
  lumen_store_save_options bf16;
  lumen_store_save_options_init(&bf16);
  bf16.state_dtype = LUMEN_DTYPE_BFLOAT16;
  REQUIRE_OK(lumen_store_save(c.store.get(), "k16", c.a.get(), &bf16, nullptr));
  CHECK(TakeSnapshot(c.a.get()) == before);
  ExpectFailure(c.Save("k", c.a.get(), 0), LUMEN_ERROR_VERSION_CONFLICT, "'k'");
  CHECK(TakeSnapshot(c.a.get()) == before);
}

TEST_CASE("a key that holds nothing is NOT_FOUND; a failed load changes nothing",
          "[header][store]") {
  LUMEN_CLAIM("LUMEN_ERROR_NOT_FOUND",
              "A store holds no value under the key (never saved, removed, or expired).");
  LUMEN_CLAIM("Session stores",
              "A missing key is LUMEN_ERROR_NOT_FOUND; a value of another model "
              "LUMEN_ERROR_MODEL_MISMATCH; damaged bytes LUMEN_ERROR_CORRUPT_SNAPSHOT; a server "
              "that cannot be reached or drops the connection LUMEN_ERROR_UNAVAILABLE; one that "
              "does not answer in time LUMEN_ERROR_TIMEOUT; a file that cannot be written (a "
              "full disk, a read-only directory), or a command the server refuses (e.g. out of "
              "memory), LUMEN_ERROR_IO.");
  LUMEN_CLAIM("Session stores",
              "A load that fails leaves the session exactly as it was; a save only reads the "
              "session.");
  LUMEN_CLAIM("lumen_store_load",
              "Returns LUMEN_ERROR_NOT_FOUND for a key that holds nothing, the statuses of "
              "lumen_session_restore for the value itself (LUMEN_ERROR_MODEL_MISMATCH, "
              "LUMEN_ERROR_CORRUPT_SNAPSHOT, LUMEN_ERROR_SNAPSHOT_VERSION; a missing or resized "
              "part is LUMEN_ERROR_CORRUPT_SNAPSHOT too), and the errors listed above.");
  LUMEN_CLAIM("lumen_store_remove",
              "Returns LUMEN_ERROR_NOT_FOUND when it holds nothing, and the errors listed above.");
  StoreCase c;
  const Bytes before = TakeSnapshot(c.target.get());
  auto expect_load_fails = [&](const std::string& key, lumen_status expected) {
    INFO("key " << key);
    int64_t version = -7;
    ExpectFailure(lumen_store_load(c.store.get(), key.c_str(), c.target.get(), &version),
                  expected, "'" + key + "'");
    CHECK(version == -7);
    CHECK(TakeSnapshot(c.target.get()) == before);
  };
  // Never saved; removed.
  expect_load_fails("never", LUMEN_ERROR_NOT_FOUND);
  ExpectFailure(lumen_store_remove(c.store.get(), "never"), LUMEN_ERROR_NOT_FOUND, "'never'");
  REQUIRE_OK(c.Save("gone", c.a.get()));
  REQUIRE_OK(lumen_store_remove(c.store.get(), "gone"));
  expect_load_fails("gone", LUMEN_ERROR_NOT_FOUND);
  ExpectFailure(lumen_store_remove(c.store.get(), "gone"), LUMEN_ERROR_NOT_FOUND, "'gone'");

  // Another model's value (another value width).
  RefLayer wider = SmallLayer(LUMEN_FAMILY_GLA);
  wider.value_dim = 8;
  const Stack other({wider, SmallLayer(LUMEN_FAMILY_DELTA_NET)});
  SessionPtr foreign = other.NewSession();
  REQUIRE_OK(c.Save("foreign", foreign.get()));
  expect_load_fails("foreign", LUMEN_ERROR_MODEL_MISMATCH);

  // The stored snapshot, damaged; then resealed with a newer format version. The file is
  // the store's envelope followed by the snapshot, which ends it.
  REQUIRE_OK(c.Save("damaged", c.a.get()));
  const Bytes file = ReadBytes(c.file("damaged"));
  const Bytes snapshot = TakeSnapshot(c.a.get());
  REQUIRE(file.size() > snapshot.size());
  const size_t at = file.size() - snapshot.size();
  REQUIRE(Bytes(file.begin() + static_cast<std::ptrdiff_t>(at), file.end()) == snapshot);
  Bytes damaged = file;
  damaged[at + kHeaderBytes + 2 * kRecordBytes + 5] ^= 0x10;  // a bit of the payload
  WriteBytes(c.file("damaged"), damaged);
  expect_load_fails("damaged", LUMEN_ERROR_CORRUPT_SNAPSHOT);
  Bytes newer = snapshot;
  newer[8] = static_cast<unsigned char>(newer[8] + 1);  // the format version, u32 at 8
  Reseal(newer);
  Bytes newer_file(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(at));
  newer_file.insert(newer_file.end(), newer.begin(), newer.end());
  WriteBytes(c.file("damaged"), newer_file);
  expect_load_fails("damaged", LUMEN_ERROR_SNAPSHOT_VERSION);
  // Intact, it loads.
  WriteBytes(c.file("damaged"), file);
  int64_t version = -1;
  REQUIRE_OK(lumen_store_load(c.store.get(), "damaged", c.target.get(), &version));
  CHECK(version == 1);
  CHECK(TakeSnapshot(c.target.get()) == snapshot);
}

TEST_CASE("an expiring value holds nothing after its expiry; one without never expires",
          "[header][store]") {
  LUMEN_CLAIM("lumen_store_save_options.expiry_ms",
              "0 (default): the value never expires; > 0: it expires this many milliseconds "
              "after the save, and the key then holds nothing.");
  LUMEN_CLAIM("LUMEN_ERROR_NOT_FOUND",
              "A store holds no value under the key (never saved, removed, or expired).");
  LUMEN_CLAIM("Session stores",
              "Every successful save stores the previous version + 1 (1 for a key that holds "
              "nothing: never saved, removed or expired).");
  StoreCase c;
  int64_t version = -1;
  REQUIRE_OK(c.Save("brief", c.a.get(), -1, &version, /*expiry_ms=*/60000));
  REQUIRE_OK(c.Save("brief", c.a.get(), -1, &version, /*expiry_ms=*/1));
  CHECK(version == 2);
  REQUIRE_OK(c.Save("kept", c.b.get(), -1, nullptr, /*expiry_ms=*/0));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const Bytes before = TakeSnapshot(c.target.get());
  ExpectFailure(lumen_store_load(c.store.get(), "brief", c.target.get(), nullptr),
                LUMEN_ERROR_NOT_FOUND, "'brief'");
  CHECK(TakeSnapshot(c.target.get()) == before);
  c.ExpectValue("kept", c.b.get(), 1);
  // Expired, the key holds nothing: a save that expects nothing stored is version 1.
  REQUIRE_OK(c.Save("brief", c.b.get(), 0, &version));
  CHECK(version == 1);
  c.ExpectValue("brief", c.b.get(), 1);
}

// What needs a Redis server, or a writer killed or out of space: tests/store.
LUMEN_CLAIM_PROVEN_ELSEWHERE("Session stores",
                             "A reader sees the old value or the new one, never a mix, whatever "
                             "happens to the writer (killed, disconnected, out of space) and "
                             "however many parts the value is split into.",
                             "tests/store/redis_store_test.cc",
                             "redis store: readers racing a writer see one value or the other, "
                             "never a mix");
LUMEN_CLAIM_PROVEN_ELSEWHERE("Session stores",
                             "A reader sees the old value or the new one, never a mix, whatever "
                             "happens to the writer (killed, disconnected, out of space) and "
                             "however many parts the value is split into.",
                             "tests/store/redis_store_test.cc",
                             "redis store: a server killed in the middle of a save, then "
                             "restarted");
LUMEN_CLAIM_PROVEN_ELSEWHERE("Session stores",
                             "A reader sees the old value or the new one, never a mix, whatever "
                             "happens to the writer (killed, disconnected, out of space) and "
                             "however many parts the value is split into.",
                             "tests/store/file_store_test.cc",
                             "file store: a full disk keeps the old value and says why");
LUMEN_CLAIM_UNPROVEN("Session stores",
                     "A reader sees the old value or the new one, never a mix, whatever happens "
                     "to the writer (killed, disconnected, out of space) and however many parts "
                     "the value is split into.",
                     "a file:// writer killed in the middle of a save (between its temporary "
                     "file and the rename), file:// readers racing a writer, and a Redis server "
                     "out of memory are not tested: the first needs a process killed at a "
                     "chosen point of the save, the last a server run with a tiny maxmemory.");

LUMEN_CLAIM_PROVEN_ELSEWHERE("Session stores",
                             "A missing key is LUMEN_ERROR_NOT_FOUND; a value of another model "
                             "LUMEN_ERROR_MODEL_MISMATCH; damaged bytes "
                             "LUMEN_ERROR_CORRUPT_SNAPSHOT; a server that cannot be reached or "
                             "drops the connection LUMEN_ERROR_UNAVAILABLE; one that does not "
                             "answer in time LUMEN_ERROR_TIMEOUT; a file that cannot be written "
                             "(a full disk, a read-only directory), or a command the server "
                             "refuses (e.g. out of memory), LUMEN_ERROR_IO.",
                             "tests/store/store_contract_test.cc",
                             "a missing key, another model's value, expiry and removal");
LUMEN_CLAIM_PROVEN_ELSEWHERE("Session stores",
                             "A missing key is LUMEN_ERROR_NOT_FOUND; a value of another model "
                             "LUMEN_ERROR_MODEL_MISMATCH; damaged bytes "
                             "LUMEN_ERROR_CORRUPT_SNAPSHOT; a server that cannot be reached or "
                             "drops the connection LUMEN_ERROR_UNAVAILABLE; one that does not "
                             "answer in time LUMEN_ERROR_TIMEOUT; a file that cannot be written "
                             "(a full disk, a read-only directory), or a command the server "
                             "refuses (e.g. out of memory), LUMEN_ERROR_IO.",
                             "tests/store/redis_store_test.cc",
                             "redis store: unreachable and slow servers");
LUMEN_CLAIM_PROVEN_ELSEWHERE("Session stores",
                             "A missing key is LUMEN_ERROR_NOT_FOUND; a value of another model "
                             "LUMEN_ERROR_MODEL_MISMATCH; damaged bytes "
                             "LUMEN_ERROR_CORRUPT_SNAPSHOT; a server that cannot be reached or "
                             "drops the connection LUMEN_ERROR_UNAVAILABLE; one that does not "
                             "answer in time LUMEN_ERROR_TIMEOUT; a file that cannot be written "
                             "(a full disk, a read-only directory), or a command the server "
                             "refuses (e.g. out of memory), LUMEN_ERROR_IO.",
                             "tests/store/redis_store_test.cc",
                             "redis store: a save into a connection the server closed fails, the "
                             "process lives");
LUMEN_CLAIM_PROVEN_ELSEWHERE("Session stores",
                             "A missing key is LUMEN_ERROR_NOT_FOUND; a value of another model "
                             "LUMEN_ERROR_MODEL_MISMATCH; damaged bytes "
                             "LUMEN_ERROR_CORRUPT_SNAPSHOT; a server that cannot be reached or "
                             "drops the connection LUMEN_ERROR_UNAVAILABLE; one that does not "
                             "answer in time LUMEN_ERROR_TIMEOUT; a file that cannot be written "
                             "(a full disk, a read-only directory), or a command the server "
                             "refuses (e.g. out of memory), LUMEN_ERROR_IO.",
                             "tests/store/file_store_test.cc",
                             "file store: a full disk keeps the old value and says why");
LUMEN_CLAIM_UNPROVEN("Session stores",
                     "A missing key is LUMEN_ERROR_NOT_FOUND; a value of another model "
                     "LUMEN_ERROR_MODEL_MISMATCH; damaged bytes LUMEN_ERROR_CORRUPT_SNAPSHOT; a "
                     "server that cannot be reached or drops the connection "
                     "LUMEN_ERROR_UNAVAILABLE; one that does not answer in time "
                     "LUMEN_ERROR_TIMEOUT; a file that cannot be written (a full disk, a "
                     "read-only directory), or a command the server refuses (e.g. out of "
                     "memory), LUMEN_ERROR_IO.",
                     "a command the Redis server refuses (IO) is not tested: it needs a server "
                     "run with a tiny maxmemory. The read-only directory case of "
                     "tests/store/file_store_test.cc is skipped when the tests run as root "
                     "(root writes into read-only directories).");

LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_store_save",
                             "Returns LUMEN_ERROR_VERSION_CONFLICT, naming the stored version, "
                             "when options->expected_version is not -1 and differs from it "
                             "(nothing is written), and the errors listed above; after any error "
                             "the key holds what it held before.",
                             "tests/store/file_store_test.cc",
                             "file store: a full disk keeps the old value and says why");
LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_store_save",
                             "Returns LUMEN_ERROR_VERSION_CONFLICT, naming the stored version, "
                             "when options->expected_version is not -1 and differs from it "
                             "(nothing is written), and the errors listed above; after any error "
                             "the key holds what it held before.",
                             "tests/store/redis_store_test.cc",
                             "redis store: a server killed in the middle of a save, then "
                             "restarted");
LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_store_load",
                             "Returns LUMEN_ERROR_NOT_FOUND for a key that holds nothing, the "
                             "statuses of lumen_session_restore for the value itself "
                             "(LUMEN_ERROR_MODEL_MISMATCH, LUMEN_ERROR_CORRUPT_SNAPSHOT, "
                             "LUMEN_ERROR_SNAPSHOT_VERSION; a missing or resized part is "
                             "LUMEN_ERROR_CORRUPT_SNAPSHOT too), and the errors listed above.",
                             "tests/store/redis_store_test.cc",
                             "redis store: damaged, resized, missing parts and heads are "
                             "reported");
LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_store_remove",
                             "Returns LUMEN_ERROR_NOT_FOUND when it holds nothing, and the errors "
                             "listed above.",
                             "tests/store/store_contract_test.cc",
                             "a missing key, another model's value, expiry and removal");

}  // namespace
}  // namespace lumen_fixture
