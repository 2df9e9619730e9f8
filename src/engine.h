#pragma once
// An engine binds a model to a backend and runs layer calls for its sessions.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lumen/lumen.h"
#include "src/backend.h"
#include "src/model.h"
#include "src/rewind_history.h"
#include "src/session_residency.h"
#include "src/thread_pool.h"
#include "src/token_counts.h"

namespace lumen {

class Session;

// The most sessions a reservation may name (lumen_engine_reserve): far more than one call can
// hold the states of, and few enough that sizing the scratch for every count stays quick.
inline constexpr int32_t kMaxReservedSessions = 1 << 20;

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  static absl::StatusOr<std::shared_ptr<Engine>> Create(std::shared_ptr<const Model> model,
                                                        const lumen_engine_options& options);

  const Model& model() const { return *model_; }
  const std::shared_ptr<const Model>& shared_model() const { return model_; }
  Backend& backend() const { return *backend_; }

  absl::StatusOr<std::unique_ptr<Session>> CreateSession();

  // The session memory budget (lumen.h, "Session memory budget"); without one these only
  // allocate and free. A new session's block is allocated within the budget, then the
  // session registered; a dying session frees its block or its spill file.
  absl::StatusOr<void*> AllocateSessionState();
  void RegisterSession(Session& session);
  void ForgetSession(Session& session);
  // Makes the sessions resident until Unpin (PinnedSessions does both): every call that
  // touches a session's state pins it first.
  absl::Status Pin(absl::Span<Session* const> sessions);
  void Unpin(absl::Span<Session* const> sessions);
  void Prefetch(Session& session);
  bool IsResident(const Session& session);
  void FillStats(lumen_memory_stats& stats);

  // Session state memory, through the backend. A device backend waits in these for the layer
  // calls it has enqueued and learns whether their input checks failed, so each settles the
  // ledger of asynchronous calls (SettleAsyncCalls) before it returns: a caller that is told
  // of a failed call finds its tokens already taken back.
  absl::StatusOr<void*> AllocateState();
  void FreeState(void* block);
  absl::Status ZeroState(void* block);
  absl::Status CopyState(void* dst, const void* src);
  absl::Status StateToHost(void* host_dst, const void* src, int64_t bytes);
  absl::Status StateFromHost(void* dst, const void* host_src, int64_t bytes);

  // One token for each session (inputs stacked [N, ...]).
  absl::Status Step(int32_t layer, absl::Span<Session* const> sessions,
                    const lumen_layer_inputs& inputs, lumen_layer_output& output);

  // Session i consumes tokens cu_seqlens[i] .. cu_seqlens[i + 1] of the inputs.
  absl::Status Prefill(int32_t layer, absl::Span<Session* const> sessions,
                       absl::Span<const int32_t> cu_seqlens, const lumen_layer_inputs& inputs,
                       lumen_layer_output& output);

  // Tentative tokens (lumen.h, "Tentative tokens"): session i runs tokens cu_seqlens[i] ..
  // cu_seqlens[i + 1] of the inputs without changing its state, and keeps them.
  absl::Status StepTentative(int32_t layer, absl::Span<Session* const> sessions,
                             absl::Span<const int32_t> cu_seqlens,
                             const lumen_layer_inputs& inputs, lumen_layer_output& output);
  // Session i accepts its first accepted[i] tentative tokens, replayed layer by layer.
  absl::Status Commit(absl::Span<Session* const> sessions, absl::Span<const int32_t> accepted);

  // Rewind (lumen.h, "Rewind"): keeps the inputs of the session's last `depth` committed
  // tokens (0: none); how many tokens every layer can go back now; going back.
  absl::Status SetRewindDepth(Session& session, int32_t depth);
  int32_t RewindAvailable(const Session& session) const;
  absl::Status Rewind(Session& session, int32_t tokens);

  // Makes the backend ready for every layer call within `reservation` (lumen_engine_reserve:
  // checked here, then handed to the backend).
  absl::Status Reserve(const lumen_reservation& reservation);

  // A state block for a session of this model whose contents are undefined. Restores fill
  // one and swap it with the session's, so they never half-update a session and never pay
  // for a fresh allocation twice: the swapped-out block comes back with ReturnSpareState.
  absl::StatusOr<void*> TakeSpareState();
  void ReturnSpareState(void* block);

  // Runs first() and second() at the same time on two threads (snapshot copies and their
  // checksums overlap this way) and returns when both are done.
  void RunConcurrently(const std::function<void()>& first,
                       const std::function<void()>& second);

