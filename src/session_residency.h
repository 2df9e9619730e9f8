#pragma once
// The session memory budget of an engine (lumen.h, "Session memory budget"): which sessions'
// state is resident, in least-recently-used order; eviction of idle sessions to snapshot files
// in a spill directory; bringing them back on use or on prefetch; and the counts
// lumen_memory_stats reports.
//
// Every change of residency happens under one lock, so a call that pins its sessions (makes
// them resident and keeps them so until it unpins them) never races an eviction, and a
// background prefetch never races the call that uses the session next. A backend with a
// middle tier (a GPU engine's pinned host memory) would slot in between resident and spilled:
// Evict would move a session one tier down, Reload one tier up.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lumen/lumen.h"

namespace lumen {

class Engine;
class Session;

class SessionResidency {
 public:
  // `spill_directory` empty: a private directory under $TMPDIR, removed with this object.
  static absl::StatusOr<std::unique_ptr<SessionResidency>> Create(
      Engine& engine, int64_t budget_bytes, const std::string& spill_directory);
  ~SessionResidency();
  SessionResidency(const SessionResidency&) = delete;
  SessionResidency& operator=(const SessionResidency&) = delete;

  // A state block for a new session, room made for it first.
  absl::StatusOr<void*> AllocateForNewSession();
  // Registers a session made on a block from AllocateForNewSession (most recently used).
  void Register(Session& session);
  // Frees whatever a dying session holds: its block or its spill file.
  void Forget(Session& session);

  // Makes every session resident (bringing back the evicted, evicting idle others) and keeps
  // them so until Unpin. On failure nothing is pinned and no session has changed.
  absl::Status Pin(absl::Span<Session* const> sessions);
  void Unpin(absl::Span<Session* const> sessions);

  // Queues an evicted session to be brought back by a background thread.
  void Prefetch(Session& session);
  bool IsResident(const Session& session);

  void FillStats(lumen_memory_stats& stats);

 private:
  SessionResidency(Engine& engine, int64_t budget_bytes, std::string spill_directory,
                   bool owns_directory);

  // Evicts idle sessions, least recently used first, until `bytes` more fit in the budget.
  // Needs mutex_.
  absl::Status MakeRoom(int64_t bytes);
  absl::Status Evict(Session& session);   // needs mutex_
  absl::Status Reload(Session& session);  // needs mutex_; room already made
  std::string SpillPath(const Session& session) const;
  void PrefetchLoop();

  Engine& engine_;
  const int64_t budget_bytes_;
  const int64_t block_bytes_;   // one session's state (the model's state bytes)
  const int64_t spill_bytes_;   // one session's spill file (an fp32 snapshot)
  const std::string directory_;
  const bool owns_directory_;

  std::mutex mutex_;
  std::list<Session*> lru_;        // resident sessions, least recently used first
  int64_t resident_bytes_ = 0;     // blocks of resident sessions and of sessions being made
  int64_t spilled_sessions_ = 0;
  int64_t evictions_ = 0, reloads_ = 0, prefetches_ = 0;
  int64_t bytes_evicted_ = 0, bytes_reloaded_ = 0;
  std::vector<char> buffer_;       // one spill file's bytes

  std::condition_variable prefetch_wake_;
  std::deque<Session*> prefetch_queue_;  // guarded by mutex_
  bool stopping_ = false;                // guarded by mutex_
  std::thread prefetcher_;               // started on the first Prefetch
};

}  // namespace lumen
