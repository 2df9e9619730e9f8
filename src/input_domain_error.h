#pragma once
// The error of a layer call whose input holds a value outside its domain (src/input_domain.h),
// naming the tensor, the value, and where it sits: token, session, head and channel.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "src/input_domain.h"

namespace lumen {

// `index` is the element's position in the call's input `tensor`, laid out
// [tokens, heads, per_head]; cu_seqlens are the call's token offsets per session.
absl::Status InputOutOfDomain(const char* tensor, const InputDomain& domain, float value,
                              int64_t index, int64_t heads, int64_t per_head,
                              absl::Span<const int32_t> cu_seqlens);

}  // namespace lumen
