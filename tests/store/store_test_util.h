#pragma once
// What the store tests (lumen_store_tests) share: a model with every family and every state
// part, sessions with history, and a private Redis server (RedisServer) started on a free
// loopback port in a temporary directory and stopped with the test, never a shared one.

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "lumen/lumen.h"
#include "tests/snapshot/snapshot_test_util.h"

#ifdef LUMEN_TEST_REDIS_SERVER
#include <hiredis/hiredis.h>
#endif

extern char** environ;

namespace lumen_store_test {

using namespace lumen_snapshot_test;  // NOLINT: the snapshot tests' models, sessions, files

struct StoreDeleter {
  void operator()(lumen_store* s) const { lumen_store_destroy(s); }
};
using StorePtr = std::unique_ptr<lumen_store, StoreDeleter>;

inline StorePtr OpenStore(const std::string& uri, int64_t part_bytes = 0,
                          int32_t timeout_ms = 0) {
  lumen_store_options options;
  lumen_store_options_init(&options);
  if (part_bytes != 0) options.part_bytes = part_bytes;
  if (timeout_ms != 0) options.timeout_ms = timeout_ms;
  lumen_store* raw = nullptr;
  REQUIRE_OK(lumen_store_open(uri.c_str(), &options, &raw));
  return StorePtr(raw);
}

// Every family, every state part: gated_delta_net with a convolution, linear_attn with a
// normalizer, gla, retention (MixedLayers), Mamba-2 (ssd, biased convolution), kda and
// delta_net.
inline std::vector<LayerDesc> EveryFamily() {
  std::vector<LayerDesc> layers = MixedLayers(kDims);
  layers.push_back(Mamba2(kDims));
  for (int32_t family : {LUMEN_FAMILY_KDA, LUMEN_FAMILY_DELTA_NET}) {
    LayerDesc l = Layer(family, kDims);
    l.options.qk_l2norm = 1;
    layers.push_back(l);
  }
  return layers;
}

inline lumen_status Save(lumen_store* store, const std::string& key, const lumen_session* s,
                         int64_t expected_version = -1, int64_t* version = nullptr,
                         int64_t expiry_ms = 0) {
  lumen_store_save_options options;
  lumen_store_save_options_init(&options);
  options.expected_version = expected_version;
  options.expiry_ms = expiry_ms;
  return lumen_store_save(store, key.c_str(), s, &options, version);
}

// Expects `status` with a message holding each of `words`.
inline void ExpectStatus(lumen_status status, lumen_status expected,
                         std::initializer_list<const char*> words = {}) {
  const std::string message = lumen_last_error_message();
  INFO(lumen_status_string(status) << ": " << message);
  CHECK(status == expected);
  CHECK(!message.empty());
  for (const char* word : words) CHECK(message.find(word) != std::string::npos);
}

// A free TCP port on 127.0.0.1, as the kernel hands one out.
inline int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  socklen_t length = sizeof(address);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

#ifdef LUMEN_TEST_REDIS_SERVER

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

// A redis-server of the test's own, on a free loopback port, its data in a temporary
// directory (append-only file flushed on every write, so a killed server restarts with every
// acknowledged write). Stopped, and its directory removed, with the object.
class RedisServer {
 public:
  RedisServer() : port_(FreeLoopbackPort()) { Start(); }
  ~RedisServer() {
    if (admin_ != nullptr) redisFree(admin_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  std::string uri() const { return "redis://127.0.0.1:" + std::to_string(port_) + "/0"; }
  int port() const { return port_; }

  void Start() {
    const std::string port = std::to_string(port_);
    const std::string dir = dir_.path().string();
    std::vector<std::string> args = {LUMEN_TEST_REDIS_SERVER, "--port", port, "--bind",
                                     "127.0.0.1", "--dir", dir, "--save", "",
                                     "--appendonly", "yes", "--appendfsync", "always",
                                     "--logfile", dir + "/redis.log", "--daemonize", "no"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    REQUIRE(::posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ) == 0);
    // Ready once it answers PING (at most 10 s).
    for (int attempt = 0; attempt < 1000; ++attempt) {
      redisContext* c = redisConnect("127.0.0.1", port_);
      if (c != nullptr && c->err == 0) {
        auto* reply = static_cast<redisReply*>(redisCommand(c, "PING"));
        const bool ready = reply != nullptr && reply->type == REDIS_REPLY_STATUS;
        if (reply != nullptr) freeReplyObject(reply);
        if (ready) {
          admin_ = c;
          return;
        }
      }
      if (c != nullptr) redisFree(c);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL("redis-server did not start on port " << port_);
  }

  // SIGKILL: no shutdown, no final write.
  void Kill() {
    if (admin_ != nullptr) redisFree(std::exchange(admin_, nullptr));
    REQUIRE(::kill(pid_, SIGKILL) == 0);
    REQUIRE(::waitpid(pid_, nullptr, 0) == pid_);
    pid_ = -1;
  }

  // A command on the test's own connection (binary-safe arguments).
  ReplyPtr Command(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lengths;
    for (const std::string& a : args) {
      argv.push_back(a.data());
      lengths.push_back(a.size());
    }
    auto* reply = static_cast<redisReply*>(redisCommandArgv(
        admin_, static_cast<int>(args.size()), argv.data(), lengths.data()));
    REQUIRE(reply != nullptr);
    return ReplyPtr(reply);
  }

  std::vector<std::string> Keys(const std::string& pattern) {
    ReplyPtr reply = Command({"KEYS", pattern});
    std::vector<std::string> keys;
    for (size_t i = 0; i < reply->elements; ++i) {
      keys.emplace_back(reply->element[i]->str, reply->element[i]->len);
    }
    std::sort(keys.begin(), keys.end());
    return keys;
  }

 private:
  TempDir dir_;
  int port_;
  pid_t pid_ = -1;
  redisContext* admin_ = nullptr;
};

#endif  // LUMEN_TEST_REDIS_SERVER

}  // namespace lumen_store_test
