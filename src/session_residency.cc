#include "src/session_residency.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/engine.h"
#include "src/session.h"
#include "src/snapshot.h"
#include "src/status.h"

namespace lumen {
namespace {

absl::Status SpillError(absl::string_view step, const std::string& path, int error) {
  return LumenError(LUMEN_ERROR_IO,
                    absl::StrCat("cannot ", step, " the spill file '", path,
                                 "': ", std::strerror(error)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SessionResidency>> SessionResidency::Create(
    Engine& engine, int64_t budget_bytes, const std::string& spill_directory) {
  const int64_t block = engine.model().state_bytes();
  if (budget_bytes < block) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory_budget_bytes is ", budget_bytes, ", below one session's state of ", block,
        " bytes (lumen_model_state_bytes)"));
  }
  if (!spill_directory.empty()) {
    struct stat info;
    if (::stat(spill_directory.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
      return LumenError(LUMEN_ERROR_IO, absl::StrCat("the spill directory '", spill_directory,
                                                     "' is not a directory"));
    }
    return std::unique_ptr<SessionResidency>(
        new SessionResidency(engine, budget_bytes, spill_directory, false));
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                                     "/lumen-spill-XXXXXX");
  if (::mkdtemp(pattern.data()) == nullptr) {
    return LumenError(LUMEN_ERROR_IO, absl::StrCat("cannot make a spill directory '", pattern,
                                                   "': ", std::strerror(errno)));
  }
  return std::unique_ptr<SessionResidency>(
      new SessionResidency(engine, budget_bytes, pattern, true));
}

SessionResidency::SessionResidency(Engine& engine, int64_t budget_bytes,
                                   std::string spill_directory, bool owns_directory)
    : engine_(engine),
      budget_bytes_(budget_bytes),
      block_bytes_(engine.model().state_bytes()),
      spill_bytes_(SnapshotSize(engine.model(), DType::kFloat32)),
      directory_(std::move(spill_directory)),
      owns_directory_(owns_directory) {}

SessionResidency::~SessionResidency() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  prefetch_wake_.notify_all();
  if (prefetcher_.joinable()) prefetcher_.join();
  if (owns_directory_) {
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
}

std::string SessionResidency::SpillPath(const Session& session) const {
  return absl::StrCat(directory_, "/lumen-", ::getpid(), "-", absl::Hex(&session), ".spill");
}

absl::StatusOr<void*> SessionResidency::AllocateForNewSession() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status room = MakeRoom(block_bytes_); !room.ok()) return room;
  absl::StatusOr<void*> block = engine_.AllocateState();
  if (block.ok()) resident_bytes_ += block_bytes_;
  return block;
}

void SessionResidency::Register(Session& session) {
  std::lock_guard<std::mutex> lock(mutex_);
  session.lru_position_ = lru_.insert(lru_.end(), &session);
}

void SessionResidency::Forget(Session& session) {
  std::lock_guard<std::mutex> lock(mutex_);
  prefetch_queue_.erase(std::remove(prefetch_queue_.begin(), prefetch_queue_.end(), &session),
                        prefetch_queue_.end());
  if (session.resident_) {
    lru_.erase(session.lru_position_);
    resident_bytes_ -= block_bytes_;
    engine_.FreeState(session.ExchangeBlock(nullptr));
  } else {
    ::unlink(SpillPath(session).c_str());
    --spilled_sessions_;
  }
}

absl::Status SessionResidency::MakeRoom(int64_t bytes) {
  auto candidate = lru_.begin();
  while (resident_bytes_ + bytes > budget_bytes_) {
    while (candidate != lru_.end() && (*candidate)->pins_ > 0) ++candidate;
    if (candidate == lru_.end()) {
      return LumenError(
          LUMEN_ERROR_OUT_OF_MEMORY,
          absl::StrCat("the engine's session memory budget of ", budget_bytes_,
                       " bytes cannot hold ", bytes, " more bytes: every resident session (",
                       lru_.size(), " of ", block_bytes_, " bytes each) is in use by a call"));
    }
    Session& victim = **candidate++;
    if (absl::Status status = Evict(victim); !status.ok()) {
      return LumenError(LumenStatusOf(status),
                        absl::StrCat("cannot evict a session to make room within the memory "
                                     "budget (it stays resident): ",
                                     status.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status SessionResidency::Evict(Session& session) {
  buffer_.resize(static_cast<size_t>(spill_bytes_));
  if (absl::Status status = WriteResidentSnapshot(session, DType::kFloat32, buffer_.data(),
                                                  spill_bytes_);
      !status.ok()) {
    return status;
  }
  // No fsync: a spill file lives no longer than this process, and a write that finds the
  // disk full fails here, in write().
  const std::string path = SpillPath(session);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return SpillError("create", path, errno);
  const char* data = buffer_.data();
  int64_t left = spill_bytes_;
  int error = 0;
  while (left > 0) {
    const ssize_t written = ::write(fd, data, static_cast<size_t>(left));
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) {
      error = errno;
      break;
    }
    data += written;
    left -= written;
  }
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    ::unlink(path.c_str());
    return SpillError("write", path, error);
  }
  lru_.erase(session.lru_position_);
  engine_.FreeState(session.ExchangeBlock(nullptr));
  session.resident_ = false;
  resident_bytes_ -= block_bytes_;
  ++spilled_sessions_;
  ++evictions_;
  bytes_evicted_ += spill_bytes_;
  return absl::OkStatus();
}

absl::Status SessionResidency::Reload(Session& session) {
  const std::string path = SpillPath(session);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return SpillError("open", path, errno);
  buffer_.resize(static_cast<size_t>(spill_bytes_));
  int64_t done = 0;
  int error = 0;
  while (done < spill_bytes_) {
    const ssize_t got = ::read(fd, buffer_.data() + done, static_cast<size_t>(spill_bytes_ - done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      error = errno;
      break;
    }
    if (got == 0) break;
    done += got;
  }
  ::close(fd);
  if (error != 0) return SpillError("read", path, error);
  // The restore checks the checksum and hands the session a state block of its own.
  if (absl::Status status = RestoreResidentSnapshot(session, buffer_.data(), done);
      !status.ok()) {
    return LumenError(LumenStatusOf(status),
                      absl::StrCat("cannot bring back an evicted session from '", path,
                                   "': ", status.message()));
  }
  ::unlink(path.c_str());
  session.resident_ = true;
  session.lru_position_ = lru_.insert(lru_.end(), &session);
  resident_bytes_ += block_bytes_;
  --spilled_sessions_;
  bytes_reloaded_ += spill_bytes_;
  return absl::OkStatus();
}

absl::Status SessionResidency::Pin(absl::Span<Session* const> sessions) {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t evicted = 0;
  for (Session* session : sessions) {
    ++session->pins_;
    if (session->resident_) {
      lru_.splice(lru_.end(), lru_, session->lru_position_);
    } else {
      ++evicted;
    }
  }
  absl::Status status = evicted > 0 ? MakeRoom(evicted * block_bytes_) : absl::OkStatus();
  for (Session* session : sessions) {
    if (!status.ok()) break;
    if (session->resident_) continue;
    status = Reload(*session);
    if (status.ok()) ++reloads_;
  }
  if (!status.ok()) {
    for (Session* session : sessions) --session->pins_;
  }
  return status;
}

void SessionResidency::Unpin(absl::Span<Session* const> sessions) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Session* session : sessions) --session->pins_;
}

bool SessionResidency::IsResident(const Session& session) {
  std::lock_guard<std::mutex> lock(mutex_);
  return session.resident_;
}

void SessionResidency::Prefetch(Session& session) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (session.resident_) return;
    if (std::find(prefetch_queue_.begin(), prefetch_queue_.end(), &session) !=
        prefetch_queue_.end()) {
      return;
    }
    prefetch_queue_.push_back(&session);
    if (!prefetcher_.joinable()) prefetcher_ = std::thread([this] { PrefetchLoop(); });
  }
  prefetch_wake_.notify_one();
}

void SessionResidency::PrefetchLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    prefetch_wake_.wait(lock, [&] { return stopping_ || !prefetch_queue_.empty(); });
    if (stopping_) return;
    Session& session = *prefetch_queue_.front();
    prefetch_queue_.pop_front();
    // Under the lock throughout: the session cannot be used or destroyed meanwhile. A
    // failure leaves it evicted for the next call on it to bring back and report.
    if (session.resident_ || !MakeRoom(block_bytes_).ok()) continue;
    if (Reload(session).ok()) ++prefetches_;
  }
}

void SessionResidency::FillStats(lumen_memory_stats& stats) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats.memory_budget_bytes = budget_bytes_;
  stats.resident_sessions = static_cast<int64_t>(lru_.size());
  stats.resident_bytes = static_cast<int64_t>(lru_.size()) * block_bytes_;
  stats.spilled_sessions = spilled_sessions_;
  stats.spilled_bytes = spilled_sessions_ * spill_bytes_;
  stats.evictions = evictions_;
  stats.reloads = reloads_;
  stats.prefetches = prefetches_;
  stats.bytes_evicted = bytes_evicted_;
  stats.bytes_reloaded = bytes_reloaded_;
}

}  // namespace lumen
