// The HIP runtime's functions, defined hidden inside liblumen and forwarded to
// libamdhip64.so.5 once it is loaded (see hip_runtime_loader.h). The library then has no
// dependency on the runtime: it loads where the runtime is missing, and the ROCm backend
// says why it cannot run.
//
// No HIP header here: hip_runtime_api.h gives its declarations default visibility, and these
// definitions must not be exported (they would stand in for the real runtime in every other
// library of the process). The signatures are HIP 5.x's, spelled with C types of the same
// ABI: hipError_t and the other enums as int, handles as void*, dim3 as Dim3.

#include "backends/rocm/hip_runtime_loader.h"

#include <dlfcn.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace lumen::rocm {
namespace {

// HIP 5.x's runtime ABI, which the ROCm backend is compiled against (ROCm 6 changed it).
constexpr char kRuntimeLibrary[] = "libamdhip64.so.5";
constexpr int kNotInitialized = 3;  // hipErrorNotInitialized
constexpr char kNotLoadedMessage[] = "the HIP runtime is not loaded";

struct Dim3 {  // hip's dim3
  uint32_t x, y, z;
};

// One kernel as the compiler's start-up code registers it (__hipRegisterFunction's
// arguments after the fat binary handle; they point at static data of the library).
struct Kernel {
  const void* host_function;
  char* device_function;
  const char* device_name;
  unsigned thread_limit;
  void* tid;
  void* bid;
  void* block_dim;
  void* grid_dim;
  int* warp_size;
};

// One fat binary (the device code of one source file) and its kernels. Its address is the
// handle the compiler's code keeps; runtime_handle is the runtime's, once it is loaded.
struct FatBinary {
  const void* data = nullptr;
  void** runtime_handle = nullptr;
  std::vector<Kernel> kernels;
};

using RegisterFatBinaryFunction = void** (*)(const void*);
using RegisterFunctionFunction = void (*)(void**, const void*, char*, const char*, unsigned,
                                          void*, void*, void*, void*, int*);
using UnregisterFatBinaryFunction = void (*)(void**);

// What the loader knows. Never destroyed: registrations arrive from static constructors of
// other objects and leave from their exit handlers, in any order relative to this file's.
struct Loader {
  std::mutex mutex;
  bool attempted = false;
  void* library = nullptr;  // set once, under the mutex
  std::string error;
  RegisterFatBinaryFunction register_fat_binary = nullptr;
  RegisterFunctionFunction register_function = nullptr;
  UnregisterFatBinaryFunction unregister_fat_binary = nullptr;
  std::vector<FatBinary*> binaries;
};

Loader& TheLoader() {
  static Loader* loader = new Loader;
  return *loader;
}

// `name` in the loaded runtime; null before it is loaded or where it is missing.
void* RuntimeSymbol(const char* name) {
  Loader& loader = TheLoader();
  void* library;
  {
    std::lock_guard<std::mutex> lock(loader.mutex);
    library = loader.library;
  }
  return library != nullptr ? dlsym(library, name) : nullptr;
}

// Resolves `name` once it can, and caches it.
void* CachedSymbol(std::atomic<void*>& cache, const char* name) {
  void* function = cache.load(std::memory_order_acquire);
  if (function == nullptr) {
    function = RuntimeSymbol(name);
    if (function != nullptr) cache.store(function, std::memory_order_release);
  }
  return function;
}

}  // namespace

