#include "backends/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/cuda/create_cuda_backend.h"
#include "backends/cuda/kernels/chunkwise.cuh"
#include "backends/cuda/kernels/convert.cuh"
#include "backends/cuda/kernels/prefill_tables.cuh"
#include "backends/cuda/kernels/prepare_inputs.cuh"
#include "backends/cuda/kernels/recurrent_step.cuh"
#include "src/input_domain.h"
#include "src/input_domain_error.h"
#include "src/model.h"
#include "src/session.h"
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

// Set in the id of a call made while its stream was captured: replays of it run later, in an
// order the engine does not know.
constexpr uint64_t kCapturedCall = uint64_t{1} << 63;
// Asynchronous calls between two copies of the input check's record (AdvanceProbe): few
// enough that the pending list stays small, many enough that the copy costs nothing.
constexpr size_t kProbeInterval = 64;

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
  int major = 0;
  LUMEN_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_),
      "reading the device's compute capability");
  dependent_launch_ = LUMEN_GPU_NVIDIA_PATHS && major >= 9;  // the portable paths never overlap
  int shared_bytes = 0;
  LUMEN_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, device_),
      "reading the device's multiprocessor count");
  LUMEN_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&shared_bytes, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device_),
      "reading the device's shared memory per multiprocessor");
  shared_bytes_per_multiprocessor_ = shared_bytes;
  LUMEN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&scratch_free_, cudaEventDisableTiming),
                             "creating an event");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaMalloc(&input_error_, sizeof(InputErrorRecord)),
                             "allocating the input check's record");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaMallocHost(&probe_copy_, sizeof(InputErrorRecord)),
                             "allocating the record's host copy");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&probe_stream_, cudaStreamNonBlocking),
                             "creating a stream");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&probe_done_, cudaEventDisableTiming),
                             "creating an event");
  LUMEN_CUDA_RETURN_IF_ERROR(ClearInputErrorRecord(input_error_, nullptr),
                             "clearing the input check's record");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr), "clearing the input check's record");
  return absl::OkStatus();
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  cudaDeviceSynchronize();
  for (auto& [stream, event] : pending_) cudaEventDestroy(event);
  if (scratch_free_ != nullptr) cudaEventDestroy(scratch_free_);
  if (probe_done_ != nullptr) cudaEventDestroy(probe_done_);
  if (probe_stream_ != nullptr) cudaStreamDestroy(probe_stream_);
  if (probe_copy_ != nullptr) cudaFreeHost(probe_copy_);
  cudaFree(scratch_);
  for (void* retired : retired_scratch_) cudaFree(retired);
  cudaFree(parameters_);
  cudaFree(input_error_);
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
  if (probe_through_ != 0) {
    // Its copy may land after the record is emptied below: let it land first.
    LUMEN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(probe_done_), "copying the record");
    probe_through_ = 0;
  }
  if (!unread_input_checks_ && !captured_input_checks_) {
    SettlePendingCalls(0);  // nothing checked since the last report: nothing failed
    return absl::OkStatus();
  }
  // Graph replays are not tracked: the device may still be running one.
  if (captured_input_checks_) {
    LUMEN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), "running an earlier layer call");
  }
  unread_input_checks_ = false;
  uint64_t failed_call = 0;
  absl::Status status = TakeInputError(/*earlier=*/true, &failed_call);
  SettlePendingCalls(failed_call);
  if (failed_call == 0) return status;
  return absl::InvalidArgumentError(absl::StrCat(
      status.message(),
      (failed_call & kCapturedCall) != 0
          ? " (the failing call was replayed from a graph: no token count was changed)"
          : " (the sessions' token counts no longer include those calls' tokens)"));
}

void CudaBackend::SettlePendingCalls(uint64_t failed_call) {
  if (failed_call != 0 && (failed_call & kCapturedCall) == 0) {
    for (const PendingCall& call : pending_calls_) {
      if (call.id < failed_call) continue;
      for (const auto& [counts, tokens] : call.tokens) counts->Add(call.layer, -tokens);
    }
  }
  pending_calls_.clear();
}

