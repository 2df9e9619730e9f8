#pragma once
// The CPU kernels of one SIMD level as plain function pointers (kernel_targets.h says how
// each level is built). kernel_dispatch.cc picks the table of the level the CPU runs, once
// per process; the backend calls every kernel through it.

#include <cstdint>

#include "backends/cpu/head_kernels.h"
#include "backends/cpu/kernel_targets.h"
#include "backends/cpu/prepare_inputs.h"
#include "src/dtype_convert.h"
#include "src/input_domain.h"
#include "src/layer_spec.h"

namespace lumen::cpu {

struct KernelTable {
  // RunRecurrent, ApplyHeldWrite (the held write known to be held), RunChunkwise
  // (head_kernels.h; the workspace already reserved).
  void (*run_recurrent)(const HeadRule& rule, const HeadSequence& seq, float* state,
                        float* normalizer, HeldWrite* write);
  void (*apply_held_write)(int32_t key_dim, int32_t value_dim, const HeldWrite& write,
                           float* state);
  void (*run_chunkwise)(const HeadRule& rule, const HeadSequence& seq, int64_t tokens_after,
                        ChunkState* state, float* normalizer, ChunkWorkspace* workspace);
  // The short convolution of channels [c0, c1) of one session (short_conv.cc).
  void (*convolve_channels)(const LayerSpec& spec, const float* weights_by_tap,
                            const float* bias, int64_t C, int64_t c0, int64_t c1,
                            const float* x, int64_t n, float* y, float* window, float* past);
  // FirstOutOfDomain over fp32 values, and over 16-bit values without an fp32 copy.
  int64_t (*scan_for_out_of_domain)(const float* values, int64_t count,
                                    const InputDomain& domain);
  int64_t (*scan_half_for_out_of_domain)(const uint16_t* values, DType dtype, int64_t count,
                                         const InputDomain& domain);
  // PrepareHeadInputs (prepare_inputs.h).
  void (*prepare_head_inputs)(const LayerSpec& spec, const PreparedInputs& in,
                              int32_t value_head, int64_t t0, int64_t count,
                              HeadInputScratch* scratch, HeadSequence* seq);
};

// The kernels of the level the CPU runs (CpuKernelLevel()).
const KernelTable& Kernels();

// The kernels of `level`, or nullptr where this build has no such level (the tests compare
// each level's results with the baseline's). Only levels up to CpuSimdLevel() may be called.
const KernelTable* KernelsAt(KernelLevel level);

// What the kernel sources of the level this file is compiled at define (each file's own
// entry points, named in the table above), and that level's table (kernel_table.cc).
inline namespace LUMEN_KERNEL_NAMESPACE {

void RunRecurrentAtLevel(const HeadRule& rule, const HeadSequence& seq, float* state,
                         float* normalizer, HeldWrite* write);
void ApplyHeldWriteAtLevel(int32_t key_dim, int32_t value_dim, const HeldWrite& write,
                           float* state);
void RunChunkwiseAtLevel(const HeadRule& rule, const HeadSequence& seq, int64_t tokens_after,
                         ChunkState* state, float* normalizer, ChunkWorkspace* workspace);
void ConvolveChannelsAtLevel(const LayerSpec& spec, const float* weights_by_tap,
                             const float* bias, int64_t C, int64_t c0, int64_t c1,
                             const float* x, int64_t n, float* y, float* window, float* past);
int64_t ScanForOutOfDomainAtLevel(const float* values, int64_t count,
                                  const InputDomain& domain);
int64_t ScanHalfForOutOfDomainAtLevel(const uint16_t* values, DType dtype, int64_t count,
                                      const InputDomain& domain);
void PrepareHeadInputsAtLevel(const LayerSpec& spec, const PreparedInputs& in,
                              int32_t value_head, int64_t t0, int64_t count,
                              HeadInputScratch* scratch, HeadSequence* seq);

extern const KernelTable kLevelKernels;

}  // namespace LUMEN_KERNEL_NAMESPACE
}  // namespace lumen::cpu