  ~Engine();

 private:
  Engine(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend)
      : model_(std::move(model)), backend_(std::move(backend)) {}

  // A layer call still running on the device when the backend returned from it: the tokens
  // it added to each of its sessions, taken back if the backend reports that it changed
  // nothing.
  struct AsyncCall {
    AsyncCallId id = kFinishedCall;
    int32_t layer = 0;
    std::vector<std::pair<std::shared_ptr<TokenCounts>, int64_t>> tokens;
  };

  // What a layer call does: a public step or prefill (refused for a session that holds
  // tentative tokens), a tentative pass (changes no state or count), or a commit's replay of
  // accepted tokens (recurrent, several tokens per session).
  // kRestore: a rewind's replay of kept tokens, which the rewind history does not record.
  enum class CallKind { kStep, kPrefill, kTentative, kReplay, kRestore };

  // Session `index` of a call: present, and of this engine.
  absl::Status CheckCallSession(const Session* session, size_t index) const;
  // Validates everything about a call, then runs it and advances the token counts.
  absl::Status RunLayer(CallKind kind, int32_t layer, absl::Span<Session* const> sessions,
                        std::vector<int32_t> cu_seqlens, const lumen_layer_inputs& inputs,
                        lumen_layer_output& output);
  // Keeps what a rewind needs of a call that changed the sessions' layer `layer`: before it
  // runs, a checkpoint where a session's layer has none (BeforeCall); after it ran, its tokens'
  // inputs, and a new checkpoint every `depth` tokens (AfterCall). A prefill starts the
  // layer's history afresh.
  absl::Status BeforeCall(CallKind kind, int32_t layer, absl::Span<Session* const> sessions);
  void AfterCall(CallKind kind, int32_t layer, absl::Span<Session* const> sessions,
                 const LayerRun& run);
  // The layer's state of a pinned session, copied to host memory as a checkpoint.
  absl::Status TakeCheckpoint(Session& session, int32_t layer, RewindHistory::Checkpoint* out);

  // Replays tokens [first[i], first[i] + count[i]) of session i's kept inputs of `layer`
  // through the step path, in one call (sessions whose kept inputs share dtype, memory and
  // stream; the call runs on that stream).
  absl::Status Replay(int32_t layer, absl::Span<Session* const> sessions,
                      absl::Span<const int32_t> first, absl::Span<const int32_t> count);
  // Commits one layer: replays each session's accepted[i] tokens (rounds of one token where
  // the state is bf16, which steps round after every token), then drops its kept inputs.
  absl::Status CommitLayer(int32_t layer, absl::Span<Session* const> sessions,
                           absl::Span<const int32_t> accepted);
  // Applies the backend's report to the ledger: takes back the tokens of the calls that
  // changed nothing and forgets the calls that have run. Needs ledger_mutex_.
  void SettleAsyncCalls();
  // Settles the ledger after a call into the backend and passes its status on.
  absl::Status Settled(absl::Status status);

  std::shared_ptr<const Model> model_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<SessionResidency> residency_;  // null without a memory budget

  // Held from a layer call's Run until its entry is in the ledger, so that no report is
  // applied before the entry of a call it speaks of. Only for a backend with asynchronous
  // calls: a CPU engine's state reads never wait for another session's layer call.
  std::mutex ledger_mutex_;
  std::deque<AsyncCall> async_calls_;  // oldest first; guarded by ledger_mutex_

  std::mutex spare_mutex_;
  void* spare_state_ = nullptr;  // guarded by spare_mutex_

  std::mutex pair_mutex_;                 // one RunConcurrently at a time
  std::unique_ptr<ThreadPool> pair_pool_;  // two threads, made on first use
};

// Pins sessions for the scope's lifetime (Engine::Pin); check status() before using them.
class PinnedSessions {
 public:
  PinnedSessions(Engine& engine, absl::Span<Session* const> sessions)
      : engine_(engine), sessions_(sessions), status_(engine.Pin(sessions)) {}
  ~PinnedSessions() {
    if (status_.ok()) engine_.Unpin(sessions_);
  }
  PinnedSessions(const PinnedSessions&) = delete;
  PinnedSessions& operator=(const PinnedSessions&) = delete;
  const absl::Status& status() const { return status_; }

 private:
  Engine& engine_;
  absl::Span<Session* const> sessions_;
  absl::Status status_;
};

}  // namespace lumen
