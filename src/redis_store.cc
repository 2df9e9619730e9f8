#include "src/redis_store.h"

// A value under key K lives in Redis as
//   lumen:{K}:head        "lumen-head 1 <version> <generation> <parts> <bytes>"
//   lumen:{K}:<gen>:<i>   part i of that generation's snapshot (all of one size but the last)
// ({K} is a hash tag: every key of one value lands in one cluster slot). A save writes its
// parts under a fresh random generation, each expiring in kPendingMs, then one Lua script
// (atomic on the server) checks the version, points the head at the new generation, gives
// the parts the value's expiry (or none) and unlinks the old generation's parts. A reader
// reads the head, then that generation's parts, which never change: it sees the old value
// or the new one, and if the parts it wants were unlinked meanwhile by a newer save, it reads
// the head again. A save that dies before its script leaves parts that expire by themselves.

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <cstring>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/snapshot.h"
#include "src/status.h"

#ifdef LUMEN_WITH_HIREDIS
#include <hiredis/hiredis.h>
#endif

namespace lumen {
namespace {

struct RedisAddress {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  std::string password;
};

// Parses redis://[:password@]host[:port][/db].
absl::StatusOr<RedisAddress> ParseRedisUri(const std::string& uri) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("store URI '", uri, "': ", why,
                     " (expected redis://[:password@]host[:port][/db])"));
  };
  RedisAddress address;
  std::string rest = uri.substr(std::strlen("redis://"));
  const size_t at = rest.rfind('@');
  if (at != std::string::npos) {
    std::string userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = userinfo.find(':');
    address.password = colon == std::string::npos ? userinfo : userinfo.substr(colon + 1);
  }
  std::string authority = rest;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    authority = rest.substr(0, slash);
    const std::string db = rest.substr(slash + 1);
    if (!db.empty() && (!absl::SimpleAtoi(db, &address.db) || address.db < 0)) {
      return bad(absl::StrCat("database '", db, "' is not a number >= 0"));
    }
  }
  std::string port;
  if (absl::StartsWith(authority, "[")) {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string::npos) return bad("an IPv6 address lacks its ']'");
    address.host = authority.substr(1, close - 1);
    const std::string after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("junk after the IPv6 address");
      port = after.substr(1);
    }
  } else {
    const size_t colon = authority.rfind(':');
    address.host = authority.substr(0, colon);
    if (colon != std::string::npos) port = authority.substr(colon + 1);
  }
  if (address.host.empty()) return bad("no host");
  if (!port.empty() &&
      (!absl::SimpleAtoi(port, &address.port) || address.port < 1 || address.port > 65535)) {
    return bad(absl::StrCat("port '", port, "' is not in 1..65535"));
  }
  return address;
}

#ifdef LUMEN_WITH_HIREDIS

// Parts of an unfinished save expire after this long (the commit script makes them last).
constexpr int64_t kPendingMs = 5 * 60 * 1000;
// Reads of the head, then its parts, before a read falls back to the atomic script.
constexpr int kPipelinedReads = 2;

// KEYS[1] head; ARGV: expected version (-1 any), generation, parts, bytes, expiry ms (0
// never), the prefix of part keys. Returns {version} or {-1, stored version} on a conflict,
// {-2} when the stored head is unreadable and a version was expected (both unlink the new
// parts), {-3, i} when part i of the new generation is gone.
constexpr char kCommitScript[] = R"lua(
local gen, parts, expiry, prefix = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[5]), ARGV[6]
local function drop_new_parts()
  for i = 0, parts - 1 do redis.call('UNLINK', prefix .. gen .. ':' .. i) end
end
local head = redis.call('GET', KEYS[1])
local version, old_gen, old_parts = 0, nil, 0
if head then
  local v, g, n = string.match(head, '^lumen%-head 1 (%d+) (%x+) (%d+) %d+$')
  if v then
    version, old_gen, old_parts = tonumber(v), g, tonumber(n)
  elseif tonumber(ARGV[1]) >= 0 then
    drop_new_parts()
    return {-2}
  end
end
local expected = tonumber(ARGV[1])
if expected >= 0 and expected ~= version then
  drop_new_parts()
  return {-1, version}
end
for i = 0, parts - 1 do
  local part = prefix .. gen .. ':' .. i
  local kept
  if expiry > 0 then
    kept = redis.call('PEXPIRE', part, expiry + 1000)
  else
    kept = redis.call('PERSIST', part) + redis.call('EXISTS', part)
  end
  if kept == 0 then return {-3, i} end
