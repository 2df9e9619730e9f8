// C entry points for sessions: lifetime, state access and single-session layer calls.

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "capi/src/capi_util.h"
#include "src/fla_layout.h"

using lumen::capi::Fail;
using lumen::capi::FromStatus;
using lumen::capi::Guard;
using lumen::capi::Ok;

namespace {

lumen_status CheckLayer(const lumen_session* session, int32_t layer) {
  return FromStatus(session->session->model().CheckLayer(layer));
}

// For lumen_session_{read,write}_state_as in fla's layout: the part's element count there
// after checking `count` against it. A part the layer does not keep (no fla count) gets the
// canonical call's own message, from a call that fails before it reads or writes anything.
absl::StatusOr<int64_t> FlaCount(const lumen::Session& session, int32_t layer, int32_t part,
                                 int64_t count) {
  const lumen::LayerSpec& spec = session.model().layer(layer);
  const int64_t fla_count = lumen::FlaPartCount(spec, part);
  if (fla_count == 0) {
    float unused = 0.0f;
    const absl::Status status = session.ReadState(layer, part, &unused, 0);
    return status.ok() ? absl::InternalError("a state part without an fla layout") : status;
  }
  if (count != fla_count) {
    return absl::InvalidArgumentError(
        absl::StrCat("state part of layer ", layer, " holds ", fla_count,
                     " floats in fla's layout, count is ", count));
  }
  return fla_count;
}

lumen_status CheckLayout(int32_t layout) {
  if (layout == LUMEN_LAYOUT_LUMEN || layout == LUMEN_LAYOUT_FLA) return Ok();
  return Fail(LUMEN_ERROR_INVALID_ARGUMENT,
              absl::StrCat("unknown state layout ", layout, " (LUMEN or FLA)"));
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

lumen_status lumen_session_read_state_as(const lumen_session* session, int32_t layer,
                                         int32_t part, int32_t layout, float* out,
                                         int64_t count) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(out);
  if (lumen_status s = CheckLayer(session, layer); s != LUMEN_OK) return s;
  if (lumen_status s = CheckLayout(layout); s != LUMEN_OK) return s;
  return Guard([&] {
    const lumen::Session& s = *session->session;
    if (layout == LUMEN_LAYOUT_LUMEN) return FromStatus(s.ReadState(layer, part, out, count));
    absl::StatusOr<int64_t> fla_count = FlaCount(s, layer, part, count);
    if (!fla_count.ok()) return FromStatus(fla_count.status());
    const lumen::LayerSpec& spec = s.model().layer(layer);
    std::vector<float> canonical(lumen::CanonicalPartCount(spec, part));
    if (!canonical.empty()) {  // empty: a window of conv_size 1, which keeps nothing
      const absl::Status status =
          s.ReadState(layer, part, canonical.data(), static_cast<int64_t>(canonical.size()));
      if (!status.ok()) return FromStatus(status);
    }
    lumen::CanonicalToFla(spec, part, canonical.data(), out);
    return Ok();
  });
}

lumen_status lumen_session_write_state_as(lumen_session* session, int32_t layer, int32_t part,
                                          int32_t layout, const float* values,
                                          int64_t count) {
  LUMEN_REQUIRE_NOT_NULL(session);
  LUMEN_REQUIRE_NOT_NULL(values);
  if (lumen_status s = CheckLayer(session, layer); s != LUMEN_OK) return s;
  if (lumen_status s = CheckLayout(layout); s != LUMEN_OK) return s;
  return Guard([&] {
    lumen::Session& s = *session->session;
    if (layout == LUMEN_LAYOUT_LUMEN) {
      return FromStatus(s.WriteState(layer, part, values, count));
    }
    absl::StatusOr<int64_t> fla_count = FlaCount(s, layer, part, count);
    if (!fla_count.ok()) return FromStatus(fla_count.status());
    // Every value is checked, the conv window's ignored oldest column too.
    for (int64_t i = 0; i < count; ++i) {
      if (!std::isfinite(values[i])) {
        return Fail(LUMEN_ERROR_INVALID_ARGUMENT,
                    absl::StrCat("state value ", i, " is not finite"));
      }
    }
    const lumen::LayerSpec& spec = s.model().layer(layer);
    std::vector<float> canonical(lumen::CanonicalPartCount(spec, part));
    if (canonical.empty()) return Ok();  // a window of conv_size 1 keeps nothing
    lumen::FlaToCanonical(spec, part, values, canonical.data());
    return FromStatus(
        s.WriteState(layer, part, canonical.data(), static_cast<int64_t>(canonical.size())));
  });
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
