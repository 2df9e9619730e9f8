#pragma once
// The HIP runtime (libamdhip64.so.5), loaded on first use instead of linked, so that a
// ROCm-enabled liblumen.so loads and runs on the CPU on a machine without it. Plain C++.
//
// hip_runtime_loader.cc defines, hidden inside the library, every HIP runtime function the
// ROCm backend's objects call (the ones the HIP compiler emits for kernel launches and kernel
// registration included). Each forwards to the loaded runtime; before the runtime is loaded,
// or where it is missing, the calls answer hipErrorNotInitialized. Kernel registrations made
// while the library loads are kept and handed to the runtime when it is loaded.

#include <string>

namespace lumen::rocm {

// Loads the HIP runtime on the first call; later calls return the first result. Returns
// false, with a reason in *error, when it cannot be loaded. Thread-safe.
bool LoadHipRuntime(std::string* error);

}  // namespace lumen::rocm
