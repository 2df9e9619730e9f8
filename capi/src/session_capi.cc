// C entry points for sessions: lifetime, state access and single-session layer calls.

#include "absl/strings/str_cat.h"
#include "capi/src/capi_util.h"

using lumen::capi::Fail;
using lumen::capi::FromStatus;
using lumen::capi::Guard;
using lumen::capi::Ok;

namespace {

lumen_status CheckLayer(const lumen_session* session, int32_t layer) {
  return FromStatus(session->session->model().CheckLayer(layer));
}

}  // namespace

extern "C" {

void lumen_layer_inputs_init(lumen_layer_inputs* inputs) {
  if (inputs == nullptr) return;
  *inputs = lumen_layer_inputs{};
  inputs->struct_size = sizeof(lumen_layer_inputs);
  inputs->dtype = LUMEN_DTYPE_FLOAT32;
  inputs->memory = LUMEN_MEMORY_HOST;
}

void lumen_layer_output_init(lumen_layer_output* output) {
  if (output == nullptr) return;
  *output = lumen_layer_output{};
  output->struct_size = sizeof(lumen_layer_output);
  output->dtype = LUMEN_DTYPE_FLOAT32;
  output->memory = LUMEN_MEMORY_HOST;
}

lumen_status lumen_session_create(lumen_engine* engine, lumen_session** out) {
  LUMEN_REQUIRE_NOT_NULL(engine);
  LUMEN_REQUIRE_NOT_NULL(out);
  return Guard([&] {
    absl::StatusOr<std::unique_ptr<lumen::Session>> session = engine->engine->CreateSession();
    if (!session.ok()) return FromStatus(session.status());
    *out = new lumen_session{*std::move(session)};
    return Ok();
  });
}

void lumen_session_destroy(lumen_session* session) { delete session; }

lumen_status lumen_session_fork(const lumen_session* session, lumen_session** out) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(out);
  return Guard([&] {
    absl::StatusOr<std::unique_ptr<lumen::Session>> copy = session->session->Fork();
    if (!copy.ok()) return FromStatus(copy.status());
    *out = new lumen_session{*std::move(copy)};
    return Ok();
  });
}

lumen_status lumen_session_reset(lumen_session* session) {
  LUMEN_REQUIRE_NOT_NULL(session);
  return Guard([&] { return FromStatus(session->session->Reset()); });
}

lumen_status lumen_session_prefetch(lumen_session* session) {
  LUMEN_REQUIRE_NOT_NULL(session);
  return Guard([&] {
    session->session->engine().Prefetch(*session->session);
    return Ok();
  });
}

lumen_status lumen_session_resident(const lumen_session* session, int32_t* out) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(out);
  *out = session->session->engine().IsResident(*session->session) ? 1 : 0;
  return Ok();
}

lumen_status lumen_session_model(const lumen_session* session, lumen_model** out) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(out);
  return Guard([&] {
    *out = new lumen_model{session->session->engine().shared_model()};
    return Ok();
  });
}

lumen_status lumen_session_tokens(const lumen_session* session, int32_t layer, int64_t* out) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(out);
  if (lumen_status s = CheckLayer(session, layer); s != LUMEN_OK) return s;
  *out = session->session->tokens(layer);
  return Ok();
}

lumen_status lumen_session_read_state(const lumen_session* session, int32_t layer,
                                      int32_t part, float* out, int64_t count) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(out);
  if (lumen_status s = CheckLayer(session, layer); s != LUMEN_OK) return s;
  return Guard([&] { return FromStatus(session->session->ReadState(layer, part, out, count)); });
}

lumen_status lumen_session_write_state(lumen_session* session, int32_t layer,
                                       int32_t part, const float* values,
                                       int64_t count) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(values);
  if (lumen_status s = CheckLayer(session, layer); s != LUMEN_OK) return s;
  return Guard(
      [&] { return FromStatus(session->session->WriteState(layer, part, values, count)); });
}

lumen_status lumen_session_step(lumen_session* session, int32_t layer,
                                const lumen_layer_inputs* inputs, lumen_layer_output* output) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(inputs);
  LUMEN_REQUIRE_NOT_NULL(output);
  return Guard([&] {
    lumen::Session* sessions[] = {session->session.get()};
    return FromStatus(session->session->engine().Step(layer, sessions, *inputs, *output));
  });
}

lumen_status lumen_session_prefill(lumen_session* session, int32_t layer, int32_t num_tokens,
                                   const lumen_layer_inputs* inputs,
                                   lumen_layer_output* output) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(inputs);
  LUMEN_REQUIRE_NOT_NULL(output);
  if (num_tokens < 1) {
    return Fail(LUMEN_ERROR_INVALID_ARGUMENT,
                absl::StrCat("num_tokens is ", num_tokens, ", must be >= 1"));
  }
  return Guard([&] {
    lumen::Session* sessions[] = {session->session.get()};
    const int32_t cu_seqlens[] = {0, num_tokens};
    return FromStatus(session->session->engine().Prefill(layer, sessions, cu_seqlens, *inputs, *output));
  });
}

}  // extern "C"
