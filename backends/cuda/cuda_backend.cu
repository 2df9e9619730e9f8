#include "backends/cuda/cuda_backend.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/cuda/create_cuda_backend.h"
#include "backends/cuda/runtime_status.h"
#include "backends/cuda/scratch_plan.h"
#include "src/model.h"

namespace lumen::cuda {

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
  RelaxedCaptureMode relaxed;  // another thread may be capturing a graph meanwhile
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
  LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&state_stream_, cudaStreamNonBlocking),
                             "creating a stream");
  pool_.set_stream(state_stream_);
  LUMEN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&probe_done_, cudaEventDisableTiming),
                             "creating an event");
  LUMEN_CUDA_RETURN_IF_ERROR(ClearInputErrorRecord(input_error_, state_stream_),
                             "clearing the input check's record");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(state_stream_),
                             "clearing the input check's record");
  return absl::OkStatus();
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  RelaxedCaptureMode relaxed;
  // The engine's own work only: the caller's graph replays are theirs to finish first.
  for (auto& [stream, event] : pending_) {
    cudaEventSynchronize(event);
    cudaEventDestroy(event);
  }
  if (probe_done_ != nullptr) cudaEventSynchronize(probe_done_);
  if (state_stream_ != nullptr) cudaStreamSynchronize(state_stream_);
  if (scratch_free_ != nullptr) cudaEventDestroy(scratch_free_);
  if (probe_done_ != nullptr) cudaEventDestroy(probe_done_);
  if (probe_stream_ != nullptr) cudaStreamDestroy(probe_stream_);
  if (state_stream_ != nullptr) cudaStreamDestroy(state_stream_);
  if (probe_copy_ != nullptr) cudaFreeHost(probe_copy_);
  if (staging_ != nullptr) cudaFreeHost(staging_);
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
    RelaxedCaptureMode relaxed;
    const cudaError_t error = cudaMalloc(&parameters_, host.size() * sizeof(float));
    if (error == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return LumenError(LUMEN_ERROR_OUT_OF_MEMORY, "out of device memory for the model's "
                                                   "parameters");
    }
    LUMEN_CUDA_RETURN_IF_ERROR(error, "allocating the model's parameters");
    LUMEN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(parameters_, host.data(),
                                               host.size() * sizeof(float),
                                               cudaMemcpyHostToDevice, state_stream_),
                               "copying the model's parameters");
    LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(state_stream_),
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
    config.feature_map = spec.feature_map;
    config.gate = spec.gate_kind();
    config.qk_l2norm = spec.qk_l2norm;
    config.beta_sigmoid = spec.beta_sigmoid;
    config.allow_neg_eigval = spec.allow_neg_eigval;
    config.beta_logit_scale = spec.allow_neg_eigval ? 2.0f : 1.0f;
    config.gate_raw = spec.gate_raw;
    config.gate_lower_bound = spec.gate_lower_bound;
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
  RelaxedCaptureMode relaxed;  // another thread may be capturing a graph meanwhile
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
  RelaxedCaptureMode relaxed;  // another thread may be capturing a graph meanwhile
  if (absl::Status status = WaitForLayerCalls(); !status.ok()) return status;
  LUMEN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(block, 0, bytes, state_stream_), "zeroing a state");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(state_stream_), "zeroing a state");
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyState(void* dst, const void* src, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = UseDevice(); !status.ok()) return status;
  RelaxedCaptureMode relaxed;  // another thread may be capturing a graph meanwhile
  if (absl::Status status = WaitForLayerCalls(); !status.ok()) return status;
  LUMEN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, state_stream_),
      "copying a state");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(state_stream_), "copying a state");
  return absl::OkStatus();
}

absl::Status CudaBackend::StateToHost(void* host_dst, const void* src, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = UseDevice(); !status.ok()) return status;
  RelaxedCaptureMode relaxed;  // another thread may be capturing a graph meanwhile
  if (absl::Status status = WaitForLayerCalls(); !status.ok()) return status;
  LUMEN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, state_stream_),
      "copying a state to the host");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(state_stream_),
                             "copying a state to the host");
  return absl::OkStatus();
}

absl::Status CudaBackend::StateFromHost(void* dst, const void* host_src, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = UseDevice(); !status.ok()) return status;
  RelaxedCaptureMode relaxed;  // another thread may be capturing a graph meanwhile
  if (absl::Status status = WaitForLayerCalls(); !status.ok()) return status;
  LUMEN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, state_stream_),
      "copying a state to the device");
  LUMEN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(state_stream_),
                             "copying a state to the device");
  return absl::OkStatus();
}

absl::StatusOr<void*> CudaBackend::AllocateBuffer(lumen_memory memory, int64_t bytes) {
  if (memory != LUMEN_MEMORY_DEVICE) return Backend::AllocateBuffer(memory, bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = UseDevice(); !status.ok()) return status;
  RelaxedCaptureMode relaxed;
  void* buffer = nullptr;
  LUMEN_CUDA_RETURN_IF_ERROR(cudaMalloc(&buffer, static_cast<size_t>(std::max<int64_t>(bytes, 1))),
                             "allocating a session's kept inputs");
  return buffer;
}

void CudaBackend::FreeBuffer(lumen_memory memory, void* buffer) {
  if (memory != LUMEN_MEMORY_DEVICE) return Backend::FreeBuffer(memory, buffer);
  if (buffer == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!UseDevice().ok()) return;
  RelaxedCaptureMode relaxed;
  // Copies and replays reading the buffer run on the caller's streams: wait for all of the
  // device's work before the memory can go (a failure surfaces in the next call).
  cudaDeviceSynchronize();
  cudaFree(buffer);
}

absl::Status CudaBackend::CopyBuffer(lumen_memory memory, void* dst, const void* src,
                                     int64_t bytes, void* stream) {
  if (memory != LUMEN_MEMORY_DEVICE) return Backend::CopyBuffer(memory, dst, src, bytes, stream);
  if (bytes == 0) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status status = UseDevice(); !status.ok()) return status;
  LUMEN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                             cudaMemcpyDeviceToDevice,
                                             static_cast<cudaStream_t>(stream)),
                             "copying a session's kept inputs");
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
  RelaxedCaptureMode relaxed;  // another thread may be capturing a graph meanwhile
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

absl::Status CudaBackend::EnsureStaging(int64_t bytes) {
  if (bytes <= staging_bytes_) return absl::OkStatus();
  // At least 64 KiB (a one-token step of any usual layer) and doubling, so that a stream of
  // growing prefills allocates a few times, not on every call.
  const int64_t size = std::max({bytes, int64_t{64} << 10, 2 * staging_bytes_});
  RelaxedCaptureMode relaxed;  // another thread may be capturing a graph meanwhile
  if (staging_ != nullptr) {
    LUMEN_CUDA_RETURN_IF_ERROR(cudaFreeHost(staging_), "freeing the host staging");
  }
  staging_ = nullptr;
  staging_bytes_ = 0;
  const cudaError_t error = cudaMallocHost(&staging_, size);
  if (error == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    staging_ = nullptr;
    return LumenError(LUMEN_ERROR_OUT_OF_MEMORY,
                      absl::StrCat("out of pinned host memory: a call with host buffers needs ",
                                   bytes, " bytes of staging"));
  }
  LUMEN_CUDA_RETURN_IF_ERROR(error, "allocating the host staging");
  staging_bytes_ = size;
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
