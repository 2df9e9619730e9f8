#pragma once
// A layer's state parts in flash-linear-attention's layout, for moving a live conversation
// between fla and lumen (lumen_session_read_state_as): fla's layers keep the matrix V-first,
// [HV, V, K] (state_v_first), where lumen keeps [HV, K, V]; and a conv window of W columns,
// the last W inputs oldest first, whose oldest column fla's ShortConvolution drops before the
// next token reads the window, where lumen keeps the last W-1. The normalizer is [HV, K] in both.

#include <cstdint>

#include "src/layer_spec.h"

namespace lumen {

// The elements of `part` (a lumen_state_part) in fla's layout, or 0 when the layer keeps no
// such part (or `part` is no part).
int64_t FlaPartCount(const LayerSpec& spec, int32_t part);
// The elements of `part` in lumen's canonical layout, or 0 as above.
int64_t CanonicalPartCount(const LayerSpec& spec, int32_t part);

// Rearranges a part the layer keeps from lumen's layout (CanonicalPartCount values) into
// fla's (FlaPartCount values): a conv window's unused oldest column becomes 0.
void CanonicalToFla(const LayerSpec& spec, int32_t part, const float* canonical, float* fla);
// The other way; a conv window's oldest column, which lumen does not keep, is not read.
void FlaToCanonical(const LayerSpec& spec, int32_t part, const float* fla, float* canonical);

}  // namespace lumen
