// What every session store promises (lumen.h, "Session stores"), run against a directory
// (file://) and a private Redis server (redis://, its values split into 4 KiB parts so that
// every save has many): every family and state part round-trips bit for bit, versions and
// compare-and-set, a missing key, a value of another model, expiry and removal, bad
// arguments; on every error the session is unchanged.

#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/store/store_test_util.h"

namespace lumen_store_test {
namespace {

// A store of one kind, with whatever it needs alive (a directory or a server).
struct StoreUnderTest {
  std::string kind;
  std::unique_ptr<TempDir> dir;
#ifdef LUMEN_TEST_REDIS_SERVER
  std::unique_ptr<RedisServer> server;
#endif
  std::string uri;

  explicit StoreUnderTest(const std::string& k) : kind(k) {
    if (kind == "file") {
      dir = std::make_unique<TempDir>();
      uri = "file://" + (dir->path() / "store").string();
    } else {
#ifdef LUMEN_TEST_REDIS_SERVER
      server = std::make_unique<RedisServer>();
      uri = server->uri();
#endif
    }
  }
  StorePtr Open() const { return OpenStore(uri, /*part_bytes=*/4096); }
};

std::vector<std::string> Kinds() {
#ifdef LUMEN_TEST_REDIS_SERVER
  return {"file", "redis"};
#else
  WARN("redis-server or hiredis was not found at build time: only file:// stores are tested");
  return {"file"};
#endif
}

TEST_CASE("every family and state part round-trips through a store bit for bit",
          "[store]") {
  for (const std::string& kind : Kinds()) {
    INFO("store kind " << kind);
    const int32_t dtype = GENERATE(LUMEN_DTYPE_FLOAT32, LUMEN_DTYPE_BFLOAT16);
    const StoreUnderTest under(kind);
    const Stack stack(EveryFamily());
    std::mt19937 rng(2901);
    SessionPtr source = stack.NewSession();
    AddHistory(stack, {source.get()}, rng);
    StorePtr store = under.Open();

    lumen_store_save_options options;
    lumen_store_save_options_init(&options);
    options.state_dtype = dtype;
    int64_t version = -1;
    REQUIRE_OK(lumen_store_save(store.get(), "conversation/7", source.get(), &options,
                                &version));
    CHECK(version == 1);

    // A second store on the same URI (another process would do the same) reads it back.
    StorePtr other = under.Open();
    SessionPtr loaded = stack.NewSession();
    int64_t loaded_version = -1;
    REQUIRE_OK(lumen_store_load(other.get(), "conversation/7", loaded.get(), &loaded_version));
    CHECK(loaded_version == 1);
    const SessionState expected =
        dtype == LUMEN_DTYPE_FLOAT32 ? Capture(source.get(), stack.model.get())
                                     : RoundedToBFloat16(Capture(source.get(), stack.model.get()));
    CHECK(AnyNonZero(expected));
    CHECK(SameBits(expected, Capture(loaded.get(), stack.model.get())));

    // The loaded session continues exactly as the original does.
    if (dtype == LUMEN_DTYPE_FLOAT32) {
      for (int32_t layer = 0; layer < stack.num_layers(); ++layer) {
        const Tokens more = RandomTokens(stack.layers[layer], 3, rng);
        CHECK(SameBits(Run(source.get(), layer, more, Path::kStep),
                       Run(loaded.get(), layer, more, Path::kStep)));
      }
      CHECK(SameBits(Capture(source.get(), stack.model.get()),
                     Capture(loaded.get(), stack.model.get())));
    }
  }
}

TEST_CASE("versions count saves; compare-and-set refuses a stale writer", "[store]") {
  for (const std::string& kind : Kinds()) {
    INFO("store kind " << kind);
    const StoreUnderTest under(kind);
    const Stack stack(MixedLayers(kDims));
    std::mt19937 rng(2902);
    SessionPtr a = stack.NewSession(), b = stack.NewSession();
    AddHistory(stack, {a.get()}, rng);
    AddHistory(stack, {b.get()}, rng, 20);
    StorePtr machine1 = under.Open(), machine2 = under.Open();

    int64_t version = -1;
    // 0: only where nothing is stored.
    REQUIRE_OK(Save(machine1.get(), "k", a.get(), /*expected=*/0, &version));
    CHECK(version == 1);
    ExpectStatus(Save(machine2.get(), "k", b.get(), /*expected=*/0), LUMEN_ERROR_VERSION_CONFLICT,
                 {"holds version 1", "'k'"});
    REQUIRE_OK(Save(machine1.get(), "k", a.get(), /*expected=*/-1, &version));
    CHECK(version == 2);

    // Both machines read version 2; the first to save wins, the second is told.
    SessionPtr seen1 = stack.NewSession(), seen2 = stack.NewSession();
    int64_t v1 = -1, v2 = -1;
    REQUIRE_OK(lumen_store_load(machine1.get(), "k", seen1.get(), &v1));
    REQUIRE_OK(lumen_store_load(machine2.get(), "k", seen2.get(), &v2));
    CHECK(v1 == 2);
    CHECK(v2 == 2);
    REQUIRE_OK(Save(machine2.get(), "k", b.get(), v2, &version));
    CHECK(version == 3);
    ExpectStatus(Save(machine1.get(), "k", a.get(), v1), LUMEN_ERROR_VERSION_CONFLICT,
                 {"expected version 2", "holds version 3"});
    // The winner's state is what is stored.
    SessionPtr check = stack.NewSession();
    REQUIRE_OK(lumen_store_load(machine1.get(), "k", check.get(), &version));
    CHECK(version == 3);
    CHECK(SameBits(Capture(b.get(), stack.model.get()), Capture(check.get(), stack.model.get())));
  }
}

TEST_CASE("writers racing with compare-and-set lose no update", "[store]") {
  for (const std::string& kind : Kinds()) {
    INFO("store kind " << kind);
    const StoreUnderTest under(kind);
    // One small layer: each writer loads, adds one token, and saves with the version it
    // loaded, retrying on a conflict; the final token count is the number of updates.
    const Stack stack({Retention(kSmall)});
    {
      SessionPtr empty = stack.NewSession();
      StorePtr store = under.Open();
      REQUIRE_OK(Save(store.get(), "counter", empty.get(), 0));
    }
    constexpr int kWriters = 3, kUpdates = 8;
    std::atomic<int> conflicts{0}, failures{0};
    std::vector<std::thread> writers;
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([&, w] {
        std::mt19937 rng(100 + w);
        StorePtr store = under.Open();
        SessionPtr s = stack.NewSession();
        const Tokens token = RandomTokens(stack.layers[0], 1, rng);
        for (int done = 0; done < kUpdates;) {
          int64_t version = -1;
          if (lumen_store_load(store.get(), "counter", s.get(), &version) != LUMEN_OK) {
            ++failures;
            return;
          }
          lumen_layer_inputs in;
          lumen_layer_inputs_init(&in);
          in.q = token.q.data(); in.q_count = static_cast<int64_t>(token.q.size());
          in.k = token.k.data(); in.k_count = static_cast<int64_t>(token.k.size());
          in.v = token.v.data(); in.v_count = static_cast<int64_t>(token.v.size());
          std::vector<float> o(token.v.size());
          lumen_layer_output out;
          lumen_layer_output_init(&out);
          out.o = o.data(); out.o_count = static_cast<int64_t>(o.size());
          if (lumen_session_step(s.get(), 0, &in, &out) != LUMEN_OK) {
            ++failures;
            return;
          }
          const lumen_status status = Save(store.get(), "counter", s.get(), version);
          if (status == LUMEN_OK) {
            ++done;
          } else if (status == LUMEN_ERROR_VERSION_CONFLICT) {
            ++conflicts;
          } else {
            ++failures;
            return;
          }
        }
      });
    }
    for (std::thread& t : writers) t.join();
    CHECK(failures == 0);
    StorePtr store = under.Open();
    SessionPtr final_state = stack.NewSession();
    int64_t version = -1;
    REQUIRE_OK(lumen_store_load(store.get(), "counter", final_state.get(), &version));
    int64_t tokens = -1;
    REQUIRE(lumen_session_tokens(final_state.get(), 0, &tokens) == LUMEN_OK);
    CHECK(tokens == kWriters * kUpdates);
    CHECK(version == 1 + kWriters * kUpdates);
    INFO("conflicts: " << conflicts.load());
  }
}

TEST_CASE("a missing key, another model's value, expiry and removal", "[store]") {
  for (const std::string& kind : Kinds()) {
    INFO("store kind " << kind);
    const StoreUnderTest under(kind);
    const Stack stack(MixedLayers(kDims));
    const Stack other(MixedLayers({2, 4, 16, 8}));  // another value width: another model
    std::mt19937 rng(2903);
    SessionPtr s = stack.NewSession(), foreign = other.NewSession();
    AddHistory(stack, {s.get()}, rng);
    AddHistory(other, {foreign.get()}, rng);
    StorePtr store = under.Open();
    SessionPtr target = stack.NewSession();
    AddHistory(stack, {target.get()}, rng, 11);
    const SessionState before = Capture(target.get(), stack.model.get());

    ExpectStatus(lumen_store_load(store.get(), "nobody", target.get(), nullptr),
                 LUMEN_ERROR_NOT_FOUND, {"nobody"});
    REQUIRE_OK(Save(store.get(), "foreign", foreign.get()));
    ExpectStatus(lumen_store_load(store.get(), "foreign", target.get(), nullptr),
                 LUMEN_ERROR_MODEL_MISMATCH, {"foreign"});
    CHECK(SameBits(before, Capture(target.get(), stack.model.get())));

    // Expiry: there, then gone (and a save after it starts again from version 1).
    int64_t version = -1;
    REQUIRE_OK(Save(store.get(), "brief", s.get(), -1, &version, /*expiry_ms=*/300));
    REQUIRE_OK(lumen_store_load(store.get(), "brief", target.get(), nullptr));
    REQUIRE_OK(lumen_store_load(store.get(), "foreign", foreign.get(), nullptr));
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    const SessionState loaded = Capture(target.get(), stack.model.get());
    ExpectStatus(lumen_store_load(store.get(), "brief", target.get(), nullptr),
                 LUMEN_ERROR_NOT_FOUND);
    CHECK(SameBits(loaded, Capture(target.get(), stack.model.get())));
    REQUIRE_OK(Save(store.get(), "brief", s.get(), 0, &version));
    CHECK(version == 1);

    // Removal.
    REQUIRE_OK(lumen_store_remove(store.get(), "brief"));
    ExpectStatus(lumen_store_remove(store.get(), "brief"), LUMEN_ERROR_NOT_FOUND);
    ExpectStatus(lumen_store_load(store.get(), "brief", target.get(), nullptr),
                 LUMEN_ERROR_NOT_FOUND);
    // Keys of any bytes, up to 1024 of them.
    const std::string odd = "user 42/\xc3\xa9t\xc3\xa9:{session}%" + std::string(1000, 'x');
    REQUIRE_OK(Save(store.get(), odd, s.get()));
    REQUIRE_OK(lumen_store_load(store.get(), odd.c_str(), target.get(), nullptr));
    CHECK(SameBits(Capture(s.get(), stack.model.get()), Capture(target.get(), stack.model.get())));
  }
}

TEST_CASE("store calls check their arguments", "[store]") {
  TempDir dir;
  const std::string uri = "file://" + dir.path().string();
  const Stack stack(MixedLayers(kSmall));
  SessionPtr s = stack.NewSession();
  StorePtr store = OpenStore(uri);
  lumen_store* raw = nullptr;
  ExpectStatus(lumen_store_open("ftp://example.com/x", nullptr, &raw),
               LUMEN_ERROR_INVALID_ARGUMENT, {"ftp://"});
  ExpectStatus(lumen_store_open("file://relative/dir", nullptr, &raw),
               LUMEN_ERROR_INVALID_ARGUMENT, {"absolute"});
  ExpectStatus(lumen_store_open("redis://host:99999/0", nullptr, &raw),
               LUMEN_ERROR_INVALID_ARGUMENT, {"port"});
  ExpectStatus(lumen_store_open("redis://host:6379/x", nullptr, &raw),
               LUMEN_ERROR_INVALID_ARGUMENT, {"database"});
  ExpectStatus(lumen_store_open(nullptr, nullptr, &raw), LUMEN_ERROR_INVALID_ARGUMENT);
  ExpectStatus(lumen_store_open(uri.c_str(), nullptr, nullptr), LUMEN_ERROR_INVALID_ARGUMENT);
  lumen_store_options options;
  lumen_store_options_init(&options);
  options.part_bytes = 100;
  ExpectStatus(lumen_store_open(uri.c_str(), &options, &raw), LUMEN_ERROR_INVALID_ARGUMENT,
               {"part_bytes"});
  const std::string file = (dir.path() / "plain").string();
  WriteFile(file, Bytes{1, 2, 3});
  ExpectStatus(lumen_store_open(("file://" + file).c_str(), nullptr, &raw), LUMEN_ERROR_IO,
               {"not a directory"});
  CHECK(raw == nullptr);

  ExpectStatus(lumen_store_save(store.get(), "", s.get(), nullptr, nullptr),
               LUMEN_ERROR_INVALID_ARGUMENT, {"key"});
  ExpectStatus(lumen_store_save(store.get(), std::string(1025, 'k').c_str(), s.get(), nullptr,
                                nullptr),
               LUMEN_ERROR_INVALID_ARGUMENT, {"1024"});
  ExpectStatus(lumen_store_save(nullptr, "k", s.get(), nullptr, nullptr),
               LUMEN_ERROR_INVALID_ARGUMENT);
  ExpectStatus(lumen_store_load(store.get(), "k", nullptr, nullptr), LUMEN_ERROR_INVALID_ARGUMENT);
  lumen_store_save_options save;
  lumen_store_save_options_init(&save);
  save.expected_version = -2;
  ExpectStatus(lumen_store_save(store.get(), "k", s.get(), &save, nullptr),
               LUMEN_ERROR_INVALID_ARGUMENT, {"expected_version"});
  lumen_store_save_options_init(&save);
  save.expiry_ms = -5;
  ExpectStatus(lumen_store_save(store.get(), "k", s.get(), &save, nullptr),
               LUMEN_ERROR_INVALID_ARGUMENT, {"expiry_ms"});
  lumen_store_save_options_init(&save);
  save.state_dtype = LUMEN_DTYPE_FLOAT16;
  ExpectStatus(lumen_store_save(store.get(), "k", s.get(), &save, nullptr),
               LUMEN_ERROR_INVALID_ARGUMENT, {"state_dtype"});
  lumen_store_destroy(nullptr);
}

}  // namespace
}  // namespace lumen_store_test
