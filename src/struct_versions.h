#pragma once
// The sizes of the first versions of public structs that have grown since. A caller built
// against that older header passes (or, for out-structs, owns) only that many bytes.

#include <cstddef>
#include <cstdint>

#include "lumen/lumen.h"

namespace lumen {

// 0.1.0's lumen_layer_options ended before conv_size: its layers have no convolution.
inline constexpr uint32_t kLayerOptionsSizeV0 = offsetof(lumen_layer_options, conv_size);

// 0.1.0's lumen_layer_inputs ended before stream: its calls use the default stream.
inline constexpr uint32_t kLayerInputsSizeV0 = offsetof(lumen_layer_inputs, stream);

// 0.2's lumen_engine_options ended before memory_budget_bytes: its engines have no budget.
inline constexpr uint32_t kEngineOptionsSizeV0 = offsetof(lumen_engine_options,
                                                         memory_budget_bytes);

// 0.3's lumen_memory_stats is the first: a caller's struct is at least that.
inline constexpr uint32_t kEngineStatsSizeV0 = sizeof(lumen_memory_stats);

}  // namespace lumen
