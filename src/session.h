#pragma once
// A session: the state of every layer of a model for one conversation, in one block of the
// engine's backend memory, and the number of tokens each layer has consumed.

#include <cstdint>
#include <list>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lumen/lumen.h"
#include "src/engine.h"
#include "src/rewind_history.h"
#include "src/tentative_tokens.h"
#include "src/token_counts.h"

namespace lumen {

// The most tokens one layer of a session can consume (lumen_session_tokens documents it):
// far beyond any conversation, and far enough below INT64_MAX that adding one call's tokens
// cannot overflow.
inline constexpr int64_t kMaxTokens = int64_t{1} << 62;

class Session {
 public:
  static absl::StatusOr<std::unique_ptr<Session>> Create(std::shared_ptr<Engine> engine);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  Engine& engine() const { return *engine_; }
  const Model& model() const { return engine_->model(); }

  // A deep copy on the same engine.
  absl::StatusOr<std::unique_ptr<Session>> Fork() const;
  absl::Status Reset();

  int64_t tokens(int32_t layer) const { return tokens_->get(layer); }
  // The engine checks against kMaxTokens before it runs a call.
  void AddTokens(int32_t layer, int64_t count) { tokens_->Add(layer, count); }
  void SetTokens(int32_t layer, int64_t count) { tokens_->Set(layer, count); }
  // The counts themselves, for the engine's ledger, which may take an asynchronous call's
  // tokens back.
  const std::shared_ptr<TokenCounts>& token_counts() const { return tokens_; }

  // The tentative tokens the session holds (lumen.h, "Tentative tokens"), and the error every
  // call that reads or changes its state answers while it holds any (OK when it holds none).
  TentativeTokens& tentative() { return tentative_; }
  const TentativeTokens& tentative() const { return tentative_; }
  absl::Status CheckNoTentativeTokens() const;

  // What the session keeps to rewind (lumen.h, "Rewind"); the engine keeps it current.
  RewindHistory& rewind() { return rewind_; }
  const RewindHistory& rewind() const { return rewind_; }

  // The layer's state in backend memory: the matrix [HV, K, V], then the normalizer [HV, K],
  // then the conv windows [C, W-1] of q, k and v, all in the layer's stored dtype.
  void* layer_state(int32_t layer) const;

  // Makes `block` (a full state block of this engine) the session's state and returns the
  // block it replaces (nullptr while the session is evicted, see SessionResidency).
  void* ExchangeBlock(void* block) { return std::exchange(block_, block); }

  // Copy one part of a layer's state out as / in from fp32 canonical layout (host memory).
  absl::Status ReadState(int32_t layer, int32_t part, float* out,
                         int64_t count) const;
  absl::Status WriteState(int32_t layer, int32_t part, const float* values,
                          int64_t count);

 private:
  friend class SessionResidency;

  Session(std::shared_ptr<Engine> engine, void* block)
      : engine_(std::move(engine)),
        block_(block),
        tokens_(std::make_shared<TokenCounts>(model().num_layers())),
        tentative_(model().num_layers()),
        rewind_(model().num_layers()) {}

  // Locates a part of a layer's state (byte offset) after checking the part and the count.
  absl::StatusOr<int64_t> PartOffset(int32_t layer, int32_t part,
                                     int64_t count) const;

  std::shared_ptr<Engine> engine_;
  void* block_;                  // model().state_bytes() bytes of backend memory
  std::shared_ptr<TokenCounts> tokens_;  // [num_layers]
  TentativeTokens tentative_;
  RewindHistory rewind_;

  // Kept by the engine's SessionResidency (under its lock) when the engine has a memory
  // budget: whether block_ holds the state or it is spilled, how many calls use the session
  // now, and its place in the least-recently-used order while resident.
  bool resident_ = true;
  int32_t pins_ = 0;
  std::list<Session*>::iterator lru_position_;
};

}  // namespace lumen
