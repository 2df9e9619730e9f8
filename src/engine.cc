#include "src/engine.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/checked_int.h"
#include "src/dtype_convert.h"
#include "src/session.h"
#include "src/status.h"
#include "src/struct_size.h"
#include "src/struct_versions.h"

namespace lumen {

absl::StatusOr<std::shared_ptr<Engine>> Engine::Create(std::shared_ptr<const Model> model,
                                                       const lumen_engine_options& options) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = CreateBackend(options);
  if (!backend.ok()) return backend.status();
  absl::Status status = (*backend)->LoadModel(*model);
  if (options.backend == LUMEN_BACKEND_AUTO && (*backend)->kind() != LUMEN_BACKEND_CPU &&
      LumenStatusOf(status) == LUMEN_ERROR_UNSUPPORTED) {
    // AUTO means the best backend that runs this model: the CPU runs every layer.
    lumen_engine_options cpu = options;
    cpu.backend = LUMEN_BACKEND_CPU;
    backend = CreateBackend(cpu);
    if (!backend.ok()) return backend.status();
    status = (*backend)->LoadModel(*model);
  }
  if (!status.ok()) return status;
  std::shared_ptr<Engine> engine(new Engine(std::move(model), *std::move(backend)));
  if (options.memory_budget_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory_budget_bytes is ", options.memory_budget_bytes, ", must be >= 0 (0: no limit)"));
  }
  if (options.memory_budget_bytes > 0) {
    if (engine->backend_->kind() != LUMEN_BACKEND_CPU) {
      return absl::UnimplementedError(
          "a session memory budget is supported by the CPU engine only, for now");
    }
    absl::StatusOr<std::unique_ptr<SessionResidency>> residency = SessionResidency::Create(
        *engine, options.memory_budget_bytes,
        options.spill_directory != nullptr ? options.spill_directory : "");
    if (!residency.ok()) return residency.status();
    engine->residency_ = *std::move(residency);
  }
  return engine;
}

absl::StatusOr<void*> Engine::AllocateSessionState() {
  if (residency_ != nullptr) return residency_->AllocateForNewSession();
  return AllocateState();
}

void Engine::RegisterSession(Session& session) {
  if (residency_ != nullptr) residency_->Register(session);
}

void Engine::ForgetSession(Session& session) {
  if (residency_ != nullptr) {
    residency_->Forget(session);
  } else {
    FreeState(session.ExchangeBlock(nullptr));
  }
}

absl::Status Engine::Pin(absl::Span<Session* const> sessions) {
  return residency_ != nullptr ? residency_->Pin(sessions) : absl::OkStatus();
}

void Engine::Unpin(absl::Span<Session* const> sessions) {
  if (residency_ != nullptr) residency_->Unpin(sessions);
}

void Engine::Prefetch(Session& session) {
  if (residency_ != nullptr) residency_->Prefetch(session);
}

bool Engine::IsResident(const Session& session) {
  return residency_ == nullptr || residency_->IsResident(session);
}

void Engine::FillStats(lumen_memory_stats& stats) {
  if (residency_ != nullptr) {
    residency_->FillStats(stats);
    return;
  }
  // Without a budget every session is resident; the engine does not count them.
  stats.memory_budget_bytes = 0;
}

Engine::~Engine() {
  residency_.reset();  // its background thread first
  if (spare_state_ != nullptr) backend_->FreeState(spare_state_);
}

void Engine::SettleAsyncCalls() {
  const AsyncCallReport report = backend_->TakeAsyncCallReport();
  for (const auto& [first, last] : report.failed) {
    for (const AsyncCall& call : async_calls_) {
      if (call.id < first || call.id > last) continue;
      for (const auto& [counts, tokens] : call.tokens) counts->Add(call.layer, -tokens);
    }
  }
  while (!async_calls_.empty() && async_calls_.front().id <= report.settled_through) {
    async_calls_.pop_front();
  }
}

absl::Status Engine::Settled(absl::Status status) {
  if (!backend_->has_async_calls()) return status;
  std::lock_guard<std::mutex> lock(ledger_mutex_);
  SettleAsyncCalls();
  return status;
}

