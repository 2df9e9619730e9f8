#pragma once
// The CPU backend: state in host memory, head kernels run on a thread pool across
// sessions x value heads.

#include <memory>
#include <mutex>
#include <vector>

#include "backends/cpu/head_kernels.h"
#include "backends/cpu/held_writes.h"
#include "backends/cpu/prepare_inputs.h"
#include "src/backend.h"
#include "src/thread_pool.h"

namespace lumen::cpu {

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(int32_t num_threads);

  absl::Status LoadModel(const Model& model) override;

  lumen_backend kind() const override { return LUMEN_BACKEND_CPU; }
  int32_t num_threads() const override { return pool_.num_threads(); }
  bool Accepts(lumen_memory memory) const override { return memory == LUMEN_MEMORY_HOST; }

  absl::StatusOr<void*> AllocateState(int64_t bytes) override;
  void FreeState(void* block) override;
  absl::Status ZeroState(void* block, int64_t bytes) override;
  absl::Status CopyState(void* dst, const void* src, int64_t bytes) override;
  absl::Status StateToHost(void* host_dst, const void* src, int64_t bytes) override;
  absl::Status StateFromHost(void* dst, const void* host_src, int64_t bytes) override;

  absl::StatusOr<AsyncCallId> Run(const LayerSpec& spec, const LayerRun& run) override;

 private:
  // Scratch owned by one pool slot.
  struct SlotScratch {
    ChunkWorkspace chunk;
    std::vector<float> head_state;  // [K * V + K] fp32 copy of a head stored as bf16, or
                                    // the working copy of a tentative pass
    std::vector<uint16_t> rounded;  // [K * V + K] a tentative pass's bf16 rounding
    std::vector<ChunkState> chunk_states;  // [group] a prefill group's heads' states
    std::vector<float> held;        // [K + V] a delta-rule write where the layer holds none
    HeadInputScratch inputs;        // one head's rows that PrepareInputs left to the heads
  };

  // Runs one value head of one session over `count` of its tokens from its token `first`.
  // A prefill's head carries its state from slice to slice in
  // scratch.chunk_states[group_index].
  void RunHead(const LayerSpec& spec, const LayerRun& run, const PreparedInputs& in,
               float* o, int32_t session, int32_t value_head, int64_t first, int64_t count,
               int64_t group_index, SlotScratch& scratch);

  // Writes the fp32 output `o` (output_scratch_) into a 16-bit caller output; nothing for
  // an fp32 one, written in place.
  void ConvertOutput(const LayerRun& run, int64_t out_count, const float* o);

  ThreadPool pool_;
  HeldWrites held_writes_;  // the delta rule's writes held beside each session's block
  std::vector<ConvTaps> conv_taps_;  // per layer: its convolution weights, tap-major
  std::mutex run_mutex_;  // one layer call at a time owns the pool and the scratch
  std::vector<SlotScratch> scratch_;  // [pool_.num_threads()]
  PreparedInputs prepared_;
  std::vector<float> output_scratch_;  // fp32 output when the caller wants 16-bit
};

}  // namespace lumen::cpu
