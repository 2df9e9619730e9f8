// C entry points for tentative tokens: tentative steps, their commit, and the count held.

#include "absl/types/span.h"
#include "capi/src/capi_util.h"

using lumen::capi::CheckSessionArray;
using lumen::capi::Fail;
using lumen::capi::FromStatus;
using lumen::capi::Guard;
using lumen::capi::Ok;
using lumen::capi::UnwrapSessions;

extern "C" {

lumen_status lumen_session_step_tentative(lumen_session* session, int32_t layer,
                                          int32_t num_tokens, const lumen_layer_inputs* inputs,
                                          lumen_layer_output* output) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(inputs);
  LUMEN_REQUIRE_NOT_NULL(output);
  return Guard([&] {
    lumen::Session* sessions[] = {session->session.get()};
    const int32_t cu_seqlens[] = {0, num_tokens};
    return FromStatus(session->session->engine().StepTentative(layer, sessions, cu_seqlens,
                                                               *inputs, *output));
  });
}

lumen_status lumen_engine_step_tentative_batch(lumen_engine* engine, int32_t layer,
                                               lumen_session* const* sessions, int32_t n,
                                               const int32_t* cu_seqlens,
                                               const lumen_layer_inputs* inputs,
                                               lumen_layer_output* output) {
  LUMEN_REQUIRE_NOT_NULL(engine);
  LUMEN_REQUIRE_NOT_NULL(cu_seqlens);
  LUMEN_REQUIRE_NOT_NULL(inputs);
  LUMEN_REQUIRE_NOT_NULL(output);
  if (lumen_status s = CheckSessionArray(sessions, n); s != LUMEN_OK) return s;
  return Guard([&] {
    return FromStatus(engine->engine->StepTentative(layer, UnwrapSessions(sessions, n),
                                                    absl::MakeConstSpan(cu_seqlens, n + 1),
                                                    *inputs, *output));
  });
}

lumen_status lumen_session_tentative_tokens(const lumen_session* session, int32_t* out) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(out);
  *out = session->session->tentative().count();
  return Ok();
}

lumen_status lumen_session_commit(lumen_session* session, int32_t num_accepted) {
  LUMEN_REQUIRE_NOT_NULL(session);
  return Guard([&] {
    lumen::Session* sessions[] = {session->session.get()};
    const int32_t accepted[] = {num_accepted};
    return FromStatus(session->session->engine().Commit(sessions, accepted));
  });
}

lumen_status lumen_engine_commit_batch(lumen_engine* engine, lumen_session* const* sessions,
                                       int32_t n, const int32_t* num_accepted) {
  LUMEN_REQUIRE_NOT_NULL(engine);
  if (lumen_status s = CheckSessionArray(sessions, n); s != LUMEN_OK) return s;
  if (n > 0 && num_accepted == nullptr) {
    return Fail(LUMEN_ERROR_INVALID_ARGUMENT, "num_accepted is NULL");
  }
  return Guard([&] {
    return FromStatus(engine->engine->Commit(UnwrapSessions(sessions, n),
                                             absl::MakeConstSpan(num_accepted, n)));
  });
}

}  // extern "C"
