// The redis:// store against a private redis-server: values in many parts, what a damaged or
// partly deleted value gives, a server that is unreachable, slow, or killed in the middle of
// a save and restarted, readers that race a writer (never a mix of two values), and two
// processes that continue each other's conversation bit for bit.

#include <catch2/catch.hpp>

#include <stdlib.h>

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/store/store_test_util.h"

#ifdef LUMEN_TEST_REDIS_SERVER

namespace lumen_store_test {
namespace {

constexpr int64_t kPartBytes = 4096;

struct RedisCase {
  RedisServer server;
  Stack stack{MixedLayers(kDims)};
  std::mt19937 rng{2921};
  SessionPtr saved = stack.NewSession();
  SessionPtr target = stack.NewSession();
  StorePtr store;

  RedisCase() {
    AddHistory(stack, {saved.get()}, rng);
    AddHistory(stack, {target.get()}, rng, 9);
    store = OpenStore(server.uri(), kPartBytes);
    REQUIRE_OK(Save(store.get(), "chat", saved.get()));
  }
  std::vector<std::string> Parts() { return server.Keys("lumen:{chat}:[0-9a-f]*"); }
  void ExpectValue(const lumen_session* expected, int64_t expected_version) {
    SessionPtr check = stack.NewSession();
    int64_t version = -1;
    REQUIRE_OK(lumen_store_load(store.get(), "chat", check.get(), &version));
    CHECK(version == expected_version);
    CHECK(SameBits(Capture(expected, stack.model.get()), Capture(check.get(), stack.model.get())));
  }
};

TEST_CASE("redis store: a value in parts, replaced whole, parts without expiry",
          "[store][redis]") {
  RedisCase c;
  const int64_t size = SnapshotSize(c.saved.get());
  const std::vector<std::string> first = c.Parts();
  CHECK(static_cast<int64_t>(first.size()) == (size + kPartBytes - 1) / kPartBytes);
  CHECK(c.server.Keys("lumen:{chat}:head").size() == 1);
  for (const std::string& part : first) CHECK(c.server.Command({"PTTL", part})->integer == -1);
  // A new save replaces every part; a save that loses its version check leaves none.
  REQUIRE_OK(Save(c.store.get(), "chat", c.target.get()));
  const std::vector<std::string> second = c.Parts();
  CHECK(second.size() == first.size());
  for (const std::string& part : second) {
    CHECK(std::find(first.begin(), first.end(), part) == first.end());
  }
  ExpectStatus(Save(c.store.get(), "chat", c.saved.get(), /*expected=*/1),
               LUMEN_ERROR_VERSION_CONFLICT, {"holds version 2"});
  CHECK(c.Parts() == second);
  c.ExpectValue(c.target.get(), 2);
  // An expiring value: head and parts carry it.
  REQUIRE_OK(Save(c.store.get(), "chat", c.saved.get(), -1, nullptr, /*expiry_ms=*/60000));
  CHECK(c.server.Command({"PTTL", "lumen:{chat}:head"})->integer > 0);
  for (const std::string& part : c.Parts()) {
    CHECK(c.server.Command({"PTTL", part})->integer > 0);
  }
}

TEST_CASE("redis store: damaged, resized, missing parts and heads are reported",
          "[store][redis]") {
  RedisCase c;
  const SessionState before = Capture(c.target.get(), c.stack.model.get());
  const std::vector<std::string> parts = c.Parts();
  REQUIRE(parts.size() > 3);
  auto expect = [&](lumen_status status, std::initializer_list<const char*> words) {
    ExpectStatus(lumen_store_load(c.store.get(), "chat", c.target.get(), nullptr), status, words);
    CHECK(SameBits(before, Capture(c.target.get(), c.stack.model.get())));
  };
  SECTION("a flipped byte") {
    ReplyPtr part = c.server.Command({"GET", parts[1]});
    std::string bytes(part->str, part->len);
    bytes[100] ^= 0x04;
    c.server.Command({"SET", parts[1], bytes});
    expect(LUMEN_ERROR_CORRUPT_SNAPSHOT, {"checksum", "chat"});
  }
  SECTION("a part that grew") {
    c.server.Command({"APPEND", parts[2], "xyz"});
    expect(LUMEN_ERROR_CORRUPT_SNAPSHOT, {"bytes"});
  }
  SECTION("a deleted part") {
    c.server.Command({"DEL", parts[3]});
    expect(LUMEN_ERROR_CORRUPT_SNAPSHOT, {"missing"});
  }
  SECTION("a damaged head") {
    c.server.Command({"SET", "lumen:{chat}:head", "lumen-head 1 banana"});
    expect(LUMEN_ERROR_CORRUPT_SNAPSHOT, {"head"});
    // A version check cannot compare against it; a plain save replaces it.
    ExpectStatus(Save(c.store.get(), "chat", c.saved.get(), 1), LUMEN_ERROR_CORRUPT_SNAPSHOT,
                 {"head"});
    REQUIRE_OK(Save(c.store.get(), "chat", c.saved.get()));
    c.ExpectValue(c.saved.get(), 1);
  }
  SECTION("a deleted head: the key holds nothing") {
    c.server.Command({"DEL", "lumen:{chat}:head"});
    expect(LUMEN_ERROR_NOT_FOUND, {"chat"});
  }
}

TEST_CASE("redis store: unreachable and slow servers", "[store][redis]") {
  RedisCase c;
  SECTION("nothing listens") {
    lumen_store* raw = nullptr;
    const std::string uri = "redis://127.0.0.1:" + std::to_string(FreeLoopbackPort());
    ExpectStatus(lumen_store_open(uri.c_str(), nullptr, &raw), LUMEN_ERROR_UNAVAILABLE,
                 {"cannot be reached"});
    CHECK(raw == nullptr);
  }
  SECTION("a server that does not answer in time") {
    StorePtr quick = OpenStore(c.server.uri(), kPartBytes, /*timeout_ms=*/200);
    c.server.Command({"CLIENT", "PAUSE", "1500", "ALL"});
    const SessionState before = Capture(c.target.get(), c.stack.model.get());
    ExpectStatus(lumen_store_load(quick.get(), "chat", c.target.get(), nullptr),
                 LUMEN_ERROR_TIMEOUT, {"200 ms"});
    CHECK(SameBits(before, Capture(c.target.get(), c.stack.model.get())));
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    // The store connects again on its next call.
    REQUIRE_OK(lumen_store_load(quick.get(), "chat", c.target.get(), nullptr));
  }
}

TEST_CASE("redis store: a server killed in the middle of a save, then restarted",
          "[store][redis]") {
  RedisCase c;
  // Writes wait while the server is paused, so the save is surely in flight when it dies.
  c.server.Command({"CLIENT", "PAUSE", "10000", "WRITE"});
  lumen_status status = LUMEN_OK;
  std::string message;
  std::thread saver([&] {
    status = Save(c.store.get(), "chat", c.target.get());
    message = lumen_last_error_message();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  c.server.Kill();
  saver.join();
  INFO(lumen_status_string(status) << ": " << message);
  CHECK(status == LUMEN_ERROR_UNAVAILABLE);
  CHECK(message.find("chat") != std::string::npos);
  // While it is down, every call says so.
  ExpectStatus(lumen_store_load(c.store.get(), "chat", c.target.get(), nullptr),
               LUMEN_ERROR_UNAVAILABLE, {"cannot be reached"});
  // Restarted, it holds the value saved before, whole; the same store carries on.
  c.server.Start();
  c.ExpectValue(c.saved.get(), 1);
  REQUIRE_OK(Save(c.store.get(), "chat", c.target.get()));
  c.ExpectValue(c.target.get(), 2);
}

TEST_CASE("redis store: a save into a connection the server closed fails, the process lives",
          "[store][redis]") {
  // A value larger than a loopback socket's send buffer (8 MiB, in parts of 1 MiB), so that
  // the save is still writing when the connection's reset arrives: writes into a closed
  // connection raise SIGPIPE unless the store keeps it from ending the process.
  RedisServer server;
  const Stack big({GatedDeltaNet({16, 32, 128, 128}), GatedDeltaNet({16, 32, 128, 128}),
                   GatedDeltaNet({16, 32, 128, 128}), GatedDeltaNet({16, 32, 128, 128})});
  SessionPtr s = big.NewSession();
  StorePtr store = OpenStore(server.uri(), int64_t{1} << 20);
  REQUIRE_OK(Save(store.get(), "big", s.get()));
  server.Kill();
  for (int attempt = 0; attempt < 3; ++attempt) {
    ExpectStatus(Save(store.get(), "big", s.get()), LUMEN_ERROR_UNAVAILABLE, {"big"});
  }
  server.Start();
  REQUIRE_OK(Save(store.get(), "big", s.get()));
}

TEST_CASE("redis store: readers racing a writer see one value or the other, never a mix",
          "[store][redis]") {
  RedisCase c;
  const SessionState a = Capture(c.saved.get(), c.stack.model.get());
  const SessionState b = Capture(c.target.get(), c.stack.model.get());
  std::atomic<bool> done{false};
  std::atomic<int> saves{0}, bad_saves{0};
  std::thread writer([&] {
    StorePtr store = OpenStore(c.server.uri(), kPartBytes);
    for (int i = 0; !done; ++i) {
      const lumen_session* s = i % 2 == 0 ? c.target.get() : c.saved.get();
      if (Save(store.get(), "chat", s) == LUMEN_OK) {
        ++saves;
      } else {
        ++bad_saves;
      }
    }
  });
  StorePtr reader = OpenStore(c.server.uri(), kPartBytes);
  SessionPtr seen = c.stack.NewSession();
  int loads = 0, mixed = 0, failed = 0;
  std::string failure;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < end) {
    if (lumen_store_load(reader.get(), "chat", seen.get(), nullptr) != LUMEN_OK) {
      ++failed;
      failure = lumen_last_error_message();
      continue;
    }
    ++loads;
    const SessionState state = Capture(seen.get(), c.stack.model.get());
    if (!SameBits(state, a) && !SameBits(state, b)) ++mixed;
  }
  done = true;
  writer.join();
  INFO("loads " << loads << ", saves " << saves.load() << "; a failed load: " << failure);
  CHECK(loads >= 3);
  CHECK(saves >= 3);
  CHECK(bad_saves == 0);
  CHECK(failed == 0);
  CHECK(mixed == 0);
}

// Run by the next test in a process of its own: loads LUMEN_PEER_KEY from LUMEN_PEER_URI,
// runs the tokens of seed LUMEN_PEER_SEED through every layer, saves it back with the
// version it loaded.
TEST_CASE("redis store peer process", "[.peer]") {
  const char* uri = std::getenv("LUMEN_PEER_URI");
  const char* seed = std::getenv("LUMEN_PEER_SEED");
  REQUIRE(uri != nullptr);
  REQUIRE(seed != nullptr);
  const Stack stack(EveryFamily());
  StorePtr store = OpenStore(uri, kPartBytes);
  SessionPtr s = stack.NewSession();
  int64_t version = -1;
  REQUIRE_OK(lumen_store_load(store.get(), "shared", s.get(), &version));
  std::mt19937 rng(static_cast<uint32_t>(std::stoul(seed)));
  for (int32_t layer = 0; layer < stack.num_layers(); ++layer) {
    Run(s.get(), layer, RandomTokens(stack.layers[layer], 5, rng), Path::kStep);
  }
  REQUIRE_OK(Save(store.get(), "shared", s.get(), version));
}

// Runs this test program's peer case in a new process; returns its exit status.
int RunPeer(const std::string& uri, uint32_t seed) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  std::vector<std::string> env_strings = {"LUMEN_PEER_URI=" + uri,
                                          "LUMEN_PEER_SEED=" + std::to_string(seed)};
  std::vector<char*> env;
  for (std::string& e : env_strings) env.push_back(e.data());
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  env.push_back(nullptr);
  std::string arg0 = self, arg1 = "redis store peer process";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = -1;
  REQUIRE(::posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, env.data()) == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

TEST_CASE("redis store: two processes continue each other's conversation bit for bit",
          "[store][redis]") {
  RedisServer server;
  const Stack stack(EveryFamily());
  StorePtr store = OpenStore(server.uri(), kPartBytes);
  std::mt19937 rng(2931);
  SessionPtr mine = stack.NewSession();
  AddHistory(stack, {mine.get()}, rng);
  int64_t version = -1;
  REQUIRE_OK(Save(store.get(), "shared", mine.get(), 0, &version));
  // A session that never leaves this process runs every token both processes run.
  SessionPtr reference = stack.NewSession();
  REQUIRE_OK(lumen_store_load(store.get(), "shared", reference.get(), nullptr));
  for (uint32_t round = 0; round < 2; ++round) {
    const uint32_t seed = 500 + round;
    REQUIRE(RunPeer(server.uri(), seed) == 0);
    std::mt19937 peer_rng(seed);
    for (int32_t layer = 0; layer < stack.num_layers(); ++layer) {
      Run(reference.get(), layer, RandomTokens(stack.layers[layer], 5, peer_rng), Path::kStep);
    }
    // This process takes the conversation back, checks it, and adds its own tokens.
    REQUIRE_OK(lumen_store_load(store.get(), "shared", mine.get(), &version));
    CHECK(version == 2 + 2 * round);
    CHECK(SameBits(Capture(reference.get(), stack.model.get()),
                   Capture(mine.get(), stack.model.get())));
    for (int32_t layer = 0; layer < stack.num_layers(); ++layer) {
      const Tokens own = RandomTokens(stack.layers[layer], 4, rng);
      CHECK(SameBits(Run(mine.get(), layer, own, Path::kStep),
                     Run(reference.get(), layer, own, Path::kStep)));
    }
    REQUIRE_OK(Save(store.get(), "shared", mine.get(), version, &version));
  }
}

}  // namespace
}  // namespace lumen_store_test

#endif  // LUMEN_TEST_REDIS_SERVER
