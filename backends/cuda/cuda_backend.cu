#include "backends/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/cuda/create_cuda_backend.h"
#include "backends/cuda/kernels/chunkwise.cuh"
#include "backends/cuda/kernels/convert.cuh"
#include "backends/cuda/kernels/prepare_inputs.cuh"
#include "backends/cuda/kernels/recurrent_step.cuh"
#include "src/model.h"
#include "src/status.h"

namespace lumen::cuda {
namespace {

absl::Status CudaError(cudaError_t error, const char* what) {
  return LumenError(LUMEN_ERROR_BACKEND,
                    absl::StrCat(LUMEN_GPU_RUNTIME_NAME " error while ", what, ": ",
                                 cudaGetErrorName(error), " (", cudaGetErrorString(error), ")"));
}

#define LUMEN_CUDA_RETURN_IF_ERROR(call, what)                        \
  do {                                                                \
    if (cudaError_t lumen_error_ = (call); lumen_error_ != cudaSuccess) \
      return CudaError(lumen_error_, what);                           \
  } while (0)

// Whether `stream` is being captured into a graph (work must then not wait or allocate).
bool IsCapturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();  // the legacy stream while another captures: treat it as captured
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

int64_t RoundUp(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// Lays out one call's device scratch: Add reserves a region and returns its offset.
class ScratchLayout {
 public:
  int64_t Add(int64_t bytes) {
    const int64_t offset = total_;
    total_ += RoundUp(bytes);
    return offset;
  }
  int64_t total() const { return total_; }

 private:
  int64_t total_ = 0;
};

}  // namespace

// The CUDA factory; a HIP build has its own (backends/rocm/create_rocm_backend.cu).
#if !defined(__HIP__)
bool CudaDevicePresent(int32_t device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (device < 0 || device >= count) return false;
  cudaDeviceProp properties;
  if (cudaGetDeviceProperties(&properties, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return properties.major >= 8;  // the kernels are built for sm_80 and sm_90
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int32_t device) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return LumenError(LUMEN_ERROR_UNSUPPORTED,
                      absl::StrCat("no CUDA device is usable: ", cudaGetErrorString(error)));
  }
  if (device < 0 || device >= count) {
    return LumenError(LUMEN_ERROR_UNSUPPORTED,
                      absl::StrCat("no CUDA device ", device, ": this machine has ", count));
  }
  if (!CudaDevicePresent(device)) {
    return LumenError(LUMEN_ERROR_UNSUPPORTED,
                      absl::StrCat("CUDA device ", device,
                                   " is older than compute capability 8.0, which lumen's "
                                   "kernels need"));
  }
  auto backend = std::make_unique<CudaBackend>(device);
  if (absl::Status status = backend->Initialize(); !status.ok()) return status;
  return std::unique_ptr<Backend>(std::move(backend));
}
#endif

CudaBackend::CudaBackend(int32_t device) : device_(device), pool_(device) {}

absl::Status CudaBackend::Initialize() {
  LUMEN_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "selecting the device");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&scratch_free_, cudaEventDisableTiming),
                             "creating an event");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&staging_free_, cudaEventDisableTiming),
                             "creating an event");
  return absl::OkStatus();
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  cudaDeviceSynchronize();
  for (auto& [stream, event] : pending_) cudaEventDestroy(event);
  if (scratch_free_ != nullptr) cudaEventDestroy(scratch_free_);
  if (staging_free_ != nullptr) cudaEventDestroy(staging_free_);
  cudaFree(scratch_);
  cudaFreeHost(staging_);
  cudaFree(parameters_);
  cudaGetLastError();
}

absl::Status CudaBackend::UseDevice() {
  LUMEN_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "selecting the device");
  return absl::OkStatus();
}

absl::Status CudaBackend::WaitForLayerCalls() {
  for (auto& [stream, event] : pending_) {
    LUMEN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(event), "running an earlier layer call");
    cudaEventDestroy(event);
  }
  pending_.clear();
  return absl::OkStatus();
}

absl::Status CudaBackend::TrackAsyncWork(cudaStream_t stream) {
  for (auto& [known, event] : pending_) {
    if (known == stream) {
      LUMEN_CUDA_RETURN_IF_ERROR(cudaEventRecord(event, stream), "recording an event");
      return absl::OkStatus();
    }
  }
  cudaEvent_t event = nullptr;
  LUMEN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                             "creating an event");
  pending_.emplace_back(stream, event);
  LUMEN_CUDA_RETURN_IF_ERROR(cudaEventRecord(event, stream), "recording an event");
  return absl::OkStatus();
}

