// The session memory budget of a CPU engine (lumen.h, "Session memory budget"): sessions
// evicted to the spill directory and brought back bit for bit (every family and state part),
// least recently used first, never past the budget, prefetched in the background; and
// failures injected into the spill directory (a missing or read-only directory, a full disk,
// a damaged spill file) that lose nothing and say why.

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/store/store_test_util.h"

namespace lumen_store_test {
namespace {

int64_t StateBytes(const lumen_model* model) {
  int64_t bytes = 0;
  REQUIRE(lumen_model_state_bytes(model, -1, &bytes) == LUMEN_OK);
  return bytes;
}

// A CPU engine of `layers` whose budget holds `sessions` sessions' state.
struct BudgetStack {
  std::vector<LayerDesc> layers;
  ModelPtr model;
  EnginePtr engine;

  BudgetStack(std::vector<LayerDesc> l, int64_t sessions, const char* spill_directory = nullptr)
      : layers(std::move(l)), model(BuildModel(layers)) {
    lumen_engine_options options;
    lumen_engine_options_init(&options);
    options.backend = LUMEN_BACKEND_CPU;
    options.num_threads = 1;
    options.memory_budget_bytes = sessions * StateBytes(model.get());
    options.spill_directory = spill_directory;
    lumen_engine* raw = nullptr;
    REQUIRE_OK(lumen_engine_create(model.get(), &options, &raw));
    engine.reset(raw);
  }
  SessionPtr NewSession() const {
    lumen_session* s = nullptr;
    REQUIRE_OK(lumen_session_create(engine.get(), &s));
    return SessionPtr(s);
  }
  lumen_memory_stats Stats() const {
    lumen_memory_stats stats;
    lumen_memory_stats_init(&stats);
    REQUIRE_OK(lumen_engine_stats(engine.get(), &stats));
    return stats;
  }
  // A stack over the same model and layers, for the tests' helpers.
  Stack AsStack() const { return Stack(layers); }
};

bool Resident(const lumen_session* s) {
  int32_t resident = -1;
  REQUIRE(lumen_session_resident(s, &resident) == LUMEN_OK);
  return resident == 1;
}

void ExpectWithinBudget(const BudgetStack& b) {
  const lumen_memory_stats stats = b.Stats();
  CHECK(stats.resident_bytes <= stats.memory_budget_bytes);
}

TEST_CASE("evicted sessions come back bit for bit, every family and state part",
          "[budget]") {
  const std::vector<LayerDesc> layers = EveryFamily();
  const BudgetStack budget(layers, 3);
  const Stack plain(layers);  // the same sessions on an engine without a budget
  constexpr int kSessions = 8;
  std::vector<SessionPtr> kept, reference;
  for (int i = 0; i < kSessions; ++i) {
    kept.push_back(budget.NewSession());
    reference.push_back(plain.NewSession());
    std::mt19937 rng_a(300 + i), rng_b(300 + i);
    AddHistory(plain, {kept.back().get()}, rng_a, 10 + i);
    AddHistory(plain, {reference.back().get()}, rng_b, 10 + i);
    ExpectWithinBudget(budget);
  }
  lumen_memory_stats stats = budget.Stats();
  CHECK(stats.resident_sessions == 3);
  CHECK(stats.spilled_sessions == kSessions - 3);
  CHECK(stats.evictions >= kSessions - 3);
  CHECK(stats.bytes_evicted == stats.evictions * SnapshotSize(kept[0].get()));
  // Every session, read back (each read brings an evicted one back), then run on.
  std::mt19937 rng(399);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kSessions; ++i) {
      INFO("round " << round << ", session " << i);
      CHECK(SameBits(Capture(reference[i].get(), plain.model.get()),
                     Capture(kept[i].get(), budget.model.get())));
      for (int32_t layer = 0; layer < plain.num_layers(); ++layer) {
        const Tokens t = RandomTokens(layers[layer], 2, rng);
        CHECK(SameBits(Run(reference[i].get(), layer, t, Path::kStep),
                       Run(kept[i].get(), layer, t, Path::kStep)));
      }
      ExpectWithinBudget(budget);
    }
  }
  stats = budget.Stats();
  CHECK(stats.reloads > 0);
  CHECK(stats.bytes_reloaded == stats.reloads * SnapshotSize(kept[0].get()));
  // Fork, reset, snapshot, save and a store: each on an evicted session.
  REQUIRE_FALSE(Resident(kept[0].get()));
  lumen_session* fork = nullptr;
  REQUIRE_OK(lumen_session_fork(kept[0].get(), &fork));
  SessionPtr forked(fork);
  CHECK(SameBits(Capture(reference[0].get(), plain.model.get()),
                 Capture(forked.get(), budget.model.get())));
  REQUIRE_FALSE(Resident(kept[1].get()));
  CHECK(TakeSnapshot(kept[1].get()) == TakeSnapshot(reference[1].get()));
  TempDir dir;
  StorePtr store = OpenStore("file://" + dir.path().string());
  REQUIRE_FALSE(Resident(kept[2].get()));
  REQUIRE_OK(Save(store.get(), "k", kept[2].get()));
  REQUIRE_FALSE(Resident(kept[3].get()));
  REQUIRE_OK(lumen_store_load(store.get(), "k", kept[3].get(), nullptr));
  CHECK(SameBits(Capture(reference[2].get(), plain.model.get()),
                 Capture(kept[3].get(), budget.model.get())));
  REQUIRE_FALSE(Resident(kept[4].get()));
  REQUIRE_OK(lumen_session_reset(kept[4].get()));
  CHECK_FALSE(AnyNonZero(Capture(kept[4].get(), budget.model.get())));
  ExpectWithinBudget(budget);
}

