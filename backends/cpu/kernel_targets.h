#pragma once
// LUMEN_CPU_KERNEL marks a kernel entry point that GCC builds three times on x86-64 Linux:
// for baseline x86-64 (SSE2), x86-64-v3 (AVX2 + FMA) and x86-64-v4 (AVX-512), picked once at
// load time through an ifunc. `flatten` inlines the kernel's helpers into each copy so they
// get its instructions too. Elsewhere there is one baseline build. The library stays
// runnable on any x86-64 CPU and runs the widest vectors the CPU has; the third clone costs
// about 3 s of compile time (lumen bench --cpu measures what each gives).
// LUMEN_BASELINE_KERNELS_ONLY builds the baseline copy alone, so tests can check it too.
//
// A kernel whose code must differ by level (register tiles sized for the vector width: see
// small_matmul.h) is written as a template and instantiated by hand in functions marked
// LUMEN_KERNEL_AVX512 / LUMEN_KERNEL_AVX2 / LUMEN_KERNEL_BASELINE; CpuKernelLevel() says
// which one to call, by the same rule as the ifunc.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(LUMEN_BASELINE_KERNELS_ONLY)
#define LUMEN_CPU_KERNEL \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), flatten))
#define LUMEN_KERNEL_LEVELS 1
#define LUMEN_KERNEL_AVX512 __attribute__((target("arch=x86-64-v4"), flatten))
#define LUMEN_KERNEL_AVX2 __attribute__((target("arch=x86-64-v3"), flatten))
#else
#define LUMEN_CPU_KERNEL
#define LUMEN_KERNEL_LEVELS 0
#endif
#if defined(__GNUC__)
#define LUMEN_KERNEL_BASELINE __attribute__((flatten))
#else
#define LUMEN_KERNEL_BASELINE
#endif

#include <cstdlib>
#include <cstring>

namespace lumen::cpu {

// In increasing width, so that a cap compares with <.
enum class KernelLevel { kBaseline, kAvx2, kAvx512 };

// The level the environment variable LUMEN_CPU_MAX_LEVEL caps the kernels at ("avx2" or
// "baseline"; unset or anything else: no cap). It lowers the level, never raises it, so that
// the tests and `lumen bench` can run the narrower builds on a wider CPU, as oneDNN's
// ONEDNN_MAX_CPU_ISA does. Only the kernels that CpuKernelLevel() picks follow it (the
// register-tiled products, steps and chunks); LUMEN_CPU_KERNEL's clones follow the CPU.
inline KernelLevel MaxKernelLevelFromEnvironment(const char* value) {
  if (value != nullptr && std::strcmp(value, "baseline") == 0) return KernelLevel::kBaseline;
  if (value != nullptr && std::strcmp(value, "avx2") == 0) return KernelLevel::kAvx2;
  return KernelLevel::kAvx512;
}

// The widest level this build has, the CPU runs and LUMEN_CPU_MAX_LEVEL allows; computed once.
inline KernelLevel CpuKernelLevel() {
#if LUMEN_KERNEL_LEVELS
  static const KernelLevel level = [] {
    __builtin_cpu_init();
    KernelLevel cpu = KernelLevel::kBaseline;
    if (__builtin_cpu_supports("x86-64-v4")) {
      cpu = KernelLevel::kAvx512;
    } else if (__builtin_cpu_supports("x86-64-v3")) {
      cpu = KernelLevel::kAvx2;
    }
    const KernelLevel cap = MaxKernelLevelFromEnvironment(std::getenv("LUMEN_CPU_MAX_LEVEL"));
    return cap < cpu ? cap : cpu;
  }();
  return level;
#else
  return KernelLevel::kBaseline;
#endif
}

}  // namespace lumen::cpu
