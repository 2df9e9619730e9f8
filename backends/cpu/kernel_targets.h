#pragma once
// LUMEN_CPU_KERNEL marks a kernel entry point that GCC builds twice on x86-64 Linux: for
// baseline x86-64 (SSE2) and for x86-64-v3 (AVX2 + FMA), picked once at load time through an
// ifunc. `flatten` inlines the kernel's helpers into each copy so they get its instructions
// too. Elsewhere there is one baseline build. The library stays runnable on any x86-64 CPU
// while the chunkwise prefill runs about a third faster where AVX2 is present.
// LUMEN_BASELINE_KERNELS_ONLY builds the baseline copy alone, so tests can check it too.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(LUMEN_BASELINE_KERNELS_ONLY)
#define LUMEN_CPU_KERNEL __attribute__((target_clones("arch=x86-64-v3", "default"), flatten))
#else
#define LUMEN_CPU_KERNEL
#endif
