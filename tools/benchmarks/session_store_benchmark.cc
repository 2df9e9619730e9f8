// Sessions beyond memory and beyond one machine, measured against anchors in the same run:
//
//   Redis (a private redis-server on a loopback port, started and stopped here, no
//   persistence): N sessions of the Qwen3-Next preset (4 layers, 8.4 MiB of fp32 state each)
//     hiredis SET / GET   a plain hiredis client's SET and GET of N values of the snapshot's
//                         size, one command each (the anchor)
//     lumen save / load   lumen_store_save and lumen_store_load of the N sessions under N keys
//   Each key's anchor calls and lumen's run back to back, so that both see the same machine
//   load; the anchor's value is deleted after, so the server ends with lumen's N sessions
//   (about 8.8 GB for N = 1000).
//   Memory budget: one engine serving N sessions round-robin, one token per layer per
//   session per visit
//     all resident        an engine without a budget (the anchor)
//     budget B            an engine whose budget holds B sessions: every visit evicts the
//                         least recently used session to the spill directory and brings the
//                         next one back
//     budget B, prefetch  the same, prefetching the next session while this one steps
//
//   lumen_store_benchmark [--sessions N] [--redis-sessions N] [--budget B] [--rounds R]
//                         [--redis-server PATH] [--spill DIR] [--threads T]
//
// Defaults: N = 1000, B = 64, R = 2; --redis-sessions sets N for the Redis rows alone
// (Redis holds N sessions; the all-resident engine N sessions too, afterwards). Not a test:
// it asserts nothing beyond every call succeeding and every loaded session equalling what
// was saved.

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "lumen/lumen.h"

extern char** environ;

