#pragma once
// Software prefetch of strided rows. A head's rows of q, k, v and g lie a layer's row apart
// (16 KiB at HV = 32, K = 128): each in a page of its own, where the hardware prefetchers do
// not follow, so a walk over them waits on memory at every row unless it asks ahead.

#include <cstdint>

#include "backends/cpu/kernel_targets.h"

namespace lumen::cpu {
// This SIMD level's copy (kernel_targets.h).
inline namespace LUMEN_KERNEL_NAMESPACE {

// Prefetches the cache lines of `bytes` bytes at p (a prefetch never faults, so p may lie
// past the end of a buffer). Locality as __builtin_prefetch's: 3 into L1, 2 into L2.
template <int kLocality = 3>
[[gnu::always_inline]] inline void PrefetchBytes(const void* p, int64_t bytes) {
  const char* line = static_cast<const char*>(p);
  for (int64_t offset = 0; offset < bytes; offset += 64) {
    __builtin_prefetch(line + offset, 0, kLocality);
  }
}

}  // namespace LUMEN_KERNEL_NAMESPACE
}  // namespace lumen::cpu
