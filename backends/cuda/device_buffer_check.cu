#include "backends/cuda/device_buffer_check.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/runtime_status.h"
#include "src/dtype_convert.h"
#include "src/status.h"

#if !defined(__HIP__)
// The driver API's types only: its calls are found at run time through the runtime
// (cudaGetDriverEntryPoint), so the library does not link libcuda.
#include <cuda.h>
#endif

namespace lumen::cuda {
namespace {

enum class MemoryKind { kUnknown, kDevice, kManaged, kHost, kOther };

// What the driver says of one pointer.
struct PointerFacts {
  MemoryKind kind = MemoryKind::kUnknown;
  int device = -1;           // where device memory lives
  uintptr_t base = 0;        // the allocation around the pointer
  uint64_t size = 0;         // 0: the driver gave no range
  // A range reserved for virtual memory management, in which the allocation is one mapped
  // piece; size 0 where there is none (cudaMalloc's own memory, HIP).
  uintptr_t reserved_base = 0;
  uint64_t reserved_size = 0;
  bool has_buffer_id = false;
  unsigned long long buffer_id = 0;
  uintptr_t device_pointer = 0;  // where the engine's device sees host memory; 0: nowhere
  bool reachable_from_engine = false;  // device memory of another GPU: peer access granted
};

#if !defined(__HIP__)

// The driver's pointer queries, found once per process.
struct DriverCalls {
  CUresult (*get_attributes)(unsigned, CUpointer_attribute*, void**, CUdeviceptr) = nullptr;
  CUresult (*get_attribute)(void*, CUpointer_attribute, CUdeviceptr) = nullptr;
  CUresult (*get_address_range)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
  bool found() const {
    return get_attributes != nullptr && get_attribute != nullptr && get_address_range != nullptr;
  }
};

void* DriverEntryPoint(const char* name) {
  void* function = nullptr;
#if CUDART_VERSION >= 12000
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  // 12.0's ABI of each call (cuMemGetAddressRange's _v2, with size_t sizes).
  const cudaError_t error =
      cudaGetDriverEntryPointByVersion(name, &function, 12000, cudaEnableDefault, &found);
#else
  const cudaError_t error = cudaGetDriverEntryPoint(name, &function, cudaEnableDefault, &found);
#endif
  const bool ok = error == cudaSuccess && found == cudaDriverEntryPointSuccess;
#else  // CUDA 11.3 to 11.8
  const cudaError_t error = cudaGetDriverEntryPoint(name, &function, cudaEnableDefault);
  const bool ok = error == cudaSuccess;
#endif
  if (!ok || function == nullptr) {
    cudaGetLastError();
    return nullptr;
  }
  return function;
}

const DriverCalls& Driver() {
  static const DriverCalls calls = [] {
    DriverCalls found;
    found.get_attributes = reinterpret_cast<decltype(found.get_attributes)>(
        DriverEntryPoint("cuPointerGetAttributes"));
    found.get_attribute = reinterpret_cast<decltype(found.get_attribute)>(
        DriverEntryPoint("cuPointerGetAttribute"));
    found.get_address_range = reinterpret_cast<decltype(found.get_address_range)>(
        DriverEntryPoint("cuMemGetAddressRange"));
    return found;
  }();
  return calls;
}

// CUresult and cudaError_t give the errors a pointer query can meet the same numbers.
absl::Status DriverError(CUresult result, const char* what) {
  return CudaError(static_cast<cudaError_t>(result), what);
}

absl::Status DescribePointer(const void* pointer, PointerFacts* facts) {
  const DriverCalls& driver = Driver();
  const auto address = reinterpret_cast<CUdeviceptr>(pointer);
  unsigned int memory_type = 0;
  int device = -1;
  // A bool by the documentation; zeroed and read whole, it is right for any width up to 4.
  unsigned int is_managed = 0;
  unsigned int legacy = 0;  // cudaMalloc's own memory (legacy IPC capable), as is_managed
  unsigned long long buffer_id = 0;
  CUdeviceptr range_start = 0, device_pointer = 0;
  size_t range_size = 0;
  CUpointer_attribute attributes[] = {
      CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
      CU_POINTER_ATTRIBUTE_IS_MANAGED,       CU_POINTER_ATTRIBUTE_BUFFER_ID,
      CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
      CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
  void* data[] = {&memory_type, &device,     &is_managed, &buffer_id,
                  &range_start, &range_size, &legacy};
  // Memory the driver does not know gets zeros and CUDA_SUCCESS, not an error.
  if (CUresult result = driver.get_attributes(7, attributes, data, address);
      result != CUDA_SUCCESS) {
    return DriverError(result, "asking the driver about a buffer");
  }
  if (memory_type == 0 && is_managed == 0) return absl::OkStatus();  // kUnknown
  facts->kind = is_managed != 0                       ? MemoryKind::kManaged
                : memory_type == CU_MEMORYTYPE_DEVICE ? MemoryKind::kDevice
                : memory_type == CU_MEMORYTYPE_HOST   ? MemoryKind::kHost
                                                      : MemoryKind::kOther;
  facts->device = device;
  facts->has_buffer_id = buffer_id != 0;
  facts->buffer_id = buffer_id;
  // The mapped region where there is one (a range reserved with cuMemAddressReserve may be
  // larger than what is mapped in it), else the range the attributes gave.
  CUdeviceptr mapped_base = 0;
  size_t mapped_size = 0;
  if (driver.get_address_range(&mapped_base, &mapped_size, address) == CUDA_SUCCESS &&
      mapped_size > 0) {
    facts->base = static_cast<uintptr_t>(mapped_base);
    facts->size = mapped_size;
    // A reserved range larger than the piece: other pieces may be mapped beside it. Never
    // for cudaMalloc's memory, whose neighbours are other allocations.
    if (legacy == 0 && range_size > mapped_size) {
      facts->reserved_base = static_cast<uintptr_t>(range_start);
      facts->reserved_size = range_size;
    }
  } else {
    facts->base = static_cast<uintptr_t>(range_start);
    facts->size = range_size;
  }
  if (facts->kind == MemoryKind::kHost &&
      driver.get_attribute(&device_pointer, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, address) ==
          CUDA_SUCCESS) {
    facts->device_pointer = static_cast<uintptr_t>(device_pointer);
  }
  // The access the current context (the engine's device) has: granted by peer access.
  unsigned int access = 0;
  facts->reachable_from_engine =
      driver.get_attribute(&access, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, address) ==
          CUDA_SUCCESS &&
      access == CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
  return absl::OkStatus();
}

// The mapped allocation around `at`: false where none is.
bool MappedPiece(uintptr_t at, uintptr_t* base, uint64_t* size) {
  CUdeviceptr piece_base = 0;
  size_t piece_size = 0;
  if (Driver().get_address_range(&piece_base, &piece_size, static_cast<CUdeviceptr>(at)) !=
      CUDA_SUCCESS) {
    return false;
  }
  *base = static_cast<uintptr_t>(piece_base);
  *size = piece_size;
  return piece_size > 0;
}

bool SameBuffer(const void* pointer, unsigned long long buffer_id) {
  unsigned long long now = 0;
  return Driver().get_attribute(&now, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                reinterpret_cast<CUdeviceptr>(pointer)) == CUDA_SUCCESS &&
         now == buffer_id;
}

absl::Status FindPointerQueries() {
  if (Driver().found()) return absl::OkStatus();
  return LumenError(LUMEN_ERROR_BACKEND,
                    "the CUDA driver lacks cuPointerGetAttributes, cuPointerGetAttribute or "
                    "cuMemGetAddressRange, which the device buffer check needs (an engine "
                    "option, skip_device_buffer_check, turns the check off)");
}

#else  // HIP 5.2: the runtime's pointer queries, loaded with it (hip_runtime_loader.cc)

absl::Status DescribePointer(const void* pointer, PointerFacts* facts) {
  hipPointerAttribute_t attributes;
  if (hipPointerGetAttributes(&attributes, pointer) != hipSuccess) {
    hipGetLastError();  // hipErrorInvalidValue: memory HIP does not know
    return absl::OkStatus();
  }
  facts->kind = attributes.isManaged != 0                         ? MemoryKind::kManaged
                : attributes.memoryType == hipMemoryTypeDevice ? MemoryKind::kDevice
                : attributes.memoryType == hipMemoryTypeHost   ? MemoryKind::kHost
                                                               : MemoryKind::kOther;
  facts->device = attributes.device;
  facts->device_pointer = reinterpret_cast<uintptr_t>(attributes.devicePointer);
  void* base = nullptr;
  size_t size = 0;
  if (hipMemGetAddressRange(&base, &size, const_cast<void*>(pointer)) == hipSuccess) {
    facts->base = reinterpret_cast<uintptr_t>(base);
    facts->size = size;
  } else {
    hipGetLastError();
  }
  unsigned long long buffer_id = 0;
  if (hipPointerGetAttribute(&buffer_id, HIP_POINTER_ATTRIBUTE_BUFFER_ID,
                             const_cast<void*>(pointer)) == hipSuccess) {
    facts->has_buffer_id = buffer_id != 0;
    facts->buffer_id = buffer_id;
  } else {
    hipGetLastError();  // without an id the allocation is not remembered
  }
  unsigned int access = 0;
  if (hipPointerGetAttribute(&access, HIP_POINTER_ATTRIBUTE_ACCESS_FLAGS,
                             const_cast<void*>(pointer)) == hipSuccess) {
    facts->reachable_from_engine = access == 3;  // read and write, as CUDA's flag
  } else {
    hipGetLastError();
  }
  return absl::OkStatus();
}

bool MappedPiece(uintptr_t at, uintptr_t* base, uint64_t* size) {
  void* piece_base = nullptr;
  size_t piece_size = 0;
  if (hipMemGetAddressRange(&piece_base, &piece_size, reinterpret_cast<void*>(at)) !=
      hipSuccess) {
    hipGetLastError();
    return false;
  }
  *base = reinterpret_cast<uintptr_t>(piece_base);
  *size = piece_size;
  return piece_size > 0;
}

bool SameBuffer(const void* pointer, unsigned long long buffer_id) {
  unsigned long long now = 0;
  if (hipPointerGetAttribute(&now, HIP_POINTER_ATTRIBUTE_BUFFER_ID,
                             const_cast<void*>(pointer)) != hipSuccess) {
    hipGetLastError();
    return false;
  }
  return now == buffer_id;
}

absl::Status FindPointerQueries() { return absl::OkStatus(); }

#endif

// Whether [begin, begin + bytes) is mapped throughout by allocations that follow one another
// without a gap, as virtual memory management maps pieces into one reserved range (PyTorch's
// expandable segments): the driver reports each piece as an allocation of its own.
bool MappedThroughout(uintptr_t begin, uint64_t bytes) {
  constexpr int kMostPieces = 4096;
  const uintptr_t end = begin + bytes;
  uintptr_t at = begin;
  for (int piece = 0; piece < kMostPieces && at < end; ++piece) {
    uintptr_t base = 0;
    uint64_t size = 0;
    if (!MappedPiece(at, &base, &size)) return false;
    at = base + size;
  }
  return at >= end;
}

std::string KindName(const PointerFacts& facts) {
  switch (facts.kind) {
    case MemoryKind::kDevice:
      return absl::StrCat("device memory of GPU ", facts.device);
    case MemoryKind::kManaged:
      return "managed memory";
    case MemoryKind::kHost:
      return "page-locked host memory";
    case MemoryKind::kOther:
      return "memory that is not linear (an array)";
    case MemoryKind::kUnknown:
      break;
  }
  return "memory the driver does not know";
}

// lumen_layer_inputs.q, ..., lumen_layer_output.o: where the caller set the buffer.
std::string FieldName(const CallBuffer& buffer) {
  const bool output = std::string(buffer.name) == "o";
  return absl::StrCat(output ? "lumen_layer_output." : "lumen_layer_inputs.", buffer.name);
}

}  // namespace

absl::Status DeviceBufferCheck::Initialize(int32_t device) {
  device_ = device;
  int pageable = 0;
  LUMEN_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, device),
      "reading whether the device reads pageable memory");
  reads_pageable_memory_ = pageable != 0;
  return FindPointerQueries();
}

