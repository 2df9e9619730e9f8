#include "backends/cuda/scratch_plan.h"

#include <algorithm>

#include "backends/cuda/kernels/convert.cuh"

namespace lumen::cuda {

bool IsMamba2(const LayerSpec& spec) { return spec.family == Family::kSsd && spec.gate_raw; }

// For a call of T tokens, a prefill or a step.
ExtrasPlan PlanExtras(const LayerSpec& spec, int64_t T, bool chunkwise) {
  ExtrasPlan plan;
  const bool mamba2 = IsMamba2(spec);
  if (spec.conv_size == 0 && !mamba2) return plan;
  const int64_t values = T * spec.num_value_heads * spec.value_dim * 4;
  ScratchLayout layout;
  plan.q = layout.Add(T * spec.num_heads * spec.key_dim * 4);
  plan.k = layout.Add(T * spec.num_heads * spec.key_dim * 4);
  plan.v = layout.Add(values);
  const bool skip = mamba2 && !spec.d_skip.empty();
  if (skip) plan.x = layout.Add(values);
  if (spec.needs_g_input()) plan.g = layout.Add(T * spec.g_per_token() * 4);
  if (spec.delta_rule()) plan.beta = layout.Add(T * spec.num_value_heads * 4);
  if (skip && !chunkwise) plan.o = layout.Add(values);
  plan.total = layout.total();
  return plan;
}

ExtrasPlan PlanExtras(const LayerSpec& spec, const LayerRun& run) {
  return PlanExtras(spec, run.num_tokens(), run.chunkwise);
}

// The fp32 arrays of `plan` (in `extras`) as the raw inputs of the kernels after it.
RawInputs ExtrasAsInputs(const ExtrasPlan& plan, char* extras) {
  RawInputs inputs;
  inputs.q = At<float>(extras, plan.q);
  inputs.k = At<float>(extras, plan.k);
  inputs.v = At<float>(extras, plan.v);
  inputs.g = At<float>(extras, plan.g);
  inputs.beta = At<float>(extras, plan.beta);
  inputs.dtype = DType::kFloat32;
  return inputs;
}

ConvOutputs ExtrasOutputs(const ExtrasPlan& plan, char* extras) {
  ConvOutputs out;
  out.q = At<float>(extras, plan.q);
  out.k = At<float>(extras, plan.k);
  out.v = At<float>(extras, plan.v);
  out.x = At<float>(extras, plan.x);
  out.g = At<float>(extras, plan.g);
  out.beta = At<float>(extras, plan.beta);
  return out;
}

// g and beta as fp32 into the extras (the convolution pass converts q, k and v).
cudaError_t LaunchGatesToFloats(const LayerSpec& spec, const RawInputs& inputs, int64_t T,
                                const ConvOutputs& out, cudaStream_t stream,
                                bool after_previous) {
  cudaError_t error = cudaSuccess;
  if (out.g != nullptr) {
    error = LaunchToFloats(inputs.g, inputs.dtype, out.g, T * spec.g_per_token(), stream,
                           after_previous);
  }
  if (error == cudaSuccess && out.beta != nullptr) {
    error = LaunchToFloats(inputs.beta, inputs.dtype, out.beta, T * spec.num_value_heads,
                           stream, after_previous);
  }
  return error;
}

int64_t StateCount(const LayerSpec& spec) { return spec.matrix_count() + spec.normalizer_count(); }

int32_t LongestSequence(const LayerRun& run) {
  int32_t longest = 0;
  for (int32_t s = 0; s < run.num_sessions(); ++s) {
    longest = std::max(longest, run.cu_seqlens[s + 1] - run.cu_seqlens[s]);
  }
  return longest;
}

ChunkwiseArgs ChunkwiseShape(const LayerSpec& spec, int32_t num_sequences, int32_t longest) {
  ChunkwiseArgs args{};
  args.num_sequences = num_sequences;
  args.max_seqlen = longest;
  args.num_heads = spec.num_heads;
  args.num_value_heads = spec.num_value_heads;
  args.key_dim = spec.key_dim;
  args.value_dim = spec.value_dim;
  args.decay = spec.gate_kind();
  args.delta_rule = spec.delta_rule();
  args.normalize = spec.normalize;
  args.normalize_eps = spec.normalize_eps;
  return args;
}

// The chunkwise kernel's scratch for `num_sequences` sequences, the longest of `longest`
// tokens.
int64_t ChunkScratchBytes(const LayerSpec& spec, int32_t num_sequences, int32_t longest) {
  return ChunkwiseScratchBytes(SizingArgs(ChunkwiseShape(spec, num_sequences, longest)));
}

PrefillPlan PlanPrefill(const LayerSpec& spec, const PrefillShape& shape) {
  PrefillPlan plan;
  const int64_t n = shape.sessions;
  const bool bf16 = spec.state_dtype == DType::kBFloat16;
  ScratchLayout layout;
  plan.cu_seqlens = 0;
  int64_t table = (n + 1) * 4;
  table = (table + 7) / 8 * 8;
  plan.states = table;
  table += n * 8;
  if (spec.normalize) {
    plan.normalizers = table;
    table += n * 8;
  }
  if (bf16) {
    plan.stored = table;
    table += n * 8;
  }
  plan.tables_bytes = table;
  layout.Add(table);
  const int64_t T = shape.tokens;
  const int64_t qk = T * spec.num_heads * spec.key_dim * 4;
  plan.q = layout.Add(qk);
  plan.k = layout.Add(qk);
  if (shape.input_dtype != DType::kFloat32) {
    plan.v = layout.Add(T * spec.num_value_heads * spec.value_dim * 4);
  }
  if (spec.gate_kind() != GateKind::kNone) {
    const int64_t per_head = spec.gate_kind() == GateKind::kPerChannel ? spec.key_dim : 1;
    plan.log_decay = layout.Add(T * spec.num_value_heads * per_head * 4);
  }
  if (spec.delta_rule()) plan.beta = layout.Add(T * spec.num_value_heads * 4);
  if (shape.output_dtype != DType::kFloat32) {
    plan.o = layout.Add(T * spec.num_value_heads * spec.value_dim * 4);
  }
  if (bf16) plan.wide = layout.Add(n * StateCount(spec) * 4);
  if (shape.chunk_bytes > 0) plan.chunk = layout.Add(shape.chunk_bytes);
  plan.total = layout.total();
  return plan;
}

// The dtype of the inputs the prefill's preparation reads: fp32 after the convolution pass.
DType PreparedInputDtype(const LayerSpec& spec, DType input_dtype) {
  return spec.conv_size > 0 || IsMamba2(spec) ? DType::kFloat32 : input_dtype;
}

PrefillPlan PlanPrefill(const LayerSpec& spec, const LayerRun& run) {
  PrefillShape shape;
  shape.sessions = run.num_sessions();
  shape.tokens = run.num_tokens();
  shape.input_dtype = PreparedInputDtype(spec, static_cast<DType>(run.inputs->dtype));
  shape.output_dtype = static_cast<DType>(run.output->dtype);
  shape.chunk_bytes = ChunkScratchBytes(spec, run.num_sessions(), LongestSequence(run));
  return PlanPrefill(spec, shape);
}

// The chunkwise kernel's most scratch over every number of sequences up to max_sessions, one
// of them holding all max_tokens tokens (its scratch never shrinks as a sequence grows).
int64_t MostChunkScratchBytes(const LayerSpec& spec, int32_t max_sessions,
                              int32_t max_tokens) {
  return MostChunkwiseScratchBytes(SizingArgs(ChunkwiseShape(spec, max_sessions, max_tokens)));
}

// The most scratch (bytes) any call over device buffers of at most `max_sessions` sessions
// and `max_tokens` tokens on layer `spec` takes, prefill or step, in any dtype. Each region
// of the scratch is taken at its largest: a 16-bit input and output (the fp32 copies), all
// sessions (the tables, bf16 states' wide copies), all tokens, and the chunkwise kernel's
// `chunk_bytes` (MostChunkScratchBytes).
int64_t ReservedBytes(const LayerSpec& spec, int32_t max_sessions, int32_t max_tokens,
                      int64_t chunk_bytes) {
  const int32_t step_sessions = std::min(max_sessions, max_tokens);  // a step: one token each
  const int64_t step = PlanExtras(spec, step_sessions, /*chunkwise=*/false).total;
  PrefillShape shape;
  shape.sessions = max_sessions;
  shape.tokens = max_tokens;
  shape.input_dtype = PreparedInputDtype(spec, DType::kBFloat16);
  shape.output_dtype = DType::kBFloat16;
  shape.chunk_bytes = chunk_bytes;
  const int64_t prefill =
      PlanExtras(spec, max_tokens, /*chunkwise=*/true).total + PlanPrefill(spec, shape).total;
  return std::max(step, prefill);
}

}  // namespace lumen::cuda