end
local new_head = 'lumen-head 1 ' .. (version + 1) .. ' ' .. gen .. ' ' .. parts .. ' ' .. ARGV[4]
if expiry > 0 then
  redis.call('SET', KEYS[1], new_head, 'PX', expiry)
else
  redis.call('SET', KEYS[1], new_head)
end
if old_gen and old_gen ~= gen then
  for i = 0, old_parts - 1 do redis.call('UNLINK', prefix .. old_gen .. ':' .. i) end
end
return {version + 1}
)lua";

// KEYS[1] head; ARGV[1] the prefix of part keys. Returns 1 if a value was removed, else 0.
constexpr char kRemoveScript[] = R"lua(
local head = redis.call('GET', KEYS[1])
if not head then return 0 end
local g, n = string.match(head, '^lumen%-head 1 %d+ (%x+) (%d+) %d+$')
if g then
  for i = 0, tonumber(n) - 1 do redis.call('UNLINK', ARGV[1] .. g .. ':' .. i) end
end
redis.call('DEL', KEYS[1])
return 1
)lua";

// KEYS[1] head; ARGV[1] the prefix of part keys. Returns {} for no value, else the head and
// its generation's parts (nil for a missing part), read atomically.
constexpr char kReadScript[] = R"lua(
local head = redis.call('GET', KEYS[1])
if not head then return {} end
local out = {head}
local g, n = string.match(head, '^lumen%-head 1 %d+ (%x+) (%d+) %d+$')
if g then
  for i = 0, tonumber(n) - 1 do out[#out + 1] = redis.call('GET', ARGV[1] .. g .. ':' .. i) end
end
return out
)lua";

struct Head {
  int64_t version = 0;
  std::string generation;
  int64_t parts = 0;
  int64_t bytes = 0;
};

absl::StatusOr<Head> ParseHead(absl::string_view text) {
  const std::vector<absl::string_view> fields = absl::StrSplit(text, ' ');
  Head head;
  if (fields.size() != 6 || fields[0] != "lumen-head" || fields[1] != "1" ||
      !absl::SimpleAtoi(fields[2], &head.version) || head.version < 1 ||
      fields[3].empty() || !absl::SimpleAtoi(fields[4], &head.parts) || head.parts < 1 ||
      !absl::SimpleAtoi(fields[5], &head.bytes) || head.bytes < 1) {
    return LumenError(LUMEN_ERROR_CORRUPT_SNAPSHOT,
                      absl::StrCat("the value's head is damaged ('", text.substr(0, 80), "')"));
  }
  head.generation = std::string(fields[3]);
  return head;
}

