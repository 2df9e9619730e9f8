#pragma once
// The SIMD levels of the CPU kernels. Each kernel source (the files CMake lists in
// LUMEN_CPU_KERNEL_SOURCES, backends/cpu/sources.cmake) is compiled once per level with that
// level's flags (cmake/kernel_levels.cmake): the baseline with the library's own flags
// (SSE2 on x86-64, NEON on aarch64), and on x86-64 again with -march=x86-64-v3 (AVX2 + FMA)
// and -march=x86-64-v4 (AVX-512). Each build defines its entry points in a namespace of its
// own, lumen::cpu::<level> (LUMEN_KERNEL_NAMESPACE), and fills a KernelTable
// (kernel_table.h); the library picks one table per process from the CPU's features and
// LUMEN_CPU_MAX_LEVEL, and calls the kernels through its plain function pointers. No ifunc,
// no target attribute: every compiler builds it the same way, and sanitizers run it
// (docs/cpu_dispatch.md says why this design).
//
// The headers the kernels share (vector_math.h, small_matmul.h, transpose.h, prefetch.h) put
// their inline functions in the same namespace, so that the linker never merges a level's
// copy of one with another level's: a wider copy would otherwise be free to replace the
// baseline's, and fault on a CPU without those instructions. tests/abi/
// check_kernel_level_symbols.sh checks that a level's objects define nothing else.

#include <cstdlib>
#include <cstring>

// The namespace of the level this file is compiled at: baseline unless CMake says otherwise.
#ifndef LUMEN_KERNEL_NAMESPACE
#define LUMEN_KERNEL_NAMESPACE baseline
#endif

// LUMEN_KERNEL_ENTRY marks a level's entry point. `flatten` inlines the whole call tree below
// it (the tile loops, products, transposes and conversions), as it did in the GCC clones the
// levels replaced, whose inlining `lumen bench --cpu` measured: the same code at the same
// speed, and nothing of a level's left to the linker (see above).
#if defined(__GNUC__)
#define LUMEN_KERNEL_ENTRY __attribute__((flatten))
#else
#define LUMEN_KERNEL_ENTRY
#endif

namespace lumen::cpu {

// In increasing width, so that a cap compares with <.
enum class KernelLevel { kBaseline, kAvx2, kAvx512 };

// The level the environment variable LUMEN_CPU_MAX_LEVEL caps the kernels at ("avx2" or
// "baseline"; unset or anything else: no cap). It lowers the level, never raises it, so that
// the tests and `lumen bench` can run the narrower builds on a wider CPU, as oneDNN's
// ONEDNN_MAX_CPU_ISA does. Every kernel follows it.
inline KernelLevel MaxKernelLevelFromEnvironment(const char* value) {
  if (value != nullptr && std::strcmp(value, "baseline") == 0) return KernelLevel::kBaseline;
  if (value != nullptr && std::strcmp(value, "avx2") == 0) return KernelLevel::kAvx2;
  return KernelLevel::kAvx512;
}

// The widest level this CPU runs and its operating system saves the registers of
// (kernel_dispatch.cc), whether or not this build has it.
KernelLevel CpuSimdLevel();

// The widest level this build has, the CPU runs and LUMEN_CPU_MAX_LEVEL allows: the one the
// kernels run at. Computed once per process.
KernelLevel CpuKernelLevel();

}  // namespace lumen::cpu