absl::StatusOr<void*> Engine::AllocateState() {
  absl::StatusOr<void*> block = backend_->AllocateState(model_->state_bytes());
  if (absl::Status settled = Settled(block.status()); !settled.ok()) return settled;
  return block;
}

void Engine::FreeState(void* block) { backend_->FreeState(block); }

absl::Status Engine::ZeroState(void* block) {
  return Settled(backend_->ZeroState(block, model_->state_bytes()));
}

absl::Status Engine::CopyState(void* dst, const void* src) {
  return Settled(backend_->CopyState(dst, src, model_->state_bytes()));
}

absl::Status Engine::StateToHost(void* host_dst, const void* src, int64_t bytes) {
  return Settled(backend_->StateToHost(host_dst, src, bytes));
}

absl::Status Engine::StateFromHost(void* dst, const void* host_src, int64_t bytes) {
  return Settled(backend_->StateFromHost(dst, host_src, bytes));
}

absl::StatusOr<void*> Engine::TakeSpareState() {
  {
    std::lock_guard<std::mutex> lock(spare_mutex_);
    if (spare_state_ != nullptr) return std::exchange(spare_state_, nullptr);
  }
  return AllocateState();
}

void Engine::ReturnSpareState(void* block) {
  if (block == nullptr) return;  // an evicted session's (SessionResidency::Reload)
  {
    std::lock_guard<std::mutex> lock(spare_mutex_);
    if (spare_state_ == nullptr) {
      spare_state_ = block;
      return;
    }
  }
  backend_->FreeState(block);
}

void Engine::RunConcurrently(const std::function<void()>& first,
                             const std::function<void()>& second) {
  std::lock_guard<std::mutex> lock(pair_mutex_);
  if (pair_pool_ == nullptr) pair_pool_ = std::make_unique<ThreadPool>(2);
  // Tasks are claimed in order, so `first` always starts: `second` may wait on it.
  pair_pool_->ParallelFor(2, [&](int64_t task, int32_t) { task == 0 ? first() : second(); });
}

absl::StatusOr<std::unique_ptr<Session>> Engine::CreateSession() {
  return Session::Create(shared_from_this());
}

absl::Status Engine::Reserve(const lumen_reservation& reservation) {
  if (absl::Status status = CheckStructSize(reservation, "lumen_reservation"); !status.ok()) {
    return status;
  }
  const lumen_reservation current = CurrentLayout(reservation);
  if (current.max_sessions < 1 || current.max_sessions > kMaxReservedSessions ||
      current.max_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a reservation needs 1 <= max_sessions <= ", kMaxReservedSessions,
        " and max_tokens >= 1 (got ", current.max_sessions, " and ", current.max_tokens, ")"));
  }
  return backend_->Reserve(*model_, current.max_sessions, current.max_tokens);
}

absl::Status Engine::Step(int32_t layer, absl::Span<Session* const> sessions,
                          const lumen_layer_inputs& inputs, lumen_layer_output& output) {
  std::vector<int32_t> cu_seqlens(sessions.size() + 1);
  for (size_t i = 0; i < cu_seqlens.size(); ++i) cu_seqlens[i] = static_cast<int32_t>(i);
  return RunLayer(CallKind::kStep, layer, sessions, std::move(cu_seqlens), inputs, output);
}