// Keeps a write to a connection the server has closed from raising SIGPIPE, whose default
// action ends the process (Linux has no per-socket way to turn it off, and hiredis writes
// with write()): SIGPIPE is blocked for the calling thread while the guard lives, and one the
// thread raised meanwhile is consumed. The write itself fails with EPIPE, reported as the
// server being unavailable.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &previous_) == 0;
  }
  ~SigpipeGuard() {
    if (!blocked_) return;
    sigset_t pending;
    if (!was_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      const struct timespec zero = {0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_, previous_;
  bool was_pending_ = false;
  bool blocked_ = false;
};

struct ReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

struct ContextDeleter {
  void operator()(redisContext* context) const { redisFree(context); }
};

class RedisStore final : public SessionStore {
 public:
  RedisStore(std::string uri, RedisAddress address, const lumen_store_options& options)
      : uri_(std::move(uri)),
        address_(std::move(address)),
        timeout_ms_(options.timeout_ms),
        part_bytes_(options.part_bytes),
        random_(std::random_device{}()) {}

  const std::string& uri() const override { return uri_; }

  absl::Status Connect() {
    std::lock_guard<std::mutex> lock(mutex_);
    SigpipeGuard no_sigpipe;
    return EnsureConnected();
  }

  absl::StatusOr<int64_t> Save(const std::string& key, const Session& session,
                               const StoreSave& save) override {
    const int64_t size = SnapshotSize(session.model(), save.dtype);
    std::vector<char> bytes(static_cast<size_t>(size));
    if (absl::Status s = WriteSnapshot(session, save.dtype, bytes.data(), size); !s.ok()) {
      return AboutKey(*this, key, s);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    SigpipeGuard no_sigpipe;
    absl::StatusOr<int64_t> version = SaveBytes(key, bytes, save);
    if (!version.ok()) return AboutKey(*this, key, version.status());
    return version;
  }

  absl::StatusOr<int64_t> Load(const std::string& key, Session& session) override {
    std::vector<char> bytes;
    int64_t version = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      SigpipeGuard no_sigpipe;
      absl::StatusOr<int64_t> read = ReadBytes(key, bytes);
      if (!read.ok()) return AboutKey(*this, key, read.status());
      version = *read;
    }
    absl::Status status =
        RestoreSnapshot(session, bytes.data(), static_cast<int64_t>(bytes.size()));
    if (!status.ok()) return AboutKey(*this, key, status);
    return version;
  }

  absl::Status Remove(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    SigpipeGuard no_sigpipe;
    const std::string head = HeadKey(key), prefix = PartPrefix(key);
    absl::StatusOr<Reply> reply = Command({"EVAL", kRemoveScript, "1", head, prefix});
    if (!reply.ok()) return AboutKey(*this, key, reply.status());
    if ((*reply)->type != REDIS_REPLY_INTEGER) return AboutKey(*this, key, Unexpected(**reply));
    if ((*reply)->integer == 0) {
      return AboutKey(*this, key, LumenError(LUMEN_ERROR_NOT_FOUND,
                                             "the store holds nothing under this key"));
    }
    return absl::OkStatus();
  }

 private:
  static std::string HeadKey(const std::string& key) { return "lumen:{" + key + "}:head"; }
  static std::string PartPrefix(const std::string& key) { return "lumen:{" + key + "}:"; }

  struct timeval Timeout() const {
    struct timeval tv;
    tv.tv_sec = timeout_ms_ / 1000;
    tv.tv_usec = (timeout_ms_ % 1000) * 1000;
    return tv;
  }

  // The status of a failed connection: a timeout, a server gone, or anything else.
  absl::Status ConnectionError(absl::string_view doing) {
    const int type = context_->err;
    const std::string reason = context_->errstr;
    context_.reset();  // a failed context is done; the next call connects again
    const bool timed_out = type == REDIS_ERR_IO &&
                           (reason == std::strerror(EAGAIN) || reason == std::strerror(ETIMEDOUT) ||
                            absl::StrContains(reason, "timed out"));
    const std::string where = absl::StrCat(address_.host, ":", address_.port);
    if (timed_out) {
      return LumenError(LUMEN_ERROR_TIMEOUT,
                        absl::StrCat("the Redis server at ", where, " did not answer within ",
                                     timeout_ms_, " ms while ", doing, " (", reason, ")"));
    }
    return LumenError(LUMEN_ERROR_UNAVAILABLE,
                      absl::StrCat("the Redis server at ", where, " cannot be reached while ",
                                   doing, ": ",
                                   type == REDIS_ERR_EOF ? "it closed the connection" : reason));
  }

  static absl::Status ServerError(const redisReply& reply) {
    return LumenError(LUMEN_ERROR_IO,
                      absl::StrCat("the Redis server refused a command: ",
                                   absl::string_view(reply.str, reply.len)));
  }
  static absl::Status Unexpected(const redisReply& reply) {
    if (reply.type == REDIS_REPLY_ERROR) return ServerError(reply);
    return LumenError(LUMEN_ERROR_INTERNAL,
                      absl::StrCat("unexpected Redis reply of type ", reply.type));
  }

  absl::Status EnsureConnected() {
    if (context_ != nullptr) return absl::OkStatus();
    context_.reset(redisConnectWithTimeout(address_.host.c_str(), address_.port, Timeout()));
    if (context_ == nullptr) {
      return LumenError(LUMEN_ERROR_OUT_OF_MEMORY, "cannot allocate a Redis connection");
    }
    if (context_->err != 0) return ConnectionError("connecting");
    if (redisSetTimeout(context_.get(), Timeout()) != REDIS_OK) {
      return ConnectionError("setting the timeout");
    }
    if (!address_.password.empty()) {
      absl::StatusOr<Reply> reply = CommandOnce({"AUTH", address_.password});
      if (!reply.ok()) return reply.status();
      if ((*reply)->type == REDIS_REPLY_ERROR) {
        context_.reset();
        return ServerError(**reply);
      }
    }
    if (address_.db != 0) {
      absl::StatusOr<Reply> reply = CommandOnce({"SELECT", absl::StrCat(address_.db)});
      if (!reply.ok()) return reply.status();
      if ((*reply)->type == REDIS_REPLY_ERROR) {
        context_.reset();
        return ServerError(**reply);
      }
    }
    return absl::OkStatus();
  }

  // Appends one command (binary-safe arguments) to the connection's output buffer.
  void Append(const std::vector<absl::string_view>& args) {
    std::vector<const char*> argv(args.size());
    std::vector<size_t> lengths(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      argv[i] = args[i].data();
      lengths[i] = args[i].size();
    }
    redisAppendCommandArgv(context_.get(), static_cast<int>(args.size()), argv.data(),
                           lengths.data());
  }

  absl::StatusOr<Reply> NextReply(absl::string_view doing) {
    void* raw = nullptr;
    if (redisGetReply(context_.get(), &raw) != REDIS_OK || raw == nullptr) {
      return ConnectionError(doing);
    }
    return Reply(static_cast<redisReply*>(raw));
  }

  // One command on the current connection.
  absl::StatusOr<Reply> CommandOnce(const std::vector<absl::string_view>& args) {
    Append(args);
    return NextReply(absl::StrCat("running ", args[0]));
  }

  absl::StatusOr<Reply> Command(const std::vector<absl::string_view>& args) {
    if (absl::Status s = EnsureConnected(); !s.ok()) return s;
    return CommandOnce(args);
  }

  std::string NewGeneration() {
    return absl::StrCat(absl::Hex(random_(), absl::kZeroPad16));
  }

  absl::StatusOr<int64_t> SaveBytes(const std::string& key, const std::vector<char>& bytes,
                                    const StoreSave& save) {
    if (absl::Status s = EnsureConnected(); !s.ok()) return s;
    const std::string prefix = PartPrefix(key), generation = NewGeneration();
    const int64_t size = static_cast<int64_t>(bytes.size());
    const int64_t parts = (size + part_bytes_ - 1) / part_bytes_;
    const std::string pending = absl::StrCat(kPendingMs);
    // Every part in one pipeline: the server answers them in order.
    for (int64_t i = 0; i < parts; ++i) {
      const int64_t offset = i * part_bytes_;
      const std::string part_key = absl::StrCat(prefix, generation, ":", i);
      Append({"SET", part_key,
              absl::string_view(bytes.data() + offset,
                                static_cast<size_t>(std::min(part_bytes_, size - offset))),
              "PX", pending});
    }
    absl::Status failed;
    for (int64_t i = 0; i < parts; ++i) {
      absl::StatusOr<Reply> reply = NextReply("writing the value's parts");
      if (!reply.ok()) return reply.status();
      if ((*reply)->type == REDIS_REPLY_ERROR && failed.ok()) failed = ServerError(**reply);
    }
    if (!failed.ok()) return failed;
    absl::StatusOr<Reply> reply =
        CommandOnce({"EVAL", kCommitScript, "1", HeadKey(key), absl::StrCat(save.expected_version),
                     generation, absl::StrCat(parts), absl::StrCat(size),
                     absl::StrCat(save.expiry_ms), prefix});
    if (!reply.ok()) return reply.status();
    const redisReply& r = **reply;
    if (r.type != REDIS_REPLY_ARRAY || r.elements < 1 ||
        r.element[0]->type != REDIS_REPLY_INTEGER) {
      return Unexpected(r);
    }
    const int64_t code = r.element[0]->integer;
    if (code == -1 && r.elements == 2) {
      return VersionConflict(*this, key, save.expected_version, r.element[1]->integer);
    }
    if (code == -2) {
      return LumenError(LUMEN_ERROR_CORRUPT_SNAPSHOT,
                        "the stored value's head is damaged, so its version cannot be "
                        "compared; save without expected_version to replace it");
    }
    if (code == -3) {
      return LumenError(LUMEN_ERROR_IO,
                        absl::StrCat("part ", r.elements == 2 ? r.element[1]->integer : -1,
                                     " of the new value vanished before the save committed "
                                     "(evicted by the server's memory policy?)"));
    }
    if (code < 1) return Unexpected(r);
    return code;
  }

  // Reads the value's bytes into `bytes` and returns its version. The head and then its
  // parts, in one pipeline; should a newer save replace the generation in between (its
  // parts are gone), once more, and then in one script, which the server runs atomically, so
  // that a reader never starves however often the key is saved.
  absl::StatusOr<int64_t> ReadBytes(const std::string& key, std::vector<char>& bytes) {
    const std::string head_key = HeadKey(key), prefix = PartPrefix(key);
    for (int attempt = 0; attempt < kPipelinedReads; ++attempt) {
      absl::StatusOr<Reply> reply = Command({"GET", head_key});
      if (!reply.ok()) return reply.status();
      absl::StatusOr<Head> head = HeadOf(**reply);
      if (!head.ok()) return head.status();
      for (int64_t i = 0; i < head->parts; ++i) {
        Append({"GET", absl::StrCat(prefix, head->generation, ":", i)});
      }
      std::vector<Reply> replies;
      std::vector<const redisReply*> parts;
      for (int64_t i = 0; i < head->parts; ++i) {
        absl::StatusOr<Reply> part = NextReply("reading the value's parts");
        if (!part.ok()) return part.status();
        parts.push_back(part->get());
        replies.push_back(*std::move(part));
      }
      absl::StatusOr<bool> whole = Assemble(*head, parts, bytes);
      if (!whole.ok()) return whole.status();
      if (*whole) return head->version;
    }
    absl::StatusOr<Reply> reply = Command({"EVAL", kReadScript, "1", head_key, prefix});
    if (!reply.ok()) return reply.status();
    const redisReply& r = **reply;
    if (r.type != REDIS_REPLY_ARRAY) return Unexpected(r);
    if (r.elements == 0) {
      return LumenError(LUMEN_ERROR_NOT_FOUND, "the store holds nothing under this key");
    }
    absl::StatusOr<Head> head = HeadOf(*r.element[0]);
    if (!head.ok()) return head.status();
    if (static_cast<int64_t>(r.elements) != 1 + head->parts) return Unexpected(r);
    const std::vector<const redisReply*> parts(r.element + 1, r.element + r.elements);
    absl::StatusOr<bool> whole = Assemble(*head, parts, bytes);
    if (!whole.ok()) return whole.status();
    if (!*whole) {
      return LumenError(LUMEN_ERROR_CORRUPT_SNAPSHOT,
                        absl::StrCat("a part of the value (version ", head->version,
                                     ") is missing"));
    }
    return head->version;
  }

  // The head in a GET's reply; NOT_FOUND for none.
  static absl::StatusOr<Head> HeadOf(const redisReply& reply) {
    if (reply.type == REDIS_REPLY_NIL) {
      return LumenError(LUMEN_ERROR_NOT_FOUND, "the store holds nothing under this key");
    }
    if (reply.type != REDIS_REPLY_STRING) return Unexpected(reply);
    return ParseHead(absl::string_view(reply.str, reply.len));
  }

  // Concatenates the parts' replies into `bytes`: false when a part is missing (a newer
  // save may have replaced the generation), an error when they are not what the head says.
  static absl::StatusOr<bool> Assemble(const Head& head,
                                       const std::vector<const redisReply*>& parts,
                                       std::vector<char>& bytes) {
    bytes.clear();
    bytes.reserve(static_cast<size_t>(head.bytes));
    for (const redisReply* part : parts) {
      if (part->type == REDIS_REPLY_NIL) return false;
      if (part->type != REDIS_REPLY_STRING) return Unexpected(*part);
      bytes.insert(bytes.end(), part->str, part->str + part->len);
    }
    if (static_cast<int64_t>(bytes.size()) != head.bytes) {
      return LumenError(LUMEN_ERROR_CORRUPT_SNAPSHOT,
                        absl::StrCat("the value's parts hold ", bytes.size(),
                                     " bytes, its head says ", head.bytes));
    }
    return true;
  }

  std::string uri_;
  RedisAddress address_;
  int32_t timeout_ms_;
  int64_t part_bytes_;
  std::mutex mutex_;  // one call at a time on the connection
  std::unique_ptr<redisContext, ContextDeleter> context_;  // guarded by mutex_
  std::mt19937_64 random_;                                 // guarded by mutex_
};

#endif  // LUMEN_WITH_HIREDIS

}  // namespace

absl::StatusOr<std::unique_ptr<SessionStore>> OpenRedisStore(const std::string& uri,
                                                             const lumen_store_options& options) {
  absl::StatusOr<RedisAddress> address = ParseRedisUri(uri);
  if (!address.ok()) return address.status();
#ifdef LUMEN_WITH_HIREDIS
  auto store = std::make_unique<RedisStore>(uri, *std::move(address), options);
  if (absl::Status s = store->Connect(); !s.ok()) {
    return LumenError(LumenStatusOf(s), absl::StrCat("store '", uri, "': ", s.message()));
  }
  return std::unique_ptr<SessionStore>(std::move(store));
#else
  (void)options;
  return LumenError(LUMEN_ERROR_UNSUPPORTED,
                    absl::StrCat("store URI '", uri,
                                 "': this lumen was built without Redis support (hiredis, "
                                 "Debian's libhiredis-dev, was not found at build time)"));
#endif
}

}  // namespace lumen