bool LoadHipRuntime(std::string* error) {
  Loader& loader = TheLoader();
  std::lock_guard<std::mutex> lock(loader.mutex);
  if (!loader.attempted) {
    loader.attempted = true;
    void* library = dlopen(kRuntimeLibrary, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* reason = dlerror();
      loader.error = std::string("cannot load the HIP runtime (") + kRuntimeLibrary + "): " +
                     (reason != nullptr ? reason : "unknown reason");
    } else {
      loader.register_fat_binary =
          reinterpret_cast<RegisterFatBinaryFunction>(dlsym(library, "__hipRegisterFatBinary"));
      loader.register_function =
          reinterpret_cast<RegisterFunctionFunction>(dlsym(library, "__hipRegisterFunction"));
      loader.unregister_fat_binary = reinterpret_cast<UnregisterFatBinaryFunction>(
          dlsym(library, "__hipUnregisterFatBinary"));
      if (loader.register_fat_binary == nullptr || loader.register_function == nullptr ||
          loader.unregister_fat_binary == nullptr) {
        loader.error = std::string(kRuntimeLibrary) + " lacks the kernel registration calls";
        dlclose(library);
      } else {
        // Hand over what the library registered while it loaded.
        for (FatBinary* binary : loader.binaries) {
          binary->runtime_handle = loader.register_fat_binary(binary->data);
          for (const Kernel& k : binary->kernels) {
            loader.register_function(binary->runtime_handle, k.host_function,
                                     k.device_function, k.device_name, k.thread_limit, k.tid,
                                     k.bid, k.block_dim, k.grid_dim, k.warp_size);
          }
        }
        loader.library = library;
      }
    }
  }
  if (loader.library == nullptr && error != nullptr) *error = loader.error;
  return loader.library != nullptr;
}

}  // namespace lumen::rocm

using lumen::rocm::Dim3;
using lumen::rocm::FatBinary;
using lumen::rocm::Kernel;
using lumen::rocm::Loader;

#define LUMEN_HIDDEN __attribute__((visibility("hidden")))