absl::Status CudaBackend::LoadModel(const Model& model) {
  // The short convolution and Mamba-2's dt scaling and D skip (SPEC section 6) have no
  // kernels here yet; refuse them rather than run the layer without them.
  for (int32_t i = 0; i < model.num_layers(); ++i) {
    const LayerSpec& spec = model.layer(i);
    if (spec.conv_size > 0) {
      return LumenError(LUMEN_ERROR_UNSUPPORTED,
                        absl::StrCat("layer ", i, " has a short convolution (conv_size ",
                                     spec.conv_size, "), which the " LUMEN_GPU_BACKEND_NAME
                                     " backend does not run yet: use the CPU backend"));
    }
    if (spec.family == Family::kSsd && spec.gate_raw) {
      return LumenError(LUMEN_ERROR_UNSUPPORTED,
                        absl::StrCat("layer ", i, " is a Mamba-2 layer (ssd with gate_raw), "
                                     "which the " LUMEN_GPU_BACKEND_NAME
                                     " backend does not run yet: use the CPU backend"));
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = UseDevice(); !status.ok()) return status;
  // Every layer's parameters in one device allocation: A_log, dt_bias, log(gamma).
  std::vector<float> host;
  struct Offsets {
    int64_t a_log = -1, dt_bias = -1, log_decay = -1;
  };
  std::vector<Offsets> offsets(model.num_layers());
  for (int32_t i = 0; i < model.num_layers(); ++i) {
    const LayerSpec& spec = model.layer(i);
    if (!spec.a_log.empty()) {
      offsets[i].a_log = static_cast<int64_t>(host.size());
      host.insert(host.end(), spec.a_log.begin(), spec.a_log.end());
    }
    if (!spec.dt_bias.empty()) {
      offsets[i].dt_bias = static_cast<int64_t>(host.size());
      host.insert(host.end(), spec.dt_bias.begin(), spec.dt_bias.end());
    }
    if (spec.family == Family::kRetention) {
      offsets[i].log_decay = static_cast<int64_t>(host.size());
      for (float gamma : spec.decay) host.push_back(std::log(gamma));
    }
  }
  float* device = nullptr;
  if (!host.empty()) {
    const cudaError_t error = cudaMalloc(&parameters_, host.size() * sizeof(float));
    if (error == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return LumenError(LUMEN_ERROR_OUT_OF_MEMORY, "out of device memory for the model's "
                                                   "parameters");
    }
    LUMEN_CUDA_RETURN_IF_ERROR(error, "allocating the model's parameters");
    LUMEN_CUDA_RETURN_IF_ERROR(cudaMemcpy(parameters_, host.data(), host.size() * sizeof(float),
                                          cudaMemcpyHostToDevice),
                               "copying the model's parameters");
    device = static_cast<float*>(parameters_);
  }
  for (int32_t i = 0; i < model.num_layers(); ++i) {
    const LayerSpec& spec = model.layer(i);
    LayerConfig config;
    config.num_heads = spec.num_heads;
    config.num_value_heads = spec.num_value_heads;
    config.key_dim = spec.key_dim;
    config.value_dim = spec.value_dim;
    config.scale = spec.scale;
    config.feature_map = static_cast<int32_t>(spec.feature_map);
    switch (spec.gate_kind()) {
      case GateKind::kNone: config.gate = kGateNone; break;
      case GateKind::kScalar: config.gate = kGateScalar; break;
      case GateKind::kVector: config.gate = kGatePerChannel; break;
    }
    config.qk_l2norm = spec.qk_l2norm;
    config.beta_sigmoid = spec.beta_sigmoid;
    config.gate_raw = spec.gate_raw;
    config.delta_rule = spec.delta_rule();
    config.normalize = spec.normalize;
    config.normalize_eps = spec.normalize_eps;
    if (offsets[i].a_log >= 0) config.a_log = device + offsets[i].a_log;
    if (offsets[i].dt_bias >= 0) {
      config.dt_bias = device + offsets[i].dt_bias;
      config.dt_bias_per_head = static_cast<int32_t>(spec.dt_bias.size()) / spec.num_value_heads;
    }
    if (offsets[i].log_decay >= 0) config.fixed_log_decay = device + offsets[i].log_decay;
    layers_[&spec] = config;
  }
  return absl::OkStatus();
}

absl::StatusOr<void*> CudaBackend::AllocateState(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = UseDevice(); !status.ok()) return status;
  if (absl::Status status = WaitForLayerCalls(); !status.ok()) return status;
  return pool_.Take(bytes);
}

