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

// The same error when the session is already known (a GPU finds it on the device): the
// element sits at `session_token` of `session`, one of the call's `num_sessions`.
absl::Status InputOutOfDomain(const char* tensor, const InputDomain& domain, float value,
                              int64_t index, int64_t heads, int64_t per_head, int64_t session,
                              int64_t session_token, int64_t num_sessions);

}  // namespace lumen