extern "C" {

// Kernel registration, called by the compiler's start-up and exit code of each HIP object.

LUMEN_HIDDEN void** __hipRegisterFatBinary(const void* data) {
  Loader& loader = lumen::rocm::TheLoader();
  std::lock_guard<std::mutex> lock(loader.mutex);
  FatBinary* binary = new FatBinary;
  binary->data = data;
  if (loader.library != nullptr) binary->runtime_handle = loader.register_fat_binary(data);
  loader.binaries.push_back(binary);
  return reinterpret_cast<void**>(binary);
}

LUMEN_HIDDEN void __hipRegisterFunction(void** handle, const void* host_function,
                                        char* device_function, const char* device_name,
                                        unsigned thread_limit, void* tid, void* bid,
                                        void* block_dim, void* grid_dim, int* warp_size) {
  Loader& loader = lumen::rocm::TheLoader();
  std::lock_guard<std::mutex> lock(loader.mutex);
  FatBinary* binary = reinterpret_cast<FatBinary*>(handle);
  binary->kernels.push_back(Kernel{host_function, device_function, device_name, thread_limit,
                                   tid, bid, block_dim, grid_dim, warp_size});
  if (binary->runtime_handle != nullptr) {
    loader.register_function(binary->runtime_handle, host_function, device_function,
                             device_name, thread_limit, tid, bid, block_dim, grid_dim,
                             warp_size);
  }
}

LUMEN_HIDDEN void __hipUnregisterFatBinary(void** handle) {
  Loader& loader = lumen::rocm::TheLoader();
  std::lock_guard<std::mutex> lock(loader.mutex);
  FatBinary* binary = reinterpret_cast<FatBinary*>(handle);
  if (binary->runtime_handle != nullptr) loader.unregister_fat_binary(binary->runtime_handle);
  for (auto it = loader.binaries.begin(); it != loader.binaries.end(); ++it) {
    if (*it == binary) {
      loader.binaries.erase(it);
      break;
    }
  }
  delete binary;
}

// Every other runtime call the ROCm backend makes, forwarded. Before the runtime is loaded
// (or where it is missing) they answer hipErrorNotInitialized; the backend loads it before
// it makes any.
#define LUMEN_HIP_FORWARD(name, params, args)                                            \
  LUMEN_HIDDEN int name params {                                                         \
    static std::atomic<void*> cache{nullptr};                                            \
    void* real = lumen::rocm::CachedSymbol(cache, #name);                                \
    if (real == nullptr) return lumen::rocm::kNotInitialized;                            \
    return reinterpret_cast<int(*) params>(real) args;                                   \
  }

LUMEN_HIP_FORWARD(__hipPushCallConfiguration,
                  (Dim3 grid, Dim3 block, size_t shared_bytes, void* stream),
                  (grid, block, shared_bytes, stream))
LUMEN_HIP_FORWARD(__hipPopCallConfiguration,
                  (Dim3 * grid, Dim3* block, size_t* shared_bytes, void** stream),
                  (grid, block, shared_bytes, stream))
LUMEN_HIP_FORWARD(hipLaunchKernel,
                  (const void* function, Dim3 grid, Dim3 block, void** args,
                   size_t shared_bytes, void* stream),
                  (function, grid, block, args, shared_bytes, stream))
LUMEN_HIP_FORWARD(hipGetLastError, (void), ())
LUMEN_HIP_FORWARD(hipGetDeviceCount, (int* count), (count))
LUMEN_HIP_FORWARD(hipGetDeviceProperties, (void* properties, int device), (properties, device))
LUMEN_HIP_FORWARD(hipSetDevice, (int device), (device))
LUMEN_HIP_FORWARD(hipDeviceGetAttribute, (int* value, int attribute, int device),
                  (value, attribute, device))
LUMEN_HIP_FORWARD(hipDeviceSynchronize, (void), ())
LUMEN_HIP_FORWARD(hipMalloc, (void** pointer, size_t bytes), (pointer, bytes))
LUMEN_HIP_FORWARD(hipFree, (void* pointer), (pointer))
LUMEN_HIP_FORWARD(hipHostMalloc, (void** pointer, size_t bytes, unsigned flags),
                  (pointer, bytes, flags))
LUMEN_HIP_FORWARD(hipHostFree, (void* pointer), (pointer))
LUMEN_HIP_FORWARD(hipMemGetInfo, (size_t * free_bytes, size_t* total_bytes),
                  (free_bytes, total_bytes))
LUMEN_HIP_FORWARD(hipMemcpy, (void* dst, const void* src, size_t bytes, int kind),
                  (dst, src, bytes, kind))
LUMEN_HIP_FORWARD(hipMemcpyAsync,
                  (void* dst, const void* src, size_t bytes, int kind, void* stream),
                  (dst, src, bytes, kind, stream))
LUMEN_HIP_FORWARD(hipMemset, (void* dst, int value, size_t bytes), (dst, value, bytes))
LUMEN_HIP_FORWARD(hipMemsetAsync, (void* dst, int value, size_t bytes, void* stream),
                  (dst, value, bytes, stream))
LUMEN_HIP_FORWARD(hipStreamSynchronize, (void* stream), (stream))
LUMEN_HIP_FORWARD(hipStreamWaitEvent, (void* stream, void* event, unsigned flags),
                  (stream, event, flags))
LUMEN_HIP_FORWARD(hipStreamCreateWithFlags, (void** stream, unsigned flags), (stream, flags))
LUMEN_HIP_FORWARD(hipStreamDestroy, (void* stream), (stream))
LUMEN_HIP_FORWARD(hipStreamIsCapturing, (void* stream, int* status), (stream, status))
LUMEN_HIP_FORWARD(hipThreadExchangeStreamCaptureMode, (int* mode), (mode))
LUMEN_HIP_FORWARD(hipEventCreateWithFlags, (void** event, unsigned flags), (event, flags))
LUMEN_HIP_FORWARD(hipEventRecord, (void* event, void* stream), (event, stream))
LUMEN_HIP_FORWARD(hipEventSynchronize, (void* event), (event))
LUMEN_HIP_FORWARD(hipEventQuery, (void* event), (event))
LUMEN_HIP_FORWARD(hipEventDestroy, (void* event), (event))
LUMEN_HIP_FORWARD(hipFuncSetAttribute, (const void* kernel, int attribute, int value),
                  (kernel, attribute, value))

#undef LUMEN_HIP_FORWARD

// The two calls that return text.
#define LUMEN_HIP_FORWARD_TEXT(name)                                                     \
  LUMEN_HIDDEN const char* name(int error) {                                             \
    static std::atomic<void*> cache{nullptr};                                            \
    void* real = lumen::rocm::CachedSymbol(cache, #name);                                \
    if (real == nullptr) return lumen::rocm::kNotLoadedMessage;                          \
    return reinterpret_cast<const char* (*)(int)>(real)(error);                          \
  }

LUMEN_HIP_FORWARD_TEXT(hipGetErrorName)
LUMEN_HIP_FORWARD_TEXT(hipGetErrorString)

#undef LUMEN_HIP_FORWARD_TEXT

}  // extern "C"