absl::Status DeviceBufferCheck::CheckBuffers(absl::Span<const CallBuffer> buffers) {
  ++check_number_;
  for (const CallBuffer& buffer : buffers) {
    if (buffer.count <= 0) continue;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(buffer.pointer);
    const uint64_t bytes = static_cast<uint64_t>(buffer.count * buffer.element_bytes);
    auto known = std::find_if(known_.begin(), known_.end(), [&](const KnownAllocation& a) {
      return begin >= a.base && begin - a.base <= a.size && bytes <= a.size - (begin - a.base);
    });
    if (known != known_.end()) {
      // One question per allocation and call, however many buffers lie in it.
      if (known->confirmed_in == check_number_) continue;
      if (SameBuffer(buffer.pointer, known->buffer_id)) {
        known->confirmed_in = check_number_;
        std::rotate(known_.begin(), known, known + 1);
        continue;
      }
      known_.erase(known);  // freed, and perhaps made again: ask everything anew
    }
    if (absl::Status status = CheckUnknown(buffer); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status DeviceBufferCheck::CheckUnknown(const CallBuffer& buffer) {
  PointerFacts facts;
  if (absl::Status status = DescribePointer(buffer.pointer, &facts); !status.ok()) return status;
  const uint64_t needed = static_cast<uint64_t>(buffer.count * buffer.element_bytes);
  const std::string field = FieldName(buffer);
  const std::string needs = absl::StrCat(buffer.name, "_count = ", buffer.count, " needs ",
                                         needed, " bytes");
  const uintptr_t begin = reinterpret_cast<uintptr_t>(buffer.pointer);
  switch (facts.kind) {
    case MemoryKind::kUnknown:
      if (reads_pageable_memory_) return absl::OkStatus();  // no range to check it against
      return LumenError(
          LUMEN_ERROR_INVALID_ARGUMENT,
          absl::StrCat(field, " is LUMEN_MEMORY_DEVICE but is not memory the ",
                       LUMEN_GPU_RUNTIME_NAME, " driver knows (no allocation holds it; ", needs,
                       "): host memory from malloc, new or the stack, or device memory already "
                       "freed. GPU ", device_, " cannot read pageable host memory: pass host "
                       "buffers as LUMEN_MEMORY_HOST. Nothing was enqueued"));
    case MemoryKind::kOther:
      return LumenError(LUMEN_ERROR_INVALID_ARGUMENT,
                        absl::StrCat(field, " is ", KindName(facts),
                                     ", which kernels cannot address (", needs,
                                     "). Nothing was enqueued"));
    case MemoryKind::kDevice:
      if (facts.device != device_ && !facts.reachable_from_engine) {
        return LumenError(
            LUMEN_ERROR_INVALID_ARGUMENT,
            absl::StrCat(field, " is ", KindName(facts), " (an allocation of ", facts.size,
                         " bytes; ", needs, "), and this engine runs on GPU ", device_,
                         ", which has no access to it: enable peer access, or use memory of "
                         "GPU ", device_, ". Nothing was enqueued"));
      }
      break;
    case MemoryKind::kHost:
      if (facts.device_pointer != begin) {
        return LumenError(
            LUMEN_ERROR_INVALID_ARGUMENT,
            absl::StrCat(field, " is ", KindName(facts), " (an allocation of ", facts.size,
                         " bytes; ", needs, ") that GPU ", device_,
                         " cannot address at this pointer: allocate it mapped, or pass it as "
                         "LUMEN_MEMORY_HOST. Nothing was enqueued"));
      }
      break;
    case MemoryKind::kManaged:
      break;
  }
  if (facts.size == 0) return absl::OkStatus();  // the driver gave no range: nothing to hold
  const bool inside = begin >= facts.base && begin - facts.base <= facts.size &&
                      needed <= facts.size - (begin - facts.base);
  const bool in_reserved_range = facts.reserved_size > 0 && begin >= facts.reserved_base &&
                                 begin - facts.reserved_base <= facts.reserved_size &&
                                 needed <= facts.reserved_size - (begin - facts.reserved_base);
  if (!inside && in_reserved_range && MappedThroughout(begin, needed)) {
    // Spans mapped pieces of one reserved range: valid, but a later call would have to ask
    // for every piece's id, so it is asked anew each time instead of remembered.
    return absl::OkStatus();
  }
  if (!inside) {
    const uint64_t offset = begin >= facts.base ? begin - facts.base : 0;
    const uint64_t left = offset <= facts.size ? facts.size - offset : 0;
    return LumenError(
        LUMEN_ERROR_INVALID_ARGUMENT,
        absl::StrCat(field, ": ", needs, " from ", buffer.name, ", but ", buffer.name,
                     " lies in an allocation of ", KindName(facts), " of ", facts.size,
                     " bytes, of which ", left, " bytes start at ", buffer.name, " (offset ",
                     offset, "): the call would read or write past the allocation. Nothing "
                     "was enqueued"));
  }
  if (!facts.has_buffer_id) return absl::OkStatus();  // cannot be recognized later: ask again
  // The new allocation replaces any remembered one it overlaps: those were freed.
  known_.erase(std::remove_if(known_.begin(), known_.end(),
                              [&](const KnownAllocation& a) {
                                return a.base < facts.base + facts.size &&
                                       facts.base < a.base + a.size;
                              }),
               known_.end());
  if (known_.size() >= kMostKnown) known_.pop_back();
  known_.insert(known_.begin(), KnownAllocation{facts.base, facts.size, facts.buffer_id,
                                                check_number_});
  return absl::OkStatus();
}

absl::Status DeviceBufferCheck::CheckStream(cudaStream_t stream) const {
  int device = device_;
#if defined(__HIP__)
  device = hipGetStreamDeviceId(stream);
  if (device < 0) {
    hipGetLastError();
    return LumenError(LUMEN_ERROR_INVALID_ARGUMENT,
                      "lumen_layer_inputs.stream is not a stream the HIP runtime knows");
  }
#elif CUDART_VERSION >= 12080
  if (const cudaError_t error = cudaStreamGetDevice(stream, &device); error != cudaSuccess) {
    if (IsContextLost(error)) return CudaError(error, "reading the stream's device");
    cudaGetLastError();
    return LumenError(LUMEN_ERROR_INVALID_ARGUMENT,
                      absl::StrCat("lumen_layer_inputs.stream is not a stream the CUDA runtime "
                                   "knows (", cudaGetErrorName(error), ")"));
  }
#endif  // older runtimes cannot tell a stream's device: the caller's promise stands
  if (device == device_) return absl::OkStatus();
  return LumenError(LUMEN_ERROR_INVALID_ARGUMENT,
                    absl::StrCat("lumen_layer_inputs.stream is a stream of GPU ", device,
                                 "; this engine runs on GPU ", device_,
                                 ": enqueue its calls on a stream of GPU ", device_,
                                 ". Nothing was enqueued"));
}

absl::Status CudaBackend::CheckCallBuffers(const LayerRun& run) {
  if (!check_device_buffers_) return absl::OkStatus();
  const lumen_layer_inputs& in = *run.inputs;
  const lumen_layer_output& out = *run.output;
  if (absl::Status status = buffer_check_.CheckStream(static_cast<cudaStream_t>(in.stream));
      !status.ok()) {
    return status;
  }
  // The counts are the call's (the engine has checked them against the layer's shapes); a
  // layer without g or beta has 0 for them.
  const int64_t in_size = DTypeSize(static_cast<DType>(in.dtype));
  const int64_t out_size = DTypeSize(static_cast<DType>(out.dtype));
  CallBuffer buffers[6];
  int32_t count = 0;
  if (in.memory == LUMEN_MEMORY_DEVICE) {
    buffers[count++] = {"q", in.q, in.q_count, in_size};
    buffers[count++] = {"k", in.k, in.k_count, in_size};
    buffers[count++] = {"v", in.v, in.v_count, in_size};
    buffers[count++] = {"g", in.g, in.g_count, in_size};
    buffers[count++] = {"beta", in.beta, in.beta_count, in_size};
  }
  if (out.memory == LUMEN_MEMORY_DEVICE) buffers[count++] = {"o", out.o, out.o_count, out_size};
  return buffer_check_.CheckBuffers(absl::MakeConstSpan(buffers, count));
}

}  // namespace lumen::cuda