namespace {

absl::Status CheckCuSeqlens(absl::Span<Session* const> sessions,
                            absl::Span<const int32_t> cu_seqlens) {
  if (cu_seqlens.size() != sessions.size() + 1) {
    return absl::InvalidArgumentError("cu_seqlens must have one entry more than sessions");
  }
  if (cu_seqlens[0] != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cu_seqlens[0] is ", cu_seqlens[0], ", must be 0"));
  }
  for (size_t i = 1; i < cu_seqlens.size(); ++i) {
    if (cu_seqlens[i] < cu_seqlens[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat("cu_seqlens decreases at entry ", i, " (",
                                                     cu_seqlens[i - 1], " then ",
                                                     cu_seqlens[i], ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Engine::Prefill(int32_t layer, absl::Span<Session* const> sessions,
                             absl::Span<const int32_t> cu_seqlens,
                             const lumen_layer_inputs& inputs, lumen_layer_output& output) {
  if (absl::Status status = CheckCuSeqlens(sessions, cu_seqlens); !status.ok()) return status;
  return RunLayer(CallKind::kPrefill, layer, sessions,
                  std::vector<int32_t>(cu_seqlens.begin(), cu_seqlens.end()), inputs, output);
}

absl::Status Engine::StepTentative(int32_t layer, absl::Span<Session* const> sessions,
                                   absl::Span<const int32_t> cu_seqlens,
                                   const lumen_layer_inputs& inputs,
                                   lumen_layer_output& output) {
  if (absl::Status status = CheckCuSeqlens(sessions, cu_seqlens); !status.ok()) return status;
  if (absl::Status status = model_->CheckLayer(layer); !status.ok()) return status;
  const LayerSpec& spec = model_->layer(layer);
  if (spec.state_dtype != DType::kFloat32 && spec.conv_size > 0) {
    // A step rounds the window to the state's dtype after every token; a pass of several
    // tokens would convolve the later ones over their unrounded inputs.
    return absl::UnimplementedError(absl::StrCat(
        "layer ", layer, " has a bfloat16 state and a short convolution: tentative tokens are "
        "not supported for such layers yet"));
  }
  for (size_t i = 0; i < sessions.size(); ++i) {
    if (sessions[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("session ", i, " is NULL"));
    }
    const int32_t n = cu_seqlens[i + 1] - cu_seqlens[i];
    if (n < 1 || n > kMaxTentativeTokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "session ", i, " gets ", n, " tentative tokens; a tentative call takes 1 to ",
          kMaxTentativeTokens, " (LUMEN_MAX_TENTATIVE_TOKENS) per session"));
    }
    const TentativeTokens& tentative = sessions[i]->tentative();
    if (tentative.has_layer(layer)) {
      return LumenError(LUMEN_ERROR_UNCOMMITTED_TOKENS,
                        absl::StrCat("session ", i, "'s layer ", layer, " already ran ",
                                     tentative.count(),
                                     " tentative tokens: commit them before running more"));
    }
    if (tentative.count() != 0 && tentative.count() != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "session ", i, " holds ", tentative.count(), " tentative tokens in other layers; ",
          "every layer's tentative call takes the same count (got ", n, ")"));
    }
  }
  absl::Status status =
      RunLayer(CallKind::kTentative, layer, sessions,
               std::vector<int32_t>(cu_seqlens.begin(), cu_seqlens.end()), inputs, output);
  if (!status.ok()) return status;
  const lumen_layer_inputs current = CurrentLayout(inputs);
  for (size_t i = 0; i < sessions.size(); ++i) {
    status = sessions[i]->tentative().Keep(*backend_, spec, layer, current, cu_seqlens[i],
                                           cu_seqlens[i + 1] - cu_seqlens[i]);
    if (!status.ok()) {  // the sessions kept so far give theirs back: the call changes none
      for (size_t j = 0; j < i; ++j) sessions[j]->tentative().Drop(*backend_, layer);
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::CheckCallSession(const Session* session, size_t index) const {
  if (session == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("session ", index, " is NULL"));
  }
  if (&session->engine() != this) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session ", index, " belongs to another engine; a call runs sessions of its own engine"));
  }
  return absl::OkStatus();
}

absl::Status Engine::Commit(absl::Span<Session* const> sessions,
                            absl::Span<const int32_t> accepted) {
  for (size_t i = 0; i < sessions.size(); ++i) {
    const Session* session = sessions[i];
    if (absl::Status status = CheckCallSession(session, i); !status.ok()) return status;
    const int32_t n = session->tentative().count();
    if (n == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "session ", i, " holds no tentative tokens to commit (already committed?)"));
    }
    if (accepted[i] < 0 || accepted[i] > n) {
      return absl::InvalidArgumentError(
          absl::StrCat("session ", i, " accepts ", accepted[i], " of its ", n,
                       " tentative tokens; it can accept 0 to ", n));
    }
  }
  std::vector<const Session*> sorted(sessions.begin(), sessions.end());
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return absl::InvalidArgumentError("a session appears more than once in the call");
  }
  for (int32_t layer = 0; layer < model_->num_layers(); ++layer) {
    if (absl::Status status = CommitLayer(layer, sessions, accepted); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::CommitLayer(int32_t layer, absl::Span<Session* const> sessions,
                                 absl::Span<const int32_t> accepted) {
  // The sessions to replay, grouped by the dtype, memory and stream of their kept inputs
  // (one call takes one of each).
  std::vector<size_t> pending;
  for (size_t i = 0; i < sessions.size(); ++i) {
    if (sessions[i]->tentative().has_layer(layer) && accepted[i] > 0) pending.push_back(i);
  }
  const bool per_token = model_->layer(layer).state_dtype != DType::kFloat32;
  while (!pending.empty()) {
    const KeptInputs& lead = sessions[pending[0]]->tentative().layer(layer);
    std::vector<Session*> group;
    std::vector<int32_t> counts;
    std::vector<size_t> rest;
    for (size_t i : pending) {
      const KeptInputs& kept = sessions[i]->tentative().layer(layer);
      if (kept.dtype == lead.dtype && kept.memory == lead.memory &&
          kept.stream == lead.stream) {
        group.push_back(sessions[i]);
        counts.push_back(accepted[i]);
      } else {
        rest.push_back(i);
      }
    }
    const int32_t most = *std::max_element(counts.begin(), counts.end());
    for (int32_t round = 0; round < (per_token ? most : 1); ++round) {
      std::vector<Session*> members;
      std::vector<int32_t> first, count;
      for (size_t j = 0; j < group.size(); ++j) {
        if (per_token && counts[j] <= round) continue;
        members.push_back(group[j]);
        first.push_back(per_token ? round : 0);
        count.push_back(per_token ? 1 : counts[j]);
      }
      if (absl::Status status = Replay(layer, members, first, count); !status.ok()) {
        return status;
      }
    }
    pending = std::move(rest);
  }
  for (Session* session : sessions) session->tentative().Drop(*backend_, layer);
  return absl::OkStatus();
}

absl::Status Engine::SetRewindDepth(Session& session, int32_t depth) {
  if (&session.engine() != this) {
    return absl::FailedPreconditionError("the session belongs to another engine");
  }
  if (depth < 0 || depth > kMaxRewindTokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rewind depth ", depth, " is outside [0, ", kMaxRewindTokens,
        "] (LUMEN_MAX_REWIND_TOKENS)"));
  }
  if (depth > 0 && backend_->kind() != LUMEN_BACKEND_CPU) {
    return absl::UnimplementedError("rewind is supported by the CPU engine only, for now");
  }
  if (absl::Status status = session.CheckNoTentativeTokens(); !status.ok()) return status;
  session.rewind().Reset(depth);  // each layer takes its checkpoint before its next token
  return absl::OkStatus();
}

int32_t Engine::RewindAvailable(const Session& session) const {
  const RewindHistory& history = session.rewind();
  if (!history.enabled()) return 0;
  int64_t available = history.depth();
  for (int32_t layer = 0; layer < history.num_layers(); ++layer) {
    const RewindHistory::Layer& kept = history.layer(layer);
    if (kept.newer.position < 0) return 0;
    available = std::min(available, session.tokens(layer) - kept.start());
  }
  return static_cast<int32_t>(available);
}

absl::Status Engine::TakeCheckpoint(Session& session, int32_t layer,
                                    RewindHistory::Checkpoint* out) {
  const int64_t bytes = model_->layer(layer).state_bytes();
  RewindHistory::Checkpoint checkpoint;
  try {
    checkpoint.state.resize(bytes);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory for a rewind checkpoint");
  }
  if (absl::Status status = StateToHost(checkpoint.state.data(), session.layer_state(layer),
                                        bytes);
      !status.ok()) {
    return status;
  }
  checkpoint.position = session.tokens(layer);
  *out = std::move(checkpoint);
  return absl::OkStatus();
}

absl::Status Engine::BeforeCall(CallKind kind, int32_t layer,
                                absl::Span<Session* const> sessions) {
  if (kind != CallKind::kStep && kind != CallKind::kReplay) return absl::OkStatus();
  for (Session* session : sessions) {
    RewindHistory::Layer* kept =
        session->rewind().enabled() ? &session->rewind().layer(layer) : nullptr;
    if (kept == nullptr || kept->newer.position >= 0) continue;
    if (absl::Status status = TakeCheckpoint(*session, layer, &kept->newer); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

void Engine::AfterCall(CallKind kind, int32_t layer, absl::Span<Session* const> sessions,
                       const LayerRun& run) {
  const bool records = kind == CallKind::kStep || kind == CallKind::kReplay;
  if (!records && kind != CallKind::kPrefill) return;
  const InputShape shape(model_->layer(layer));
  const int64_t size = DTypeSize(static_cast<DType>(run.inputs->dtype));
  const void* tensors[kNumInputTensors] = {run.inputs->q, run.inputs->k, run.inputs->v,
                                           run.inputs->g, run.inputs->beta};
  for (size_t i = 0; i < sessions.size(); ++i) {
    Session& session = *sessions[i];
    if (!session.rewind().enabled()) continue;
    RewindHistory::Layer& kept = session.rewind().layer(layer);
    if (!records) {  // a prefill: the layer starts afresh at its next step
      kept = RewindHistory::Layer{};
      continue;
    }
    try {
      for (int64_t t = run.cu_seqlens[i]; t < run.cu_seqlens[i + 1]; ++t) {
        RewindHistory::Token token;
        token.dtype = run.inputs->dtype;
        token.inputs.resize(shape.token_elements() * size);
        char* at = token.inputs.data();
        for (int32_t tensor = 0; tensor < kNumInputTensors; ++tensor) {
          const int64_t bytes = shape.per_token[tensor] * size;
          if (bytes == 0) continue;
          std::memcpy(at, static_cast<const char*>(tensors[tensor]) + t * bytes, bytes);
          at += bytes;
        }
        kept.tokens.push_back(std::move(token));
      }
      const int64_t now = session.tokens(layer);
      if (now - kept.newer.position >= session.rewind().depth()) {
        RewindHistory::Checkpoint fresh;
        if (!TakeCheckpoint(session, layer, &fresh).ok()) throw std::bad_alloc();
        kept.older = std::move(kept.newer);
        kept.newer = std::move(fresh);
        while (static_cast<int64_t>(kept.tokens.size()) > now - kept.start()) {
          kept.tokens.pop_front();
        }
      }
    } catch (const std::bad_alloc&) {
      kept = RewindHistory::Layer{};  // no memory to record: the history starts afresh
    }
  }
}

absl::Status Engine::Rewind(Session& session, int32_t tokens) {
  if (absl::Status status = session.CheckNoTentativeTokens(); !status.ok()) return status;
  if (!session.rewind().enabled()) {
    return absl::InvalidArgumentError(
        "the session keeps no rewind history: set a depth first (lumen_session_set_rewind_depth)");
  }
  const int32_t available = RewindAvailable(session);
  if (tokens < 0 || tokens > available) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot rewind ", tokens, " tokens: the session can go back 0 to ", available));
  }
  if (tokens == 0) return absl::OkStatus();
  Session* self = &session;
  PinnedSessions pinned(*this, {&self, 1});
  if (!pinned.status().ok()) return pinned.status();
  for (int32_t layer = 0; layer < model_->num_layers(); ++layer) {
    const LayerSpec& spec = model_->layer(layer);
    const InputShape shape(spec);
    RewindHistory::Layer& kept = session.rewind().layer(layer);
    const int64_t target = session.tokens(layer) - tokens;
    const RewindHistory::Checkpoint& from =
        kept.newer.position <= target ? kept.newer : kept.older;
    if (absl::Status status = StateFromHost(session.layer_state(layer), from.state.data(),
                                            static_cast<int64_t>(from.state.size()));
        !status.ok()) {
      return status;
    }
    session.SetTokens(layer, from.position);
    std::vector<float> o(spec.num_value_heads * spec.value_dim);
    for (int64_t position = from.position; position < target; ++position) {
      const RewindHistory::Token& token = kept.tokens[position - kept.start()];
      const int64_t size = DTypeSize(static_cast<DType>(token.dtype));
      lumen_layer_inputs inputs{};
      inputs.struct_size = sizeof(inputs);
      inputs.dtype = token.dtype;
      inputs.memory = LUMEN_MEMORY_HOST;
      const void** pointers[kNumInputTensors] = {&inputs.q, &inputs.k, &inputs.v, &inputs.g,
                                                 &inputs.beta};
      int64_t* counts[kNumInputTensors] = {&inputs.q_count, &inputs.k_count, &inputs.v_count,
                                           &inputs.g_count, &inputs.beta_count};
      const char* at = token.inputs.data();
      for (int32_t tensor = 0; tensor < kNumInputTensors; ++tensor) {
        if (shape.per_token[tensor] == 0) continue;
        *pointers[tensor] = at;
        *counts[tensor] = shape.per_token[tensor];
        at += shape.per_token[tensor] * size;
      }
      lumen_layer_output output{};
      output.struct_size = sizeof(output);
      output.dtype = LUMEN_DTYPE_FLOAT32;
      output.memory = LUMEN_MEMORY_HOST;
      output.o = o.data();
      output.o_count = static_cast<int64_t>(o.size());
      if (absl::Status status =
              RunLayer(CallKind::kRestore, layer, {&self, 1}, {0, 1}, inputs, output);
          !status.ok()) {
        return status;
      }
    }
    kept.tokens.resize(target - kept.start());
    if (kept.newer.position > target) {
      kept.newer = std::move(kept.older);
      kept.older = RewindHistory::Checkpoint{};
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::Replay(int32_t layer, absl::Span<Session* const> sessions,
                            absl::Span<const int32_t> first, absl::Span<const int32_t> count) {
  const LayerSpec& spec = model_->layer(layer);
  const InputShape shape(spec);
  const KeptInputs& lead = sessions[0]->tentative().layer(layer);
  const lumen_memory memory = lead.memory;
  const int64_t size = DTypeSize(static_cast<DType>(lead.dtype));
  std::vector<int32_t> cu_seqlens(sessions.size() + 1, 0);
  for (size_t i = 0; i < sessions.size(); ++i) cu_seqlens[i + 1] = cu_seqlens[i] + count[i];
  const int64_t tokens = cu_seqlens.back();

  // One session's tokens are read where they are kept; several sessions' are gathered.
  std::vector<void*> buffers;
  auto free_buffers = [&] {
    for (void* buffer : buffers) backend_->FreeBuffer(memory, buffer);
  };
  const void* tensors[kNumInputTensors] = {};
  for (int32_t tensor = 0; tensor < kNumInputTensors; ++tensor) {
    const int64_t elements = shape.per_token[tensor];
    if (elements == 0) continue;
    if (sessions.size() == 1) {
      tensors[tensor] = lead.At(shape, tensor, first[0]);
      continue;
    }
    absl::StatusOr<void*> gathered = backend_->AllocateBuffer(memory, tokens * elements * size);
    if (!gathered.ok()) {
      free_buffers();
      return gathered.status();
    }
    buffers.push_back(*gathered);
    tensors[tensor] = *gathered;
    for (size_t i = 0; i < sessions.size(); ++i) {
      const KeptInputs& kept = sessions[i]->tentative().layer(layer);
      absl::Status status = backend_->CopyBuffer(
          memory, static_cast<char*>(*gathered) + cu_seqlens[i] * elements * size,
          kept.At(shape, tensor, first[i]), count[i] * elements * size, lead.stream);
      if (!status.ok()) {
        free_buffers();
        return status;
      }
    }
  }
  const int64_t out_count = tokens * spec.num_value_heads * spec.value_dim;
  absl::StatusOr<void*> out = backend_->AllocateBuffer(memory, out_count * sizeof(float));
  if (!out.ok()) {
    free_buffers();
    return out.status();
  }
  buffers.push_back(*out);

  lumen_layer_inputs inputs{};
  inputs.struct_size = sizeof(inputs);
  inputs.dtype = lead.dtype;
  inputs.memory = memory;
  inputs.stream = lead.stream;
  const void** pointers[kNumInputTensors] = {&inputs.q, &inputs.k, &inputs.v, &inputs.g,
                                             &inputs.beta};
  int64_t* counts[kNumInputTensors] = {&inputs.q_count, &inputs.k_count, &inputs.v_count,
                                       &inputs.g_count, &inputs.beta_count};
  for (int32_t tensor = 0; tensor < kNumInputTensors; ++tensor) {
    *pointers[tensor] = tensors[tensor];
    *counts[tensor] = tokens * shape.per_token[tensor];
  }
  lumen_layer_output output{};
  output.struct_size = sizeof(output);
  output.dtype = LUMEN_DTYPE_FLOAT32;
  output.memory = memory;
  output.o = *out;
  output.o_count = out_count;
  absl::Status status =
      RunLayer(CallKind::kReplay, layer, sessions, std::move(cu_seqlens), inputs, output);
  free_buffers();
  return status;
}

namespace {

bool IsDType(int32_t value) {
  return value == LUMEN_DTYPE_FLOAT32 || value == LUMEN_DTYPE_BFLOAT16 ||
         value == LUMEN_DTYPE_FLOAT16;
}

// Checks one input buffer: present with the expected count when the layer needs it,
// absent otherwise.
absl::Status CheckBuffer(const char* name, const void* data, int64_t count, int64_t expected,
                         bool needed, const LayerSpec& spec) {
  if (!needed) {
    if (data != nullptr || count != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          FamilyName(spec.family), " layers take no ", name, " input: pass NULL and 0"));
    }
    return absl::OkStatus();
  }
  if (count != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "_count is ", count, ", the call needs ", expected));
  }
  if (data == nullptr && expected > 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is NULL"));
  }
  return absl::OkStatus();
}

absl::Status CheckInputs(const LayerSpec& spec, const Backend& backend, int64_t tokens,
                         const lumen_layer_inputs& in, const lumen_layer_output& out) {
  if (absl::Status status = CheckStructSize(in, "lumen_layer_inputs");
      !status.ok()) {
    return status;
  }
  if (absl::Status status = CheckStructSize(out, "lumen_layer_output"); !status.ok()) {
    return status;
  }
  if (!IsDType(in.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown input dtype ", in.dtype));
  }
  if (out.dtype != LUMEN_DTYPE_FLOAT32 && out.dtype != in.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output dtype ", out.dtype, " must be FLOAT32 or the input dtype (", in.dtype, ")"));
  }
  for (int32_t memory : {in.memory, out.memory}) {
    if (memory != LUMEN_MEMORY_HOST && memory != LUMEN_MEMORY_DEVICE) {
      return absl::InvalidArgumentError(absl::StrCat("unknown memory kind ", memory));
    }
    if (!backend.Accepts(static_cast<lumen_memory>(memory))) {
      return absl::UnimplementedError(
          "this engine's backend cannot read or write buffers in that memory "
          "(the CPU backend takes LUMEN_MEMORY_HOST only)");
    }
  }
  const CheckedInt64 qk = CheckedInt64(tokens) * spec.num_heads * spec.key_dim;
  const CheckedInt64 vo = CheckedInt64(tokens) * spec.num_value_heads * spec.value_dim;
  const CheckedInt64 g = CheckedInt64(tokens) * spec.g_per_token();
  const CheckedInt64 beta = CheckedInt64(tokens) * spec.num_value_heads;
  if (!qk.ok() || !vo.ok() || !g.ok() || !beta.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(tokens, " tokens are more elements than a buffer can count"));
  }
  absl::Status status;
  if (!(status = CheckBuffer("q", in.q, in.q_count, qk.value(), true, spec)).ok()) return status;
  if (!(status = CheckBuffer("k", in.k, in.k_count, qk.value(), true, spec)).ok()) return status;
  if (!(status = CheckBuffer("v", in.v, in.v_count, vo.value(), true, spec)).ok()) return status;
  if (!(status = CheckBuffer("g", in.g, in.g_count, g.value(), spec.needs_g_input(), spec))
           .ok()) {
    return status;
  }
  if (!(status = CheckBuffer("beta", in.beta, in.beta_count, beta.value(), spec.delta_rule(),
                             spec))
           .ok()) {
    return status;
  }
  return CheckBuffer("o", out.o, out.o_count, vo.value(), true, spec);
}

}  // namespace

absl::Status Engine::RunLayer(CallKind kind, int32_t layer,
                              absl::Span<Session* const> sessions,
                              std::vector<int32_t> cu_seqlens, const lumen_layer_inputs& inputs,
                              lumen_layer_output& output) {
  if (absl::Status status = model_->CheckLayer(layer); !status.ok()) return status;
  LayerRun run;
  run.chunkwise = kind == CallKind::kPrefill;
  run.read_only = kind == CallKind::kTentative;
  run.layer = layer;
  run.states.reserve(sessions.size());
  for (size_t i = 0; i < sessions.size(); ++i) {
    const Session* session = sessions[i];
    if (absl::Status status = CheckCallSession(session, i); !status.ok()) return status;
    if (kind == CallKind::kStep || kind == CallKind::kPrefill) {
      if (absl::Status status = session->CheckNoTentativeTokens(); !status.ok()) {
        return LumenError(LUMEN_ERROR_UNCOMMITTED_TOKENS,
                          absl::StrCat("session ", i, ": ", status.message()));
      }
    }
    run.states.push_back(nullptr);  // set once the session is pinned (resident)
  }
  std::vector<const Session*> sorted(sessions.begin(), sessions.end());
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return absl::InvalidArgumentError("a session appears more than once in the call");
  }
  PinnedSessions pinned(*this, sessions);
  if (!pinned.status().ok()) return pinned.status();
  for (size_t i = 0; i < sessions.size(); ++i) run.states[i] = sessions[i]->layer_state(layer);
  for (size_t i = 0; i < sessions.size(); ++i) {
    const int64_t tokens = sessions[i]->tokens(layer);
    const int64_t added = cu_seqlens[i + 1] - cu_seqlens[i];
    if (added > kMaxTokens - tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "session ", i, " has consumed ", tokens, " tokens in layer ", layer, "; ", added,
          " more would pass the limit of ", kMaxTokens, " (2^62)"));
    }
  }
  const LayerSpec& spec = model_->layer(layer);
  absl::Status status = CheckInputs(spec, *backend_, cu_seqlens.back(), inputs, output);
  if (!status.ok()) return status;