void CudaBackend::AdvanceProbe() {
  if (probe_through_ != 0) {
    const cudaError_t landed = cudaEventQuery(probe_done_);
    if (landed == cudaErrorNotReady) return;
    if (landed == cudaSuccess && probe_copy_->error == kNoInputError) {
      while (!pending_calls_.empty() && pending_calls_.front().id <= probe_through_) {
        pending_calls_.pop_front();
      }
    }
    // A failed copy or a recorded error: the calls stay listed for the next report.
    if (landed != cudaSuccess) cudaGetLastError();
    probe_through_ = 0;
  }
  if (pending_calls_.size() < kProbeInterval) return;
  bool enqueued = true;
  for (auto& [stream, event] : pending_) {
    enqueued = enqueued && cudaStreamWaitEvent(probe_stream_, event, 0) == cudaSuccess;
  }
  enqueued = enqueued &&
             cudaMemcpyAsync(probe_copy_, input_error_, sizeof(InputErrorRecord),
                             cudaMemcpyDeviceToHost, probe_stream_) == cudaSuccess &&
             cudaEventRecord(probe_done_, probe_stream_) == cudaSuccess;
  if (!enqueued) {
    cudaGetLastError();  // try again after the next call
    return;
  }
  probe_through_ = pending_calls_.back().id;
}

absl::Status CudaBackend::TakeInputError(bool earlier, uint64_t* failed_call) {
  *failed_call = 0;
  InputErrorRecord record;
  LUMEN_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(&record, input_error_, sizeof(record), cudaMemcpyDeviceToHost),
      "reading the input check's record");
  if (record.error == kNoInputError) return absl::OkStatus();
  *failed_call = record.call;
  LUMEN_CUDA_RETURN_IF_ERROR(ClearInputErrorRecord(input_error_, nullptr),
                             "clearing the input check's record");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr), "clearing the input check's record");
  static constexpr const char* kTensors[] = {"q", "k", "g", "v", "beta"};
  static constexpr InputDomain kDomains[] = {kFiniteValues, kLogGateValues, kUnitValues};
  const absl::Status status = InputOutOfDomain(
      kTensors[record.error >> kInputIndexBits], kDomains[record.domain], record.value,
      static_cast<int64_t>(record.error & ((1ull << kInputIndexBits) - 1)), record.heads,
      record.per_head, record.session, record.session_token, record.num_sessions);
  if (!earlier) return status;
  return absl::InvalidArgumentError(absl::StrCat(
      "a layer call on device buffers enqueued before this call failed its input check (",
      status.message(), "); the layer calls enqueued after it until this report changed "
      "nothing either, and this call did nothing"));
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
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = UseDevice(); !status.ok()) return status;
  // Every layer's parameters in one device allocation: A_log, dt_bias, log(gamma), the
  // convolution's weights and biases, D.
  std::vector<float> host;
  struct Offsets {
    int64_t a_log = -1, dt_bias = -1, log_decay = -1, d_skip = -1;
    int64_t conv_weight[kConvParts] = {-1, -1, -1}, conv_bias[kConvParts] = {-1, -1, -1};
  };
  auto append = [&host](const std::vector<float>& values) {
    const int64_t at = static_cast<int64_t>(host.size());
    host.insert(host.end(), values.begin(), values.end());
    return values.empty() ? int64_t{-1} : at;
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
    for (int32_t part = 0; part < kConvParts; ++part) {
      offsets[i].conv_weight[part] = append(spec.conv_weight[part]);
      offsets[i].conv_bias[part] = append(spec.conv_bias[part]);
    }
    offsets[i].d_skip = append(spec.d_skip);
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
    const bool mamba2 = spec.family == Family::kSsd && spec.gate_raw;
    if (spec.conv_size == 0 && !mamba2) continue;
    ConvLayer conv;
    conv.width = spec.conv_size;
    conv.silu = spec.conv_activation == ConvActivation::kSilu;
    for (int32_t part = 0; part < kConvParts; ++part) {
      conv.channels[part] = spec.conv_channels(part);
      conv.window_offset[part] = spec.conv_offset(part);
      if (offsets[i].conv_weight[part] >= 0) {
        conv.weight[part] = device + offsets[i].conv_weight[part];
      }
      if (offsets[i].conv_bias[part] >= 0) conv.bias[part] = device + offsets[i].conv_bias[part];
    }
    conv.mamba2 = mamba2;
    if (mamba2 && offsets[i].d_skip >= 0) conv.d_skip = device + offsets[i].d_skip;
    conv_layers_[&spec] = conv;
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
    return LumenError(
        LUMEN_ERROR_UNSUPPORTED,
        absl::StrCat("this call needs ", bytes, " bytes of device scratch, the engine holds ",
                     scratch_bytes_.load(), ", and growing it cannot be captured: reserve "
                     "the scratch for the largest call first (lumen_engine_reserve)"));
  }
  LUMEN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(scratch_free_), "waiting for the scratch");
  if (scratch_captured_) {
    // Graphs captured with the old buffer may be replayed: it lives as long as the engine.
    if (scratch_ != nullptr) retired_scratch_.push_back(scratch_);
    scratch_captured_ = false;
  } else {
    LUMEN_CUDA_RETURN_IF_ERROR(cudaFree(scratch_), "freeing the scratch");
  }
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

