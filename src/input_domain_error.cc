#include "src/input_domain_error.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace lumen {

absl::Status InputOutOfDomain(const char* tensor, const InputDomain& domain, float value,
                              int64_t index, int64_t heads, int64_t per_head,
                              absl::Span<const int32_t> cu_seqlens) {
  const int64_t token = index / (heads * per_head);
  // The session whose tokens include `token`: the last offset at or before it.
  const int64_t session =
      std::upper_bound(cu_seqlens.begin(), cu_seqlens.end(), token) - cu_seqlens.begin() - 1;
  return InputOutOfDomain(tensor, domain, value, index, heads, per_head, session,
                          token - cu_seqlens[session],
                          static_cast<int64_t>(cu_seqlens.size()) - 1);
}

absl::Status InputOutOfDomain(const char* tensor, const InputDomain& domain, float value,
                              int64_t index, int64_t heads, int64_t per_head, int64_t session,
                              int64_t session_token, int64_t num_sessions) {
  const int64_t token = index / (heads * per_head);
  const int64_t head = index / per_head % heads;
  std::string where = absl::StrCat("token ", token);
  if (num_sessions > 1) {
    absl::StrAppend(&where, " (session ", session, "'s token ", session_token, ")");
  }
  absl::StrAppend(&where, ", head ", head);
  if (per_head > 1) absl::StrAppend(&where, ", channel ", index % per_head);
  return absl::InvalidArgumentError(absl::StrCat(tensor, " at ", where, " is ", value, ": it ",
                                                 domain.rule, "; no session was changed"));
}

}  // namespace lumen
