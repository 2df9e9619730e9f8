// The convolution passes. A thread owns one channel of one session and a run of its tokens;
// the channels of the three parts (q, k, v) follow each other along grid x, chunks of tokens
// along y, sessions along z. Reads of neighbouring channels are neighbouring addresses.

#include "backends/cuda/kernels/short_conv.cuh"

#include <algorithm>

namespace lumen::cuda {
namespace {

constexpr int kThreads = 128;
static_assert(kThreads % kMaxWarpSize == 0, "blocks of whole warps on every target");
constexpr int32_t kChunkTokens = 64;
constexpr int32_t kMaxGridYZ = 65535;

struct PartOf {
  int32_t part;
  int64_t channel;
};

__device__ __forceinline__ PartOf Locate(const ConvLayer& conv, int64_t index) {
  if (index < conv.channels[0]) return {0, index};
  index -= conv.channels[0];
  if (index < conv.channels[1]) return {1, index};
  return {2, index - conv.channels[1]};
}

__device__ __forceinline__ const void* RawPart(const RawInputs& in, int32_t part) {
  return part == 0 ? in.q : part == 1 ? in.k : in.v;
}

__device__ __forceinline__ void* StateOf(const SessionStates& states, int32_t session) {
  return states.table != nullptr ? states.table[session]
                                 : states.values.layer_state[session - states.first];
}

// The channels of q, k and v together: a pass runs one thread per channel and session.
__host__ __device__ __forceinline__ int64_t AllChannels(const ConvLayer& conv) {
  return conv.channels[0] + conv.channels[1] + conv.channels[2];
}

// What one thread of a pass works on: channel c of part `part` (C channels), in session
// `session`, whose tokens are [first, first + length).
struct ChannelTask {
  int32_t part;
  int64_t C, c;
  int32_t session;
  int64_t first, length;
};

// Locates this thread's channel by its index along grid x and its session by blockIdx.z;
// false past the last channel, where the thread has nothing to do.
__device__ __forceinline__ bool LocateTask(const ConvLayer& conv, const ConvCall& call,
                                           const SessionStates& states, ChannelTask* task) {
  const int64_t index = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (index >= AllChannels(conv)) return false;
  const PartOf at = Locate(conv, index);
  task->part = at.part;
  task->C = conv.channels[at.part];
  task->c = at.channel;
  task->session = states.first + static_cast<int32_t>(blockIdx.z);
  if (call.cu_seqlens == nullptr) {
    task->first = task->session;
    task->length = 1;
  } else {
    task->first = call.cu_seqlens[task->session];
    task->length = call.cu_seqlens[task->session + 1] - task->first;
  }
  return true;
}

// Where the window of `part` starts in a session's state, in the state dtype.
__device__ __forceinline__ char* WindowOf(const ConvLayer& conv, const ConvCall& call,
                                          const SessionStates& states, int32_t session,
                                          int32_t part) {
  return static_cast<char*>(StateOf(states, session)) +
         conv.window_offset[part] * (call.state_bf16 ? 2 : 4);
}

// One thread's channel of one session over its run of tokens.
__device__ __forceinline__ void ConvolveChannel(const LayerConfig& layer, const ConvLayer& conv,
                                                const RawInputs& in, const ConvCall& call,
                                                const SessionStates& states,
                                                const ConvOutputs& out, int32_t chunk_tokens,
                                                const ChannelTask& task) {
  const auto [part, C, c, session, first, length] = task;
  const int64_t begin = int64_t{blockIdx.y} * chunk_tokens;
  const int64_t end = min(length, begin + chunk_tokens);
  const void* raw = RawPart(in, part);
  float* dst = part == 0 ? out.q : part == 1 ? out.k : out.v;
  const int32_t W = conv.width;
  const DType state_dtype = call.state_bf16 ? DType::kBFloat16 : DType::kFloat32;
  const void* window = W > 0 ? WindowOf(conv, call, states, session, part) : nullptr;
  const float* weight = W > 0 ? conv.weight[part] + c * W : nullptr;
  const float bias = W > 0 && conv.bias[part] != nullptr ? conv.bias[part][c] : 0.0f;
  const int32_t HV = layer.num_value_heads;
  for (int64_t i = begin; i < end; ++i) {
    float y;
    if (W == 0) {
      y = LoadElement(raw, (first + i) * C + c, in.dtype);
    } else {
      // Token i reads e[i .. i + W - 1] of e = window ++ tokens (window: e[0 .. W - 2]).
      y = bias;
      for (int32_t j = 0; j < W; ++j) {
        const int64_t e = i + j - (W - 1);  // < 0: inside the window
        const float value = e < 0 ? LoadElement(window, c * (W - 1) + (W - 1) + e, state_dtype)
                                  : LoadElement(raw, (first + e) * C + c, in.dtype);
        y += weight[j] * value;
      }
      if (conv.silu) y = y / (1.0f + expf(-y));
    }
    const int64_t at_token = (first + i) * C + c;
    if (part == 2 && conv.mamba2) {
      const int32_t hv = static_cast<int32_t>(c / layer.value_dim);
      const float raw_g = LoadElement(in.g, (first + i) * HV + hv, in.dtype);
      const float dt = Softplus(raw_g + layer.dt_bias[int64_t{hv} * layer.dt_bias_per_head]);
      if (out.x != nullptr) out.x[at_token] = y;
      y *= dt;
    }
    dst[at_token] = y;
  }
}

__global__ void __launch_bounds__(kThreads)
ConvInputsKernel(const LayerConfig layer, const ConvLayer conv, const RawInputs in,
                 const ConvCall call, const SessionStates states, const ConvOutputs out,
                 int32_t chunk_tokens) {
  // Reads the raw inputs and the windows, which the kernels of this call before it do not
  // write: as a dependent launch it runs beside them, and waits only before it exits.
  AllowDependentLaunch();
  ChannelTask task;
  if (LocateTask(conv, call, states, &task)) {
    ConvolveChannel(layer, conv, in, call, states, out, chunk_tokens, task);
  }
  WaitForPrerequisiteGrids();
}

__global__ void __launch_bounds__(kThreads)
CommitWindowsKernel(const ConvLayer conv, const RawInputs in, const ConvCall call,
                    const SessionStates states, const InputErrorRecord* record) {
  WaitForPrerequisiteGrids();  // the check's record, and the convolution's reads of the windows
  if (InputFailed(record)) return;
  ChannelTask task;
  if (!LocateTask(conv, call, states, &task)) return;
  const auto [part, C, c, session, first, length] = task;
  const int32_t W = conv.width;
  const DType state_dtype = call.state_bf16 ? DType::kBFloat16 : DType::kFloat32;
  void* window = WindowOf(conv, call, states, session, part);
  const void* raw = RawPart(in, part);
  // In place, ascending j: entry j takes e[length + j], at or after j, so it is read before
  // anything overwrites it.
  for (int32_t j = 0; j < W - 1; ++j) {
    const int64_t e = length + j;
    const float value = e < W - 1 ? LoadElement(window, c * (W - 1) + e, state_dtype)
                                  : LoadElement(raw, (first + e - (W - 1)) * C + c, in.dtype);
    StoreElement(window, c * (W - 1) + j, state_dtype, value);
  }
}

}  // namespace

cudaError_t LaunchConvInputs(const LayerConfig& layer, const ConvLayer& conv,
                             const RawInputs& inputs, const ConvCall& call,
                             const SessionStates& states, int32_t count,
                             const ConvOutputs& out, cudaStream_t stream,
                             bool after_previous) {
  if (count == 0 || call.num_tokens == 0) return cudaSuccess;
  const int64_t longest = call.cu_seqlens == nullptr ? 1 : call.max_seqlen;
  int64_t chunk_tokens = kChunkTokens;
  int64_t chunks = (longest + chunk_tokens - 1) / chunk_tokens;
  if (chunks > kMaxGridYZ) {
    chunk_tokens = (longest + kMaxGridYZ - 1) / kMaxGridYZ;
    chunks = (longest + chunk_tokens - 1) / chunk_tokens;
  }
  const uint32_t blocks = static_cast<uint32_t>((AllChannels(conv) + kThreads - 1) / kThreads);
  SessionStates group = states;
  for (int32_t done = 0; done < count; done += kMaxGridYZ) {
    group.first = states.first + done;
    const dim3 grid(blocks, static_cast<uint32_t>(std::max<int64_t>(chunks, 1)),
                    static_cast<uint32_t>(std::min(count - done, kMaxGridYZ)));
    if (cudaError_t e = LaunchKernel(ConvInputsKernel, grid, dim3(kThreads), 0, after_previous,
                                     stream, layer, conv, inputs, call, group, out,
                                     static_cast<int32_t>(chunk_tokens));
        e != cudaSuccess) {
      return e;
    }
    if (states.table == nullptr) break;  // by value: one launch's sessions only
  }
  return cudaSuccess;
}

cudaError_t LaunchCommitWindows(const ConvLayer& conv, const RawInputs& inputs,
                                const ConvCall& call, const SessionStates& states,
                                int32_t count, const InputErrorRecord* record,
                                cudaStream_t stream, bool after_previous) {
  if (conv.width <= 1 || count == 0) return cudaSuccess;
  const uint32_t blocks = static_cast<uint32_t>((AllChannels(conv) + kThreads - 1) / kThreads);
  SessionStates group = states;
  for (int32_t done = 0; done < count; done += kMaxGridYZ) {
    group.first = states.first + done;
    const dim3 grid(blocks, 1, static_cast<uint32_t>(std::min(count - done, kMaxGridYZ)));
    if (cudaError_t e = LaunchKernel(CommitWindowsKernel, grid, dim3(kThreads), 0,
                                     after_previous, stream, conv, inputs, call, group, record);
        e != cudaSuccess) {
      return e;
    }
    if (states.table == nullptr) break;
  }
  return cudaSuccess;
}

}  // namespace lumen::cuda
