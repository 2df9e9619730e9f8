#pragma once
// LUMEN_CPU_KERNEL marks a kernel entry point that GCC builds three times on x86-64 Linux:
// for baseline x86-64 (SSE2), x86-64-v3 (AVX2 + FMA) and x86-64-v4 (AVX-512), picked once at
// load time through an ifunc. `flatten` inlines the kernel's helpers into each copy so they
// get its instructions too. Elsewhere there is one baseline build. The library stays
// runnable on any x86-64 CPU and runs the widest vectors the CPU has; the third clone costs
// about 3 s of compile time (lumen bench --cpu measures what each gives).
// LUMEN_BASELINE_KERNELS_ONLY builds the baseline copy alone, so tests can check it too.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(LUMEN_BASELINE_KERNELS_ONLY)
#define LUMEN_CPU_KERNEL \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), flatten))
#else
#define LUMEN_CPU_KERNEL
#endif