TEST_CASE("the least recently used idle session is evicted first", "[budget]") {
  const BudgetStack budget(MixedLayers(kSmall), 3);
  SessionPtr a = budget.NewSession(), b = budget.NewSession(), c = budget.NewSession();
  CHECK(budget.Stats().evictions == 0);
  std::vector<float> state(1);
  int64_t count = 0;
  REQUIRE(lumen_model_state_count(budget.model.get(), 0, LUMEN_STATE_MATRIX, &count) ==
          LUMEN_OK);
  state.resize(count);
  // Touch a: b is now the least recently used.
  REQUIRE_OK(lumen_session_read_state(a.get(), 0, LUMEN_STATE_MATRIX, state.data(), count));
  SessionPtr d = budget.NewSession();
  CHECK(Resident(a.get()));
  CHECK_FALSE(Resident(b.get()));
  CHECK(Resident(c.get()));
  CHECK(Resident(d.get()));
  // Using b brings it back and evicts c, now the least recently used.
  REQUIRE_OK(lumen_session_read_state(b.get(), 0, LUMEN_STATE_MATRIX, state.data(), count));
  CHECK(Resident(b.get()));
  CHECK_FALSE(Resident(c.get()));
  const lumen_memory_stats stats = budget.Stats();
  CHECK(stats.evictions == 2);
  CHECK(stats.reloads == 1);
  CHECK(stats.resident_sessions == 3);
  CHECK(stats.spilled_sessions == 1);
  // Destroying an evicted session removes its spill file.
  c.reset();
  CHECK(budget.Stats().spilled_sessions == 0);
}

TEST_CASE("a call needs all its sessions resident at once, within the budget", "[budget]") {
  const std::vector<LayerDesc> layers = {Retention(kSmall)};
  const BudgetStack budget(layers, 2);
  std::vector<SessionPtr> sessions;
  for (int i = 0; i < 3; ++i) sessions.push_back(budget.NewSession());
  std::mt19937 rng(7);
  const Tokens t = RandomTokens(layers[0], 3, rng);  // one token for each of 3 sessions
  std::vector<lumen_session*> raw = {sessions[0].get(), sessions[1].get(), sessions[2].get()};
  lumen_layer_inputs in;
  lumen_layer_inputs_init(&in);
  in.q = t.q.data(); in.q_count = static_cast<int64_t>(t.q.size());
  in.k = t.k.data(); in.k_count = static_cast<int64_t>(t.k.size());
  in.v = t.v.data(); in.v_count = static_cast<int64_t>(t.v.size());
  std::vector<float> o(t.v.size());
  lumen_layer_output out;
  lumen_layer_output_init(&out);
  out.o = o.data(); out.o_count = static_cast<int64_t>(o.size());
  ExpectStatus(lumen_engine_step_batch(budget.engine.get(), 0, raw.data(), 3, &in, &out),
               LUMEN_ERROR_OUT_OF_MEMORY, {"budget"});
  for (const SessionPtr& s : sessions) {
    int64_t tokens = -1;
    REQUIRE(lumen_session_tokens(s.get(), 0, &tokens) == LUMEN_OK);
    CHECK(tokens == 0);
  }
  // Two at a time fit.
  in.q_count = in.k_count = in.q_count / 3 * 2;
  in.v_count = out.o_count = in.v_count / 3 * 2;
  REQUIRE_OK(lumen_engine_step_batch(budget.engine.get(), 0, raw.data() + 1, 2, &in, &out));
  ExpectWithinBudget(budget);
}