namespace {

void Check(lumen_status status, const char* what) {
  if (status != LUMEN_OK) {
    std::fprintf(stderr, "%s: %s: %s\n", what, lumen_status_string(status),
                 lumen_last_error_message());
    std::exit(1);
  }
}

[[noreturn]] void Fail(const std::string& message) {
  std::fprintf(stderr, "lumen_store_benchmark: %s\n", message.c_str());
  std::exit(1);
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    Fail("cannot find a free loopback port");
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

// A redis-server of our own, without persistence, for the length of the Redis rows.
struct RedisServer {
  pid_t pid = -1;
  int port = 0;
  std::string dir;

  explicit RedisServer(const std::string& binary) {
    port = FreeLoopbackPort();
    std::string pattern = std::filesystem::temp_directory_path().string() + "/lumen-bench-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) Fail("cannot make a temporary directory");
    dir = pattern;
    std::vector<std::string> args = {binary, "--port", std::to_string(port), "--bind",
                                     "127.0.0.1", "--dir", dir, "--save", "", "--appendonly",
                                     "no", "--logfile", dir + "/redis.log"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (::posix_spawn(&pid, binary.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
      Fail("cannot start " + binary);
    }
    for (int i = 0; i < 500; ++i) {
      redisContext* c = redisConnect("127.0.0.1", port);
      const bool up = c != nullptr && c->err == 0;
      if (c != nullptr) redisFree(c);
      if (up) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    Fail("redis-server did not start");
  }
  ~RedisServer() {
    ::kill(pid, SIGTERM);
    ::waitpid(pid, nullptr, 0);
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  std::string uri() const { return "redis://127.0.0.1:" + std::to_string(port) + "/0"; }
};

// The Qwen3-Next preset's layers with random gate and convolution parameters.
lumen_model* BuildModel() {
  std::mt19937 rng(29);
  std::normal_distribution<float> normal(0.0f, 0.2f);
  lumen_model_builder* builder = nullptr;
  Check(lumen_model_builder_create(&builder), "builder");
  lumen_layer_options o;
  lumen_layer_options_init_qwen3_next_gated_delta_net(&o);
  const int64_t hv = o.num_value_heads, qk = int64_t{o.num_heads} * o.key_dim,
                vv = hv * o.value_dim;
  for (int32_t l = 0; l < 4; ++l) {
    Check(lumen_model_builder_add_layer(builder, &o, nullptr), "add layer");
    auto set = [&](int32_t param, int64_t count) {
      std::vector<float> values(static_cast<size_t>(count));
      for (float& x : values) x = normal(rng);
      Check(lumen_model_builder_set_param(builder, l, param, values.data(), count), "param");
    };
    set(LUMEN_PARAM_A_LOG, hv);
    set(LUMEN_PARAM_DT_BIAS, hv);
    set(LUMEN_PARAM_CONV_Q_WEIGHT, qk * o.conv_size);
    set(LUMEN_PARAM_CONV_K_WEIGHT, qk * o.conv_size);
    set(LUMEN_PARAM_CONV_V_WEIGHT, vv * o.conv_size);
  }
  lumen_model* model = nullptr;
  Check(lumen_model_builder_build(builder, &model), "build");
  lumen_model_builder_destroy(builder);
  return model;
}

// One token's inputs for one layer (fp32).
struct Token {
  std::vector<float> q, k, v, g, beta, o;
  lumen_layer_inputs in;
  lumen_layer_output out;
  explicit Token(const lumen_model* model) {
    lumen_layer_options layer;
    lumen_layer_options_init(&layer);
    Check(lumen_model_layer_options(model, 0, &layer), "layer options");
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    q.resize(static_cast<size_t>(layer.num_heads) * layer.key_dim);
    k.resize(q.size());
    v.resize(static_cast<size_t>(layer.num_value_heads) * layer.value_dim);
    g.resize(static_cast<size_t>(layer.num_value_heads));
    beta.resize(g.size());
    o.resize(v.size());
    for (auto* t : {&q, &k, &v, &g, &beta}) {
      for (float& x : *t) x = normal(rng);
    }
    lumen_layer_inputs_init(&in);
    in.q = q.data(); in.q_count = static_cast<int64_t>(q.size());
    in.k = k.data(); in.k_count = static_cast<int64_t>(k.size());
    in.v = v.data(); in.v_count = static_cast<int64_t>(v.size());
    in.g = g.data(); in.g_count = static_cast<int64_t>(g.size());
    in.beta = beta.data(); in.beta_count = static_cast<int64_t>(beta.size());
    lumen_layer_output_init(&out);
    out.o = o.data(); out.o_count = static_cast<int64_t>(o.size());
  }
  void StepAllLayers(lumen_session* s) {
    for (int32_t l = 0; l < 4; ++l) Check(lumen_session_step(s, l, &in, &out), "step");
  }
};

lumen_engine* CreateEngine(const lumen_model* model, int64_t budget, const char* spill,
                           int32_t threads) {
  lumen_engine_options options;
  lumen_engine_options_init(&options);
  options.backend = LUMEN_BACKEND_CPU;
  options.num_threads = threads;
  options.memory_budget_bytes = budget;
  options.spill_directory = spill;
  lumen_engine* engine = nullptr;
  Check(lumen_engine_create(model, &options, &engine), "engine");
  return engine;
}

void PrintRow(const char* name, double seconds, int64_t count, double bytes_each,
              double anchor_rate) {
  const double rate = count / seconds;
  std::printf("  %-28s %8.1f /s  %8.2f GB/s", name, rate, rate * bytes_each / 1e9);
  if (anchor_rate > 0) std::printf("  %6.1f%% of the anchor", 100.0 * rate / anchor_rate);
  std::printf("\n");
}

void RedisRows(const lumen_model* model, int sessions, const std::string& redis_server,
               int32_t threads) {
  RedisServer server(redis_server);
  lumen_engine* engine = CreateEngine(model, 0, nullptr, threads);
  lumen_session* source = nullptr;
  lumen_session* target = nullptr;
  Check(lumen_session_create(engine, &source), "session");
  Check(lumen_session_create(engine, &target), "session");
  Token token(model);
  for (int t = 0; t < 8; ++t) token.StepAllLayers(source);  // a state that is not zero
  int64_t size = 0;
  Check(lumen_session_snapshot_size(source, nullptr, &size), "size");
  std::vector<char> value(static_cast<size_t>(size), 'x');
  std::printf("Redis on loopback (%s): %d sessions of %.2f MiB (fp32 snapshot)\n",
              server.uri().c_str(), sessions, size / 1048576.0);

  // Each key's anchor and lumen's call run back to back, so that both see the same load
  // on a shared machine. The anchor is a plain hiredis client: one SET or GET of the whole
  // value per key (redisCommandArgv, which sizes the command once).
  redisContext* c = redisConnect("127.0.0.1", server.port);
  if (c == nullptr || c->err != 0) Fail("cannot connect to redis-server");
  lumen_store* store = nullptr;
  Check(lumen_store_open(server.uri().c_str(), nullptr, &store), "store open");
  auto plain = [&](const char* command, const std::string& key, bool with_value) {
    const char* argv[] = {command, key.data(), value.data()};
    const size_t lengths[] = {std::strlen(command), key.size(), value.size()};
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c, with_value ? 3 : 2, argv, lengths));
    if (r == nullptr || r->type == REDIS_REPLY_ERROR ||
        (!with_value && (r->type != REDIS_REPLY_STRING || r->len != value.size()))) {
      Fail(std::string(command) + " failed");
    }
    freeReplyObject(r);
  };
  double set_s = 0, save_s = 0, get_s = 0, load_s = 0;
  for (int i = 0; i < sessions; ++i) {
    const std::string anchor_key = "anchor:" + std::to_string(i);
    const std::string key = "conversation:" + std::to_string(i);
    auto start = std::chrono::steady_clock::now();
    plain("SET", anchor_key, true);
    set_s += Seconds(start);
    start = std::chrono::steady_clock::now();
    Check(lumen_store_save(store, key.c_str(), source, nullptr, nullptr), "store save");
    save_s += Seconds(start);
    start = std::chrono::steady_clock::now();
    plain("GET", anchor_key, false);
    get_s += Seconds(start);
    start = std::chrono::steady_clock::now();
    Check(lumen_store_load(store, key.c_str(), target, nullptr), "store load");
    load_s += Seconds(start);
    // The anchor's value goes (untimed): the server keeps lumen's N sessions only.
    if (auto* r = static_cast<redisReply*>(redisCommand(c, "DEL %s", anchor_key.c_str()))) {
      freeReplyObject(r);
    }
  }
  redisFree(c);
  std::vector<char> a(value.size()), b(value.size());
  Check(lumen_session_snapshot(source, nullptr, a.data(), size, nullptr), "snapshot");
  Check(lumen_session_snapshot(target, nullptr, b.data(), size, nullptr), "snapshot");
  if (a != b) Fail("a loaded session differs from the saved one");

  const double set_rate = sessions / set_s, get_rate = sessions / get_s;
  PrintRow("hiredis SET (anchor)", set_s, sessions, size, 0);
  PrintRow("lumen_store_save", save_s, sessions, size, set_rate);
  PrintRow("hiredis GET (anchor)", get_s, sessions, size, 0);
  PrintRow("lumen_store_load", load_s, sessions, size, get_rate);
  lumen_store_destroy(store);
  lumen_session_destroy(source);
  lumen_session_destroy(target);
  lumen_engine_destroy(engine);
}

// Steps every session once per round, round-robin; returns session-steps per second.
double ServeRoundRobin(lumen_engine* engine, int sessions, int rounds, bool prefetch,
                       const lumen_model* model, lumen_memory_stats* stats) {
  std::vector<lumen_session*> all(static_cast<size_t>(sessions));
  for (auto& s : all) Check(lumen_session_create(engine, &s), "session");
  Token token(model);
  for (auto* s : all) token.StepAllLayers(s);  // the first visit: warm, not timed
  lumen_memory_stats before;
  lumen_memory_stats_init(&before);
  Check(lumen_engine_stats(engine, &before), "stats");
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < sessions; ++i) {
      if (prefetch) Check(lumen_session_prefetch(all[(i + 1) % sessions]), "prefetch");
      token.StepAllLayers(all[i]);
    }
  }
  const double seconds = Seconds(start);
  lumen_memory_stats_init(stats);
  Check(lumen_engine_stats(engine, stats), "stats");
  stats->evictions -= before.evictions;
  stats->reloads -= before.reloads;
  stats->prefetches -= before.prefetches;
  stats->bytes_evicted -= before.bytes_evicted;
  stats->bytes_reloaded -= before.bytes_reloaded;
  for (auto* s : all) lumen_session_destroy(s);
  return static_cast<double>(sessions) * rounds / seconds;
}

void BudgetRows(const lumen_model* model, int sessions, int budget_sessions, int rounds,
                const char* spill, int32_t threads) {
  int64_t state_bytes = 0;
  Check(lumen_model_state_bytes(model, -1, &state_bytes), "state bytes");
  std::printf("\nMemory budget: %d sessions served round-robin, %d rounds, one token per "
              "layer per visit (%d threads)\n",
              sessions, rounds, threads);
  lumen_memory_stats stats;
  double anchor = 0;
  struct Case {
    const char* name;
    int64_t budget;
    bool prefetch;
  };
  const std::string budget_name = "budget " + std::to_string(budget_sessions);
  const std::string prefetch_name = budget_name + ", prefetch";
  const Case cases[] = {{"all resident (anchor)", 0, false},
                        {budget_name.c_str(), budget_sessions * state_bytes, false},
                        {prefetch_name.c_str(), budget_sessions * state_bytes, true}};
  for (const Case& c : cases) {
    lumen_engine* engine = CreateEngine(model, c.budget, spill, threads);
    const double rate = ServeRoundRobin(engine, sessions, rounds, c.prefetch, model, &stats);
    lumen_engine_destroy(engine);
    const double steps = static_cast<double>(sessions) * rounds;
    std::printf("  %-28s %8.1f session-steps/s", c.name, rate);
    if (anchor > 0) std::printf("  %6.1f%% of the anchor", 100.0 * rate / anchor);
    std::printf("  moved %.2f MiB/step (%lld evictions, %lld reloads, %lld prefetched)\n",
                (stats.bytes_evicted + stats.bytes_reloaded) / steps / 1048576.0,
                static_cast<long long>(stats.evictions), static_cast<long long>(stats.reloads),
                static_cast<long long>(stats.prefetches));
    if (c.budget == 0) anchor = rate;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int sessions = 1000, budget = 64, rounds = 2, redis_sessions = -1;
  int32_t threads = 1;
  std::string redis_server = "redis-server";
  const char* spill = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--sessions" && i + 1 < argc) {
      sessions = std::max(2, std::atoi(argv[++i]));
    } else if (arg == "--redis-sessions" && i + 1 < argc) {
      redis_sessions = std::max(0, std::atoi(argv[++i]));
    } else if (arg == "--budget" && i + 1 < argc) {
      budget = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--threads" && i + 1 < argc) {
      threads = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--redis-server" && i + 1 < argc) {
      redis_server = argv[++i];
    } else if (arg == "--spill" && i + 1 < argc) {
      spill = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--sessions N] [--redis-sessions N] [--budget B] [--rounds R] "
                   "[--threads T] [--redis-server PATH] [--spill DIR]\n",
                   argv[0]);
      return 2;
    }
  }
  if (redis_server.find('/') == std::string::npos) {
    for (const char* dir : {"/usr/bin", "/usr/local/bin", "/usr/sbin"}) {
      const std::string candidate = std::string(dir) + "/" + redis_server;
      if (::access(candidate.c_str(), X_OK) == 0) {
        redis_server = candidate;
        break;
      }
    }
  }
  lumen_model* model = BuildModel();
  if (redis_sessions != 0) {
    RedisRows(model, redis_sessions < 0 ? sessions : redis_sessions, redis_server, threads);
  }
  if (budget < sessions) BudgetRows(model, sessions, budget, rounds, spill, threads);
  lumen_model_destroy(model);
  return 0;
}