void CudaBackend::FreeState(void* block) {
  std::lock_guard<std::mutex> lock(mutex_);
  pool_.Give(block);  // no device work: the slot is zeroed when it is next needed
}

absl::Status CudaBackend::ZeroState(void* block, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = UseDevice(); !status.ok()) return status;
  if (absl::Status status = WaitForLayerCalls(); !status.ok()) return status;
  LUMEN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(block, 0, bytes, nullptr), "zeroing a state");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr), "zeroing a state");
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyState(void* dst, const void* src, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = UseDevice(); !status.ok()) return status;
  if (absl::Status status = WaitForLayerCalls(); !status.ok()) return status;
  LUMEN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, nullptr), "copying a state");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr), "copying a state");
  return absl::OkStatus();
}

absl::Status CudaBackend::StateToHost(void* host_dst, const void* src, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = UseDevice(); !status.ok()) return status;
  if (absl::Status status = WaitForLayerCalls(); !status.ok()) return status;
  LUMEN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, nullptr),
      "copying a state to the host");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr), "copying a state to the host");
  return absl::OkStatus();
}

absl::Status CudaBackend::StateFromHost(void* dst, const void* host_src, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = UseDevice(); !status.ok()) return status;
  if (absl::Status status = WaitForLayerCalls(); !status.ok()) return status;
  LUMEN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, nullptr),
      "copying a state to the device");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr), "copying a state to the device");
  return absl::OkStatus();
}

absl::Status CudaBackend::EnsureScratch(int64_t bytes, bool capturing) {
  if (bytes <= scratch_bytes_) return absl::OkStatus();
  if (capturing) {
    return LumenError(LUMEN_ERROR_UNSUPPORTED,
                      "this call needs more device scratch than the engine holds, and the "
                      "stream is being captured; run the call once before capturing it");
  }
  LUMEN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(scratch_free_), "waiting for the scratch");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaFree(scratch_), "freeing the scratch");
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  const int64_t size = std::max(bytes, int64_t{1} << 20);
  const cudaError_t error = cudaMalloc(&scratch_, size);
  if (error == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    scratch_ = nullptr;
    return LumenError(LUMEN_ERROR_OUT_OF_MEMORY,
                      absl::StrCat("out of device memory: the call needs ", bytes,
                                   " bytes of scratch"));
  }
  LUMEN_CUDA_RETURN_IF_ERROR(error, "allocating scratch");
  scratch_bytes_ = size;
  return absl::OkStatus();
}

absl::Status CudaBackend::EnsureStaging(int64_t bytes) {
  // The previous call's table copies may still be reading the staging buffer.
  LUMEN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(staging_free_), "waiting for a copy");
  if (bytes <= staging_bytes_) return absl::OkStatus();
  LUMEN_CUDA_RETURN_IF_ERROR(cudaFreeHost(staging_), "freeing pinned memory");
  staging_ = nullptr;
  staging_bytes_ = 0;
  const int64_t size = std::max(bytes, int64_t{64} << 10);
  const cudaError_t error = cudaMallocHost(&staging_, size);
  if (error != cudaSuccess) {
    cudaGetLastError();
    staging_ = nullptr;
    return LumenError(LUMEN_ERROR_OUT_OF_MEMORY,
                      absl::StrCat("cannot allocate ", size, " bytes of pinned host memory"));
  }
  staging_bytes_ = size;
  return absl::OkStatus();
}

absl::Status CudaBackend::RunSteps(const LayerSpec& spec, const LayerRun& run,
                                   const RawInputs& inputs, void* o, cudaStream_t stream) {
  StepArgs args;
  args.layer = layers_.at(&spec);
  args.inputs = inputs;
  args.o = o;
  args.out_dtype = run.output->dtype;
  args.state_bf16 = spec.state_dtype == DType::kBFloat16;
  StepStates states;
  for (int32_t first = 0; first < run.num_sessions(); first += kStepSessionsPerLaunch) {
    args.first_session = first;
    args.num_sessions = std::min(kStepSessionsPerLaunch, run.num_sessions() - first);
    for (int32_t s = 0; s < args.num_sessions; ++s) states.layer_state[s] = run.states[first + s];
    LUMEN_CUDA_RETURN_IF_ERROR(LaunchRecurrentStep(args, states, stream),
                               "launching the step kernel");
  }
  return absl::OkStatus();
}