namespace {

bool IsMamba2(const LayerSpec& spec) { return spec.family == Family::kSsd && spec.gate_raw; }

// Where the convolution and Mamba-2 passes put their results in their part of the scratch
// (byte offsets; -1 = not used): the fp32 inputs the other kernels read instead of the raw
// ones and, for a step with D, the fp32 output the skip is added to.
struct ExtrasPlan {
  int64_t q = -1, k = -1, v = -1, x = -1, g = -1, beta = -1, o = -1;
  int64_t total = 0;
};

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

template <typename T>
T* At(char* base, int64_t offset) {
  return offset >= 0 ? reinterpret_cast<T*>(base + offset) : nullptr;
}

// The fp32 arrays of `plan` (in `extras`) as the raw inputs of the kernels after it.
RawInputs ExtrasAsInputs(const ExtrasPlan& plan, char* extras) {
  RawInputs inputs;
  inputs.q = At<float>(extras, plan.q);
  inputs.k = At<float>(extras, plan.k);
  inputs.v = At<float>(extras, plan.v);
  inputs.g = At<float>(extras, plan.g);
  inputs.beta = At<float>(extras, plan.beta);
  inputs.dtype = kFloat32;
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
                                const ConvOutputs& out, cudaStream_t stream) {
  cudaError_t error = cudaSuccess;
  if (out.g != nullptr) {
    error = LaunchToFloats(inputs.g, inputs.dtype, out.g, T * spec.g_per_token(), stream);
  }
  if (error == cudaSuccess && out.beta != nullptr) {
    error = LaunchToFloats(inputs.beta, inputs.dtype, out.beta, T * spec.num_value_heads,
                           stream);
  }
  return error;
}

}  // namespace

absl::Status CudaBackend::RunSteps(const LayerSpec& spec, const LayerRun& run,
                                   const RawInputs& inputs, void* o, char* extras,
                                   cudaStream_t stream) {
  const LayerConfig& layer = layers_.at(&spec);
  const int32_t n = run.num_sessions();
  if (run.check_values) {
    LUMEN_CUDA_RETURN_IF_ERROR(LaunchCheckInputs(layer, inputs, n, n, nullptr, true, false,
                                                 input_error_, stream),
                               "launching the input check");
  }
  const auto conv = conv_layers_.find(&spec);
  const bool has_extras = conv != conv_layers_.end();
  const ExtrasPlan plan = PlanExtras(spec, run);
  const ConvOutputs prepared = ExtrasOutputs(plan, extras);
  ConvCall call;
  call.num_sessions = n;
  call.num_tokens = n;
  call.max_seqlen = 1;
  call.state_bf16 = spec.state_dtype == DType::kBFloat16;
  if (has_extras) {
    LUMEN_CUDA_RETURN_IF_ERROR(LaunchGatesToFloats(spec, inputs, n, prepared, stream),
                               "launching the input conversion");
  }

  StepArgs args;
  args.layer = layer;
  args.inputs = has_extras ? ExtrasAsInputs(plan, extras) : inputs;
  float* o32 = At<float>(extras, plan.o);  // Mamba-2 with D: the skip is added afterwards
  args.o = o32 != nullptr ? o32 : o;
  args.out_dtype = o32 != nullptr ? kFloat32 : run.output->dtype;
  args.state_bf16 = call.state_bf16;
  args.input_error = input_error_;
  args.multiprocessors = multiprocessors_;
  args.shared_bytes_per_multiprocessor = shared_bytes_per_multiprocessor_;
  SessionStates states;
  for (int32_t first = 0; first < n; first += kStepSessionsPerLaunch) {
    args.first_session = first;
    args.num_sessions = std::min(kStepSessionsPerLaunch, n - first);
    for (int32_t s = 0; s < args.num_sessions; ++s) {
      states.values.layer_state[s] = run.states[first + s];
    }
    states.first = first;
    if (has_extras) {
      LUMEN_CUDA_RETURN_IF_ERROR(LaunchConvInputs(layer, conv->second, inputs, call, states,
                                                  args.num_sessions, prepared, stream),
                                 "launching the convolution");
    }
    // Only the first launch comes right after the check (sm_90 only: see StepArgs).
    args.follows_check = dependent_launch_ && run.check_values && !has_extras && first == 0;
    LUMEN_CUDA_RETURN_IF_ERROR(LaunchRecurrentStep(args, states.values, stream),
                               "launching the step kernel");
  }
  if (o32 != nullptr) {
    LUMEN_CUDA_RETURN_IF_ERROR(
        LaunchFinishOutput(o32, prepared.x, conv->second.d_skip, spec.num_value_heads,
                           spec.value_dim, o, run.output->dtype,
                           int64_t{n} * spec.num_value_heads * spec.value_dim, input_error_,
                           stream),
        "launching the output pass");
  }
  if (has_extras && spec.conv_size > 1) {
    for (int32_t first = 0; first < n; first += kStepSessionsPerLaunch) {
      const int32_t count = std::min(kStepSessionsPerLaunch, n - first);
      for (int32_t s = 0; s < count; ++s) states.values.layer_state[s] = run.states[first + s];
      states.first = first;
      LUMEN_CUDA_RETURN_IF_ERROR(LaunchCommitWindows(conv->second, inputs, call, states, count,
                                                     input_error_, stream),
                                 "launching the window update");
    }
  }
  return absl::OkStatus();
}

