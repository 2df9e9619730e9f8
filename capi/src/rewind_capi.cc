// C entry points for rewinding a session by a few tokens.

#include "capi/src/capi_util.h"

using lumen::capi::FromStatus;
using lumen::capi::Guard;
using lumen::capi::Ok;

extern "C" {

lumen_status lumen_session_set_rewind_depth(lumen_session* session, int32_t depth) {
  LUMEN_REQUIRE_NOT_NULL(session);
  return Guard([&] {
    return FromStatus(session->session->engine().SetRewindDepth(*session->session, depth));
  });
}

lumen_status lumen_session_rewind_available(const lumen_session* session, int32_t* out) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(out);
  *out = session->session->engine().RewindAvailable(*session->session);
  return Ok();
}

lumen_status lumen_session_rewind(lumen_session* session, int32_t num_tokens) {
  LUMEN_REQUIRE_NOT_NULL(session);
  return Guard([&] {
    return FromStatus(session->session->engine().Rewind(*session->session, num_tokens));
  });
}

}  // extern "C"