namespace {

// Where a prefill's arrays sit in its part of the scratch (byte offsets; -1 = not used). The
// device tables come first, laid out as in the pinned staging buffer they are copied from.
struct PrefillPlan {
  int64_t cu_seqlens = -1;   // int32 [N + 1]
  int64_t states = -1;       // float* [N]: the fp32 state of each session (or its wide copy)
  int64_t normalizers = -1;  // float* [N], normalised layers only
  int64_t stored = -1;       // void* [N]: the bf16 states, bf16 layers only
  int64_t tables_bytes = 0;
  int64_t q = -1, k = -1, v = -1, log_decay = -1, beta = -1, o = -1, wide = -1, chunk = -1;
  int64_t total = 0;
};

int64_t StateCount(const LayerSpec& spec) { return spec.matrix_count() + spec.normalizer_count(); }

ChunkwiseArgs ChunkwiseShape(const LayerSpec& spec, const LayerRun& run) {
  ChunkwiseArgs args{};
  args.num_sequences = run.num_sessions();
  int32_t longest = 0;
  for (int32_t s = 0; s < run.num_sessions(); ++s) {
    longest = std::max(longest, run.cu_seqlens[s + 1] - run.cu_seqlens[s]);
  }
  args.max_seqlen = longest;
  args.num_heads = spec.num_heads;
  args.num_value_heads = spec.num_value_heads;
  args.key_dim = spec.key_dim;
  args.value_dim = spec.value_dim;
  switch (spec.gate_kind()) {
    case GateKind::kNone: args.decay = Decay::kNone; break;
    case GateKind::kScalar: args.decay = Decay::kScalar; break;
    case GateKind::kVector: args.decay = Decay::kPerChannel; break;
  }
  args.delta_rule = spec.delta_rule();
  args.normalize = spec.normalize;
  args.normalize_eps = spec.normalize_eps;
  return args;
}

PrefillPlan PlanPrefill(const LayerSpec& spec, const LayerRun& run) {
  PrefillPlan plan;
  const int64_t n = run.num_sessions();
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
  const int64_t T = run.num_tokens();
  const int64_t qk = T * spec.num_heads * spec.key_dim * 4;
  plan.q = layout.Add(qk);
  plan.k = layout.Add(qk);
  if (run.inputs->dtype != LUMEN_DTYPE_FLOAT32) {
    plan.v = layout.Add(T * spec.num_value_heads * spec.value_dim * 4);
  }
  if (spec.gate_kind() != GateKind::kNone) {
    const int64_t per_head = spec.gate_kind() == GateKind::kVector ? spec.key_dim : 1;
    plan.log_decay = layout.Add(T * spec.num_value_heads * per_head * 4);
  }
  if (spec.delta_rule()) plan.beta = layout.Add(T * spec.num_value_heads * 4);
  if (run.output->dtype != LUMEN_DTYPE_FLOAT32) {
    plan.o = layout.Add(T * spec.num_value_heads * spec.value_dim * 4);
  }
  if (bf16) plan.wide = layout.Add(n * StateCount(spec) * 4);
  // ChunkwiseScratchBytes checks the arguments as a launch would, pointers included, and
  // reads only the shapes: point every array the launch will have at a placeholder.
  static float placeholder;
  static float* placeholder_table[1] = {&placeholder};
  static int32_t placeholder_offsets[1];
  ChunkwiseArgs sizing = ChunkwiseShape(spec, run);
  sizing.q = sizing.k = sizing.v = sizing.o = &placeholder;
  if (sizing.decay != Decay::kNone) sizing.log_decay = &placeholder;
  if (sizing.delta_rule) sizing.beta = &placeholder;
  sizing.states = placeholder_table;
  if (sizing.normalize) sizing.normalizers = placeholder_table;
  sizing.cu_seqlens = placeholder_offsets;
  const int64_t chunk_bytes = ChunkwiseScratchBytes(sizing);
  if (chunk_bytes > 0) plan.chunk = layout.Add(chunk_bytes);
  plan.total = layout.total();
  return plan;
}

}  // namespace

int64_t CudaBackend::PrefillScratchBytes(const LayerSpec& spec, const LayerRun& run) const {
  return PlanPrefill(spec, run).total;
}