namespace {

// Where a prefill's arrays sit in its part of the scratch (byte offsets; -1 = not used). The
// device tables come first (written by LaunchWritePrefillTables).
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

// The chunkwise kernel's scratch for `num_sequences` sequences, the longest of `longest`
// tokens.
int64_t ChunkScratchBytes(const LayerSpec& spec, int32_t num_sequences, int32_t longest) {
  return ChunkwiseScratchBytes(SizingArgs(ChunkwiseShape(spec, num_sequences, longest)));
}

// What a prefill's scratch depends on.
struct PrefillShape {
  int64_t sessions = 0;
  int64_t tokens = 0;
  int32_t input_dtype = LUMEN_DTYPE_FLOAT32;  // what the preparation reads: fp32 after a conv
  int32_t output_dtype = LUMEN_DTYPE_FLOAT32;
  int64_t chunk_bytes = 0;  // ChunkScratchBytes
};

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
  if (shape.input_dtype != LUMEN_DTYPE_FLOAT32) {
    plan.v = layout.Add(T * spec.num_value_heads * spec.value_dim * 4);
  }
  if (spec.gate_kind() != GateKind::kNone) {
    const int64_t per_head = spec.gate_kind() == GateKind::kVector ? spec.key_dim : 1;
    plan.log_decay = layout.Add(T * spec.num_value_heads * per_head * 4);
  }
  if (spec.delta_rule()) plan.beta = layout.Add(T * spec.num_value_heads * 4);
  if (shape.output_dtype != LUMEN_DTYPE_FLOAT32) {
    plan.o = layout.Add(T * spec.num_value_heads * spec.value_dim * 4);
  }
  if (bf16) plan.wide = layout.Add(n * StateCount(spec) * 4);
  if (shape.chunk_bytes > 0) plan.chunk = layout.Add(shape.chunk_bytes);
  plan.total = layout.total();
  return plan;
}

// The dtype of the inputs the prefill's preparation reads: fp32 after the convolution pass.
int32_t PreparedInputDtype(const LayerSpec& spec, int32_t input_dtype) {
  return spec.conv_size > 0 || IsMamba2(spec) ? LUMEN_DTYPE_FLOAT32 : input_dtype;
}

PrefillPlan PlanPrefill(const LayerSpec& spec, const LayerRun& run) {
  PrefillShape shape;
  shape.sessions = run.num_sessions();
  shape.tokens = run.num_tokens();
  shape.input_dtype = PreparedInputDtype(spec, run.inputs->dtype);
  shape.output_dtype = run.output->dtype;
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
  shape.input_dtype = PreparedInputDtype(spec, LUMEN_DTYPE_BFLOAT16);
  shape.output_dtype = LUMEN_DTYPE_BFLOAT16;
  shape.chunk_bytes = chunk_bytes;
  const int64_t prefill =
      PlanExtras(spec, max_tokens, /*chunkwise=*/true).total + PlanPrefill(spec, shape).total;
  return std::max(step, prefill);
}

}  // namespace