TEST_CASE("prefetch brings an evicted session back in the background", "[budget]") {
  const BudgetStack budget(MixedLayers(kDims), 2);
  const Stack helper = budget.AsStack();
  SessionPtr a = budget.NewSession();
  std::mt19937 rng(11);
  AddHistory(helper, {a.get()}, rng);
  const SessionState before = Capture(a.get(), budget.model.get());
  SessionPtr b = budget.NewSession(), c = budget.NewSession();
  REQUIRE_FALSE(Resident(a.get()));
  REQUIRE_OK(lumen_session_prefetch(a.get()));
  REQUIRE_OK(lumen_session_prefetch(b.get()));  // resident: a no-op
  for (int i = 0; i < 500 && !Resident(a.get()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(Resident(a.get()));
  lumen_memory_stats stats = budget.Stats();
  CHECK(stats.prefetches == 1);
  const int64_t reloads = stats.reloads;
  CHECK(SameBits(before, Capture(a.get(), budget.model.get())));
  CHECK(budget.Stats().reloads == reloads);  // the call found it resident
  ExpectWithinBudget(budget);
  // A prefetch queued for a session destroyed meanwhile is dropped.
  REQUIRE_FALSE(Resident(b.get()));
  REQUIRE_OK(lumen_session_prefetch(b.get()));
  b.reset();
  ExpectWithinBudget(budget);
}

TEST_CASE("spill failures keep the session resident and say why", "[budget]") {
  TempDir dir;
  const fs::path spill = dir.path() / "spill";
  fs::create_directory(spill);
  const BudgetStack budget(MixedLayers(kDims), 2, spill.c_str());
  const Stack helper = budget.AsStack();
  std::mt19937 rng(13);
  SessionPtr a = budget.NewSession(), b = budget.NewSession();
  AddHistory(helper, {a.get(), b.get()}, rng);
  const SessionState state_a = Capture(a.get(), budget.model.get());
  const SessionState state_b = Capture(b.get(), budget.model.get());
  lumen_session* raw = nullptr;

  SECTION("the spill directory is gone") {
    fs::remove(spill);
    ExpectStatus(lumen_session_create(budget.engine.get(), &raw), LUMEN_ERROR_IO,
                 {"spill", "stays resident"});
    CHECK(raw == nullptr);
    CHECK(budget.Stats().evictions == 0);
    fs::create_directory(spill);
    REQUIRE_OK(lumen_session_create(budget.engine.get(), &raw));
    lumen_session_destroy(raw);
  }
  SECTION("a read-only spill directory") {
    if (::geteuid() == 0) {
      WARN("running as root, which writes into read-only directories: case not checked");
    } else {
      REQUIRE(::chmod(spill.c_str(), 0500) == 0);
      const lumen_status status = lumen_session_create(budget.engine.get(), &raw);
      const std::string message = lumen_last_error_message();
      REQUIRE(::chmod(spill.c_str(), 0700) == 0);
      INFO(lumen_status_string(status) << ": " << message);
      CHECK(status == LUMEN_ERROR_IO);
      CHECK(message.find("spill") != std::string::npos);
      CHECK(budget.Stats().evictions == 0);
    }
  }
  SECTION("the disk is full") {
    struct sigaction ignore{}, previous{};
    ignore.sa_handler = SIG_IGN;
    REQUIRE(::sigaction(SIGXFSZ, &ignore, &previous) == 0);
    struct rlimit old_limit{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
    struct rlimit small = old_limit;
    small.rlim_cur = 4096;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    const lumen_status status = lumen_session_create(budget.engine.get(), &raw);
    const std::string message = lumen_last_error_message();
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &old_limit) == 0);
    REQUIRE(::sigaction(SIGXFSZ, &previous, nullptr) == 0);
    INFO(lumen_status_string(status) << ": " << message);
    CHECK(status == LUMEN_ERROR_IO);
    CHECK(message.find("cannot write the spill file") != std::string::npos);
    CHECK(budget.Stats().spilled_sessions == 0);
  }
  SECTION("a spill file damaged while evicted") {
    REQUIRE_OK(lumen_session_create(budget.engine.get(), &raw));  // evicts a
    SessionPtr c(raw);
    REQUIRE_FALSE(Resident(a.get()));
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(spill)) files.push_back(entry.path());
    REQUIRE(files.size() == 1);
    const Bytes good = ReadFile(files[0]);
    Bytes bad = good;
    bad[bad.size() / 2] ^= 1;
    WriteFile(files[0], bad);
    std::vector<float> out(1);
    int64_t count = 0;
    REQUIRE(lumen_model_state_count(budget.model.get(), 0, LUMEN_STATE_MATRIX, &count) ==
            LUMEN_OK);
    out.resize(count);
    ExpectStatus(lumen_session_read_state(a.get(), 0, LUMEN_STATE_MATRIX, out.data(), count),
                 LUMEN_ERROR_CORRUPT_SNAPSHOT, {"evicted"});
    CHECK_FALSE(Resident(a.get()));
    WriteFile(files[0], good);  // the file is still there: nothing else was lost
  }
  // Whatever failed, every session holds what it held.
  CHECK(SameBits(state_a, Capture(a.get(), budget.model.get())));
  CHECK(SameBits(state_b, Capture(b.get(), budget.model.get())));
  ExpectWithinBudget(budget);
}