  const lumen_layer_inputs current = CurrentLayout(inputs);
  run.cu_seqlens = std::move(cu_seqlens);
  run.inputs = &current;
  run.output = &output;
  if (run.num_tokens() == 0) return absl::OkStatus();
  if (absl::Status status = BeforeCall(kind, layer, sessions); !status.ok()) return status;
  std::unique_lock<std::mutex> ledger(ledger_mutex_, std::defer_lock);
  if (backend_->has_async_calls()) ledger.lock();
  absl::StatusOr<AsyncCallId> call = backend_->Run(spec, run);
  if (call.ok() && !run.read_only) {
    AsyncCall pending{*call, layer, {}};
    for (size_t i = 0; i < sessions.size(); ++i) {
      const int64_t tokens = run.cu_seqlens[i + 1] - run.cu_seqlens[i];
      sessions[i]->AddTokens(layer, tokens);
      if (*call != kFinishedCall && tokens > 0) {
        pending.tokens.emplace_back(sessions[i]->token_counts(), tokens);
      }
    }
    if (*call != kFinishedCall) async_calls_.push_back(std::move(pending));
  }
  // A call that waits for the device (host buffers) may have learned of earlier calls.
  if (ledger.owns_lock()) SettleAsyncCalls();
  if (call.ok()) AfterCall(kind, layer, sessions, run);
  return call.status();
}

}  // namespace lumen