absl::Status CudaBackend::RunPrefill(const LayerSpec& spec, const LayerRun& run,
                                     const RawInputs& inputs, void* o, char* extras,
                                     char* scratch, cudaStream_t stream) {
  const PrefillPlan plan = PlanPrefill(spec, run);
  const int32_t n = run.num_sessions();
  const int64_t count = StateCount(spec);
  const int64_t T = run.num_tokens();

  // The device tables.
  PrefillTables tables;
  tables.cu_seqlens = reinterpret_cast<int32_t*>(scratch + plan.cu_seqlens);
  tables.states = reinterpret_cast<float**>(scratch + plan.states);
  if (plan.normalizers >= 0) tables.normalizers = reinterpret_cast<float**>(scratch + plan.normalizers);
  if (plan.stored >= 0) tables.stored = reinterpret_cast<void**>(scratch + plan.stored);
  if (plan.wide >= 0) tables.wide = reinterpret_cast<float*>(scratch + plan.wide);
  tables.count = count;
  tables.matrix_count = spec.matrix_count();
  LUMEN_CUDA_RETURN_IF_ERROR(LaunchWritePrefillTables(tables, run.states, run.cu_seqlens, stream),
                             "writing a prefill's tables");
  int32_t* device_cu_seqlens = tables.cu_seqlens;
  // Each session's layer state as stored (the fp32 table holds the blocks themselves).
  void* const* layer_states =
      reinterpret_cast<void* const*>(scratch + (plan.stored >= 0 ? plan.stored : plan.states));

  // The check, which also holds a failing call's sequences at length 0 (or an earlier failing
  // call's), so that nothing below changes a state.
  const LayerConfig& layer = layers_.at(&spec);
  LUMEN_CUDA_RETURN_IF_ERROR(LaunchCheckInputs(layer, inputs, T, n, device_cu_seqlens,
                                               run.check_values, true, input_error_, stream),
                             "launching the input check");

  const auto conv = conv_layers_.find(&spec);
  const bool has_extras = conv != conv_layers_.end();
  const ExtrasPlan extras_plan = PlanExtras(spec, run);
  const ConvOutputs converted = ExtrasOutputs(extras_plan, extras);
  ConvCall call;
  call.num_sessions = n;
  call.num_tokens = T;
  call.cu_seqlens = device_cu_seqlens;
  call.state_bf16 = spec.state_dtype == DType::kBFloat16;
  for (int32_t s = 0; s < n; ++s) {
    call.max_seqlen = std::max(call.max_seqlen, run.cu_seqlens[s + 1] - run.cu_seqlens[s]);
  }
  SessionStates session_states;
  session_states.table = layer_states;
  RawInputs raw = inputs;
  if (has_extras) {
    LUMEN_CUDA_RETURN_IF_ERROR(LaunchGatesToFloats(spec, inputs, T, converted, stream),
                               "launching the input conversion");
    LUMEN_CUDA_RETURN_IF_ERROR(LaunchConvInputs(layer, conv->second, inputs, call,
                                                session_states, n, converted, stream),
                               "launching the convolution");
    raw = ExtrasAsInputs(extras_plan, extras);
  }

  const bool bf16 = spec.state_dtype == DType::kBFloat16;
  PreparedInputs prepared;
  prepared.q = reinterpret_cast<float*>(scratch + plan.q);
  prepared.k = reinterpret_cast<float*>(scratch + plan.k);
  if (plan.v >= 0) prepared.v = reinterpret_cast<float*>(scratch + plan.v);
  if (plan.log_decay >= 0) prepared.log_decay = reinterpret_cast<float*>(scratch + plan.log_decay);
  if (plan.beta >= 0) prepared.beta = reinterpret_cast<float*>(scratch + plan.beta);
  LUMEN_CUDA_RETURN_IF_ERROR(LaunchPrepareInputs(layer, raw, T, prepared, stream),
                             "launching the input preparation");
  if (bf16) {
    LUMEN_CUDA_RETURN_IF_ERROR(
        LaunchWidenStates(reinterpret_cast<const void* const*>(scratch + plan.stored),
                          reinterpret_cast<float* const*>(scratch + plan.states), count, n,
                          stream),
        "widening bf16 states");
  }
  ChunkwiseArgs args = ChunkwiseShape(spec, n, LongestSequence(run));
  args.q = prepared.q;
  args.k = prepared.k;
  args.v = plan.v >= 0 ? prepared.v : static_cast<const float*>(raw.v);
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
  const float* d_skip = has_extras ? conv->second.d_skip : nullptr;
  if (plan.o >= 0 || d_skip != nullptr) {
    LUMEN_CUDA_RETURN_IF_ERROR(
        LaunchFinishOutput(o_fp32, d_skip != nullptr ? converted.x : nullptr, d_skip,
                           spec.num_value_heads, spec.value_dim, o, run.output->dtype,
                           T * spec.num_value_heads * spec.value_dim, input_error_, stream),
        "launching the output pass");
  }
  if (has_extras && spec.conv_size > 1) {
    LUMEN_CUDA_RETURN_IF_ERROR(LaunchCommitWindows(conv->second, inputs, call, session_states,
                                                   n, input_error_, stream),
                               "launching the window update");
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
  // A call that synchronises reports its own input error: report an earlier one first.
  if ((host_inputs || host_output) && (unread_input_checks_ || captured_input_checks_)) {
    if (absl::Status status = WaitForLayerCalls(); !status.ok()) return status;
  }

  // Scratch: host inputs and output copied through the device, the convolution's results and
  // the prefill's arrays.
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
  const int64_t extras_bytes = PlanExtras(spec, run).total;
  const int64_t prefill_bytes =
      run.chunkwise ? PlanPrefill(spec, run).total : 0;
  const int64_t scratch_bytes = host_io_bytes + extras_bytes + prefill_bytes;
  const bool uses_scratch = scratch_bytes > 0;
  if (uses_scratch) {
    if (absl::Status s = EnsureScratch(scratch_bytes, capturing); !s.ok()) {
      return s;
    }
    if (capturing) scratch_captured_ = true;
    // An earlier asynchronous call on another stream may still be reading the scratch.
    if (!capturing) {
      LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, scratch_free_, 0),
                                 "ordering the scratch");
    }
  }
  char* scratch = static_cast<char*>(scratch_);

  RawInputs inputs;
  inputs.dtype = in.dtype;
  const uint64_t call = next_call_++ | (capturing ? kCapturedCall : 0);
  inputs.call = call;
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

  char* extras = scratch + host_io_bytes;
  absl::Status status =
      run.chunkwise ? RunPrefill(spec, run, inputs, o, extras, extras + extras_bytes, stream)
                    : RunSteps(spec, run, inputs, o, extras, stream);
  if (!status.ok()) return status;

  if (host_inputs || host_output) {
    LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "running the layer call");
    // A failing call changed no state; its output is not copied back either.
    if (run.check_values) {
      uint64_t failed_call = 0;
      if (absl::Status input = TakeInputError(/*earlier=*/false, &failed_call); !input.ok()) {
        return input;
      }
    }
    if (host_output) {
      LUMEN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.o, o, o_count * out_size,
                                                 cudaMemcpyDeviceToHost, stream),
                                 "copying the output to the host");
      LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "copying the output");
    }
    return absl::OkStatus();
  }
  if (run.check_values) {
    unread_input_checks_ = true;
    if (capturing) captured_input_checks_ = true;
  }
  if (capturing) return absl::OkStatus();
  if (uses_scratch) {
    LUMEN_CUDA_RETURN_IF_ERROR(cudaEventRecord(scratch_free_, stream), "recording an event");
  }
  if (absl::Status tracked = TrackAsyncWork(stream); !tracked.ok()) return tracked;
  // The engine adds the tokens once this returns: remember them until the check is read.
  PendingCall pending;
  pending.id = call;
  pending.layer = run.layer;
  for (int32_t s = 0; s < run.num_sessions(); ++s) {
    const int64_t tokens = run.cu_seqlens[s + 1] - run.cu_seqlens[s];
    if (tokens > 0) pending.tokens.emplace_back(run.sessions[s]->token_counts(), tokens);
  }
  pending_calls_.push_back(std::move(pending));
  AdvanceProbe();
  return absl::OkStatus();
}

absl::Status CudaBackend::Reserve(const Model& model, int32_t max_sessions,
                                  int32_t max_tokens) {
  int64_t bytes = 0;
  for (int32_t layer = 0; layer < model.num_layers(); ++layer) {
    const LayerSpec& spec = model.layer(layer);
    bytes = std::max(bytes, ReservedBytes(spec, max_sessions, max_tokens,
                                          MostChunkScratchBytes(spec, max_sessions, max_tokens)));
  }
  if (bytes == 0) return absl::OkStatus();  // no layer call of this model uses scratch
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = UseDevice(); !status.ok()) return status;
  return EnsureScratch(bytes, /*capturing=*/false);
}

}  // namespace lumen::cuda
