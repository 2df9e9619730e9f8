#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <new>

#include "absl/strings/str_cat.h"
#include "backends/cpu/create_cpu_backend.h"
#include "src/checked_int.h"
#include "src/dtype_convert.h"
#include "src/model.h"

namespace lumen::cpu {
namespace {

// A prefill's work unit: this many neighbouring value heads (8 states of K = V = 128 are
// 512 KiB, which L2 holds), walked this many tokens (two chunks) at a time.
constexpr int64_t kPrefillHeadGroup = 8;
constexpr int64_t kPrefillSliceTokens = 2 * kChunkSize;

// Rounds `count` floats to bf16 and back in place, as storing a bf16 state and loading it
// for the next step does. rounded: room for `count` bf16 values.
void RoundToBFloat16(float* values, int64_t count, uint16_t* rounded) {
  StoreFromFloat(values, DType::kBFloat16, rounded, count);
  LoadAsFloat(rounded, DType::kBFloat16, values, count);
}

}  // namespace

CpuBackend::CpuBackend(int32_t num_threads)
    : pool_(num_threads), scratch_(pool_.num_threads()) {}

absl::Status CpuBackend::LoadModel(const Model& model) {
  try {
    held_writes_.Plan(model);
    conv_taps_.clear();
    for (int32_t layer = 0; layer < model.num_layers(); ++layer) {
      conv_taps_.push_back(MakeConvTaps(model.layer(layer)));
    }
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory loading the model");
  }
  return absl::OkStatus();
}

absl::StatusOr<void*> CpuBackend::AllocateState(int64_t bytes) {
  // aligned_alloc takes a multiple of the alignment.
  const CheckedInt64 size =
      CheckedInt64(std::max<int64_t>(held_writes_.BlockBytes(bytes), 1)).RoundUp(kStateAlignment);
  void* block = size.ok() ? std::aligned_alloc(kStateAlignment, static_cast<size_t>(size.value()))
                          : nullptr;
  if (block == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes of session state"));
  }
  std::memset(block, 0, static_cast<size_t>(size.value()));
  if (held_writes_.HasRegions(bytes)) {
    try {
      held_writes_.Add(block);
    } catch (const std::bad_alloc&) {
      std::free(block);
      return absl::ResourceExhaustedError("out of memory registering a session's state");
    }
  }
  return block;
}

void CpuBackend::FreeState(void* block) {
  held_writes_.Remove(block);
  std::free(block);
}

absl::Status CpuBackend::ZeroState(void* block, int64_t bytes) {
  held_writes_.BeforeOverwrite(block, bytes);
  std::memset(block, 0, bytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyState(void* dst, const void* src, int64_t bytes) {
  if (held_writes_.CopyWholeBlock(dst, src, bytes)) return absl::OkStatus();  // a fork
  held_writes_.BeforeRead(src, bytes);
  held_writes_.BeforeOverwrite(dst, bytes);
  std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::StateToHost(void* host_dst, const void* src, int64_t bytes) {
  held_writes_.BeforeRead(src, bytes);
  std::memcpy(host_dst, src, bytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::StateFromHost(void* dst, const void* host_src, int64_t bytes) {
  held_writes_.BeforeOverwrite(dst, bytes);
  std::memcpy(dst, host_src, bytes);
  return absl::OkStatus();
}

void CpuBackend::RunHead(const LayerSpec& spec, const LayerRun& run,
                         const PreparedInputs& in, float* o, int32_t session,
                         int32_t value_head, int64_t first, int64_t count,
                         int64_t group_index, SlotScratch& scratch) {
  const int64_t t0 = run.cu_seqlens[session] + first;
  const int64_t t1 = t0 + count;
  if (t1 == t0) return;
  const int64_t HV = spec.num_value_heads;
  const int64_t K = spec.key_dim, V = spec.value_dim;

  HeadSequence seq;
  seq.num_tokens = static_cast<int32_t>(t1 - t0);
  seq.key_dim = spec.key_dim;
  seq.value_dim = spec.value_dim;
  PrepareHeadInputs(spec, in, value_head, t0, count, &scratch.inputs, &seq);
  seq.o = o + (t0 * HV + value_head) * V;
  seq.o_stride = HV * V;

  HeadRule rule;
  rule.gate = spec.gate_kind();
  rule.delta = spec.delta_rule();
  rule.normalize = spec.normalize;
  rule.normalize_eps = spec.normalize_eps;

  // The layer's state: matrix [HV, K, V] then normalizer [HV, K], in the stored dtype.
  const int64_t matrix_offset = value_head * K * V;
  const int64_t normalizer_offset = HV * K * V + value_head * K;
  void* block = run.states[session];
  float* state;
  float* normalizer = nullptr;
  const bool bf16 = spec.state_dtype == DType::kBFloat16;
  if (bf16) {
    const uint16_t* stored = static_cast<const uint16_t*>(block);
    state = scratch.head_state.data();
    LoadAsFloat(stored + matrix_offset, DType::kBFloat16, state, K * V);
    if (spec.normalize) {
      normalizer = state + K * V;
      LoadAsFloat(stored + normalizer_offset, DType::kBFloat16, normalizer, K);
    }
  } else {
    state = static_cast<float*>(block) + matrix_offset;
    if (spec.normalize) normalizer = static_cast<float*>(block) + normalizer_offset;
    if (run.read_only) {  // a tentative pass works on a copy of the head
      float* copy = scratch.head_state.data();
      std::memcpy(copy, state, K * V * sizeof(float));
      state = copy;
      if (normalizer != nullptr) {
        std::memcpy(copy + K * V, normalizer, K * sizeof(float));
        normalizer = copy + K * V;
      }
    }
  }

  // The delta rule's held write: the session's own where the layer keeps them beside the
  // block, else one in scratch, applied before the state is stored.
  const HeldWrites::Layer layer = held_writes_.ForLayer(run.layer, block);
  HeldWrite write;
  if (layer.held != nullptr && run.read_only) {  // a copy of the session's, to be dropped
    const HeldWrite held = layer.Head(value_head);
    write = {scratch.held.data(), scratch.held.data() + K, held.held};
    if (held.held) {
      std::copy_n(held.k, K, write.k);
      std::copy_n(held.u, V, write.u);
    }
  } else if (layer.held != nullptr) {
    write = layer.Head(value_head);
  } else if (rule.delta) {
    write = {scratch.held.data(), scratch.held.data() + K, false};
  }
  if (run.chunkwise) {
    ChunkState& chunk_state = scratch.chunk_states[group_index];
    if (first == 0) {
      ApplyHeldWrite(spec.key_dim, spec.value_dim, state, &write);
      chunk_state = {state, false};
    }
    RunChunkwise(rule, seq, run.cu_seqlens[session + 1] - t1, &chunk_state, normalizer,
                 &scratch.chunk);
  } else if (run.read_only && bf16) {
    // Steps round a bf16 state after every token: so does a tentative pass, on its copy.
    HeadSequence token = seq;
    token.num_tokens = 1;
    for (int32_t t = 0; t < seq.num_tokens; ++t) {
      RunRecurrent(rule, token, state, normalizer, &write);
      ApplyHeldWrite(spec.key_dim, spec.value_dim, state, &write);
      RoundToBFloat16(state, K * V + (spec.normalize ? K : 0), scratch.rounded.data());
      token.q += seq.q_stride;
      token.k += seq.k_stride;
      token.v += seq.v_stride;
      if (token.g != nullptr) token.g += seq.g_stride;
      if (token.beta != nullptr) token.beta += seq.beta_stride;
      token.o += seq.o_stride;
    }
  } else {
    // Several tokens of a recurrent run (a tentative pass, a commit's replay) run exactly as
    // that many steps: the kernel takes tokens one at a time, and keeps the delta rule's
    // write held between them as the session's region keeps it between steps.
    RunRecurrent(rule, seq, state, normalizer, &write);
    if (layer.held == nullptr && !run.read_only) {
      ApplyHeldWrite(spec.key_dim, spec.value_dim, state, &write);
    }
  }

  if (in.skip_x != nullptr) {  // Mamba-2's D skip: o_t += D[h] * x_t
    const float d = spec.d_skip[value_head];
    const float* x = in.skip_x + (t0 * HV + value_head) * V;
    for (int64_t t = 0; t < seq.num_tokens; ++t) {
      for (int64_t j = 0; j < V; ++j) seq.o[t * seq.o_stride + j] += d * x[t * HV * V + j];
    }
  }

  if (bf16 && !run.read_only) {
    uint16_t* stored = static_cast<uint16_t*>(block);
    StoreFromFloat(state, DType::kBFloat16, stored + matrix_offset, K * V);
    if (spec.normalize) {
      StoreFromFloat(normalizer, DType::kBFloat16, stored + normalizer_offset, K);
    }
  }
}

absl::StatusOr<AsyncCallId> CpuBackend::Run(const LayerSpec& spec, const LayerRun& run) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  const int64_t tokens = run.num_tokens();
  const int64_t HV = spec.num_value_heads;
  const int64_t out_count = tokens * HV * spec.value_dim;
  const bool direct_output = run.output->dtype == LUMEN_DTYPE_FLOAT32;
  // A prefill walks its tokens in slices, except into a bf16 state (see below).
  const bool sliced = run.chunkwise && spec.state_dtype == DType::kFloat32;
  // Everything that allocates happens here, before any state changes, so that running out
  // of memory leaves every session as it was.
  try {
    absl::Status status = PrepareInputs(spec, conv_taps_[run.layer], run, pool_, &prepared_);
    if (!status.ok()) return status;
    if (!direct_output) output_scratch_.resize(out_count);
    int64_t longest = 0;  // tokens of the longest sequence
    for (int32_t i = 0; i < run.num_sessions(); ++i) {
      longest = std::max<int64_t>(longest, run.cu_seqlens[i + 1] - run.cu_seqlens[i]);
    }
    // Tokens one RunHead call takes at most.
    const int64_t head_tokens = sliced ? std::min(longest, kPrefillSliceTokens) : longest;
    for (SlotScratch& scratch : scratch_) {
      ReserveHeadInputs(spec, prepared_, head_tokens, &scratch.inputs);
      if (spec.state_dtype != DType::kFloat32 || run.read_only) {
        scratch.head_state.resize(spec.key_dim * spec.value_dim + spec.key_dim);
      }
      if (spec.state_dtype != DType::kFloat32 && run.read_only) {
        scratch.rounded.resize(spec.key_dim * spec.value_dim + spec.key_dim);
      }
      if (spec.delta_rule()) scratch.held.resize(spec.key_dim + spec.value_dim);
      if (run.chunkwise) {
        ReserveChunkWorkspace(spec.key_dim, spec.value_dim, &scratch.chunk);
        scratch.chunk_states.resize(std::min<int64_t>(HV, kPrefillHeadGroup));
      }
    }
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory preparing a layer call");
  }
  float* o = direct_output ? static_cast<float*>(run.output->o) : output_scratch_.data();

  if (run.chunkwise) {
    // A prefill's heavier, uneven work is shared out as it comes, in groups of neighbouring
    // heads. A group walks its tokens a slice at a time, head by head: the rows it reads and
    // writes (one per token and head, a layer's row apart) then come as runs of adjacent
    // heads' rows, which the caches and prefetchers follow, and the group's states stay in
    // L2 across slices. A bf16 state is rounded at the end of each call, so it takes its
    // tokens in one call, as a step would take them one by one.
    const int64_t group = std::min<int64_t>(HV, kPrefillHeadGroup);
    const int64_t groups = (HV + group - 1) / group;
    pool_.ParallelFor(run.num_sessions() * groups, [&](int64_t task, int32_t slot) {
      const int32_t session = static_cast<int32_t>(task / groups);
      const int64_t first_head = task % groups * group;
      const int64_t last_head = std::min(HV, first_head + group);
      const int64_t tokens = run.cu_seqlens[session + 1] - run.cu_seqlens[session];
      const int64_t slice = sliced ? kPrefillSliceTokens : std::max<int64_t>(tokens, 1);
      for (int64_t first = 0; first < tokens; first += slice) {
        for (int64_t h = first_head; h < last_head; ++h) {
          RunHead(spec, run, prepared_, o, session, static_cast<int32_t>(h), first,
                  std::min(slice, tokens - first), h - first_head, scratch_[slot]);
        }
      }
    });
  } else {
    // A step's heads go to the same thread at every step, so each thread's share of the
    // state stays in its core's cache.
    pool_.ParallelForBlocks(run.num_sessions() * HV, [&](int64_t task, int32_t slot) {
      const int32_t session = static_cast<int32_t>(task / HV);
      RunHead(spec, run, prepared_, o, session, static_cast<int32_t>(task % HV), 0,
              run.cu_seqlens[session + 1] - run.cu_seqlens[session], 0, scratch_[slot]);
    });
  }

  if (run.read_only) {
    ConvertOutput(run, out_count, o);
    return kFinishedCall;
  }

  // Every head of a session that ran tokens now holds its last write (a step), or has
  // applied the one it held (a prefill).
  for (int32_t i = 0; i < run.num_sessions(); ++i) {
    const HeldWrites::Layer layer = held_writes_.ForLayer(run.layer, run.states[i]);
    if (layer.held != nullptr && run.cu_seqlens[i + 1] > run.cu_seqlens[i]) {
      *layer.held = run.chunkwise ? 0 : 1;
    }
  }

  CommitConvWindows(spec, run, prepared_);
  ConvertOutput(run, out_count, o);
  return kFinishedCall;
}

void CpuBackend::ConvertOutput(const LayerRun& run, int64_t out_count, const float* o) {
  if (run.output->dtype == LUMEN_DTYPE_FLOAT32) return;  // written in place
  // A 16-bit output, converted in pieces on every thread.
  const DType dtype = static_cast<DType>(run.output->dtype);
  pool_.ParallelForPieces(out_count, kPassPieceValues, [&](int64_t begin, int64_t size) {
    StoreFromFloat(o + begin, dtype,
                   static_cast<char*>(run.output->o) + begin * DTypeSize(dtype), size);
  });
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(int32_t num_threads) {
  try {
    return std::unique_ptr<Backend>(new CpuBackend(num_threads));
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot start the CPU backend's threads: ", e.what()));
  }
}

}  // namespace lumen::cpu