TEST_CASE("budget options: too small, older callers, stats arguments", "[budget]") {
  const ModelPtr model = BuildModel(MixedLayers(kSmall));
  lumen_engine_options options;
  lumen_engine_options_init(&options);
  CHECK(options.memory_budget_bytes == 0);
  CHECK(options.spill_directory == nullptr);
  options.backend = LUMEN_BACKEND_CPU;
  options.memory_budget_bytes = StateBytes(model.get()) - 1;
  lumen_engine* raw = nullptr;
  ExpectStatus(lumen_engine_create(model.get(), &options, &raw), LUMEN_ERROR_INVALID_ARGUMENT,
               {"memory_budget_bytes"});
  options.memory_budget_bytes = -1;
  ExpectStatus(lumen_engine_create(model.get(), &options, &raw), LUMEN_ERROR_INVALID_ARGUMENT,
               {"memory_budget_bytes"});
  options.memory_budget_bytes = StateBytes(model.get());
  options.spill_directory = "/nonexistent/lumen/spill";
  ExpectStatus(lumen_engine_create(model.get(), &options, &raw), LUMEN_ERROR_IO,
               {"spill directory"});
  // 0.2's struct, without the budget's fields: no budget.
  lumen_engine_options_init(&options);
  options.backend = LUMEN_BACKEND_CPU;
  options.struct_size = offsetof(lumen_engine_options, memory_budget_bytes);
  REQUIRE_OK(lumen_engine_create(model.get(), &options, &raw));
  EnginePtr engine(raw);
  lumen_memory_stats stats;
  lumen_memory_stats_init(&stats);
  REQUIRE_OK(lumen_engine_stats(engine.get(), &stats));
  CHECK(stats.memory_budget_bytes == 0);
  stats.struct_size = 8;
  ExpectStatus(lumen_engine_stats(engine.get(), &stats), LUMEN_ERROR_INVALID_ARGUMENT,
               {"struct_size"});
  ExpectStatus(lumen_engine_stats(nullptr, &stats), LUMEN_ERROR_INVALID_ARGUMENT);
  ExpectStatus(lumen_session_prefetch(nullptr), LUMEN_ERROR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace lumen_store_test