absl::Status CudaBackend::RunPrefill(const LayerSpec& spec, const LayerRun& run,
                                     const RawInputs& inputs, void* o, char* scratch,
                                     cudaStream_t stream) {
  const PrefillPlan plan = PlanPrefill(spec, run);
  const int32_t n = run.num_sessions();
  const int64_t count = StateCount(spec);

  // The device tables, through pinned memory.
  if (absl::Status status = EnsureStaging(plan.tables_bytes); !status.ok()) return status;
  char* staging = static_cast<char*>(staging_);
  std::memcpy(staging + plan.cu_seqlens, run.cu_seqlens.data(), (n + 1) * sizeof(int32_t));
  float** states = reinterpret_cast<float**>(staging + plan.states);
  for (int32_t s = 0; s < n; ++s) {
    states[s] = plan.wide >= 0 ? reinterpret_cast<float*>(scratch + plan.wide) + s * count
                               : static_cast<float*>(run.states[s]);
  }
  if (plan.normalizers >= 0) {
    float** normalizers = reinterpret_cast<float**>(staging + plan.normalizers);
    for (int32_t s = 0; s < n; ++s) normalizers[s] = states[s] + spec.matrix_count();
  }
  if (plan.stored >= 0) {
    void** stored = reinterpret_cast<void**>(staging + plan.stored);
    for (int32_t s = 0; s < n; ++s) stored[s] = run.states[s];
  }
  LUMEN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(scratch, staging, plan.tables_bytes,
                                             cudaMemcpyHostToDevice, stream),
                             "copying a prefill's tables");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaEventRecord(staging_free_, stream), "recording an event");
  const int32_t* device_cu_seqlens = reinterpret_cast<const int32_t*>(scratch + plan.cu_seqlens);

  const bool bf16 = spec.state_dtype == DType::kBFloat16;
  const LayerConfig& layer = layers_.at(&spec);
  PreparedInputs prepared;
  prepared.q = reinterpret_cast<float*>(scratch + plan.q);
  prepared.k = reinterpret_cast<float*>(scratch + plan.k);
  if (plan.v >= 0) prepared.v = reinterpret_cast<float*>(scratch + plan.v);
  if (plan.log_decay >= 0) prepared.log_decay = reinterpret_cast<float*>(scratch + plan.log_decay);
  if (plan.beta >= 0) prepared.beta = reinterpret_cast<float*>(scratch + plan.beta);
  LUMEN_CUDA_RETURN_IF_ERROR(
      LaunchPrepareInputs(layer, inputs, run.num_tokens(), prepared, stream),
      "launching the input preparation");
  if (bf16) {
    LUMEN_CUDA_RETURN_IF_ERROR(
        LaunchWidenStates(reinterpret_cast<const void* const*>(scratch + plan.stored),
                          reinterpret_cast<float* const*>(scratch + plan.states), count, n,
                          stream),
        "widening bf16 states");
  }
  ChunkwiseArgs args = ChunkwiseShape(spec, run);
  args.q = prepared.q;
  args.k = prepared.k;
  args.v = plan.v >= 0 ? prepared.v : static_cast<const float*>(inputs.v);
  args.log_decay = prepared.log_decay;
  args.beta = prepared.beta;
  float* o_fp32 = plan.o >= 0 ? reinterpret_cast<float*>(scratch + plan.o) : static_cast<float*>(o);
  args.o = o_fp32;
  args.states = reinterpret_cast<float* const*>(scratch + plan.states);
  args.normalizers =
      plan.normalizers >= 0 ? reinterpret_cast<float* const*>(scratch + plan.normalizers) : nullptr;
  args.cu_seqlens = device_cu_seqlens;
  LUMEN_CUDA_RETURN_IF_ERROR(
      LaunchChunkwise(args, plan.chunk >= 0 ? scratch + plan.chunk : nullptr, stream),
      "launching the chunkwise prefill");
  if (bf16) {
    LUMEN_CUDA_RETURN_IF_ERROR(
        LaunchNarrowStates(reinterpret_cast<const float* const*>(scratch + plan.states),
                           reinterpret_cast<void* const*>(scratch + plan.stored), count, n,
                           stream),
        "rounding bf16 states");
  }
  if (plan.o >= 0) {
    LUMEN_CUDA_RETURN_IF_ERROR(LaunchStoreFloats(o_fp32, o, run.output->dtype,
                                                 run.num_tokens() * spec.num_value_heads *
                                                     spec.value_dim,
                                                 stream),
                               "converting the output");
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Run(const LayerSpec& spec, const LayerRun& run) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = UseDevice(); !status.ok()) return status;
  const lumen_layer_inputs& in = *run.inputs;
  const lumen_layer_output& out = *run.output;
  cudaStream_t stream = static_cast<cudaStream_t>(in.stream);
  const bool host_inputs = in.memory == LUMEN_MEMORY_HOST;
  const bool host_output = out.memory == LUMEN_MEMORY_HOST;
  const bool capturing = IsCapturing(stream);
  const int64_t T = run.num_tokens();
  const int64_t in_size = DTypeSize(static_cast<DType>(in.dtype));
  const int64_t out_size = DTypeSize(static_cast<DType>(out.dtype));
  const int64_t qk_bytes = T * spec.num_heads * spec.key_dim * in_size;
  const int64_t v_bytes = T * spec.num_value_heads * spec.value_dim * in_size;
  const int64_t g_bytes = T * spec.g_per_token() * in_size;
  const int64_t beta_bytes = spec.delta_rule() ? T * spec.num_value_heads * in_size : 0;
  const int64_t o_count = T * spec.num_value_heads * spec.value_dim;
  if (run.chunkwise && capturing) {
    return LumenError(LUMEN_ERROR_UNSUPPORTED,
                      "a prefill cannot be captured in a CUDA graph (it copies its tables "
                      "through pinned memory); capture steps");
  }

  // Scratch: host inputs and output copied through the device, and the prefill's arrays.
  ScratchLayout layout;
  int64_t q_at = -1, k_at = -1, v_at = -1, g_at = -1, beta_at = -1, o_at = -1;
  if (host_inputs) {
    q_at = layout.Add(qk_bytes);
    k_at = layout.Add(qk_bytes);
    v_at = layout.Add(v_bytes);
    if (g_bytes > 0) g_at = layout.Add(g_bytes);
    if (beta_bytes > 0) beta_at = layout.Add(beta_bytes);
  }
  if (host_output) o_at = layout.Add(o_count * out_size);
  const int64_t host_io_bytes = layout.total();
  const int64_t prefill_bytes = run.chunkwise ? PrefillScratchBytes(spec, run) : 0;
  const bool uses_scratch = host_io_bytes + prefill_bytes > 0;
  if (uses_scratch) {
    if (absl::Status s = EnsureScratch(host_io_bytes + prefill_bytes, capturing); !s.ok()) {
      return s;
    }
    // An earlier asynchronous call on another stream may still be reading the scratch.
    if (!capturing) {
      LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, scratch_free_, 0),
                                 "ordering the scratch");
    }
  }
  char* scratch = static_cast<char*>(scratch_);

  RawInputs inputs;
  inputs.dtype = in.dtype;
  if (host_inputs) {
    struct Copy {
      const void* src;
      int64_t at, bytes;
      const void** dst;
    } copies[] = {{in.q, q_at, qk_bytes, &inputs.q},
                  {in.k, k_at, qk_bytes, &inputs.k},
                  {in.v, v_at, v_bytes, &inputs.v},
                  {in.g, g_at, g_bytes, &inputs.g},
                  {in.beta, beta_at, beta_bytes, &inputs.beta}};
    for (const Copy& copy : copies) {
      if (copy.at < 0) continue;
      LUMEN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(scratch + copy.at, copy.src, copy.bytes,
                                                 cudaMemcpyHostToDevice, stream),
                                 "copying inputs to the device");
      *copy.dst = scratch + copy.at;
    }
  } else {
    inputs.q = in.q;
    inputs.k = in.k;
    inputs.v = in.v;
    inputs.g = in.g;
    inputs.beta = in.beta;
  }
  void* o = host_output ? scratch + o_at : out.o;

  absl::Status status = run.chunkwise
                            ? RunPrefill(spec, run, inputs, o, scratch + host_io_bytes, stream)
                            : RunSteps(spec, run, inputs, o, stream);
  if (!status.ok()) return status;

  if (host_output) {
    LUMEN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.o, o, o_count * out_size,
                                               cudaMemcpyDeviceToHost, stream),
                               "copying the output to the host");
  }
  if (host_inputs || host_output) {
    LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "running the layer call");
    return absl::OkStatus();
  }
  if (capturing) return absl::OkStatus();
  if (uses_scratch) {
    LUMEN_CUDA_RETURN_IF_ERROR(cudaEventRecord(scratch_free_, stream), "recording an event");
  }
  return TrackAsyncWork(stream);
}

}  // namespace lumen::cuda
