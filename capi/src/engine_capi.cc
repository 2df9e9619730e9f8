// C entry points for engines, their statistics and the batched layer calls.

#include <cstring>

#include "absl/strings/str_cat.h"
#include "capi/src/capi_util.h"
#include "src/struct_size.h"
#include "src/struct_versions.h"

using lumen::capi::CheckSessionArray;
using lumen::capi::Fail;
using lumen::capi::FromStatus;
using lumen::capi::Guard;
using lumen::capi::Ok;
using lumen::capi::UnwrapSessions;

namespace {

lumen_status CheckBatch(lumen_session* const* sessions, int32_t n,
                        const lumen_layer_inputs* inputs, lumen_layer_output* output) {
  if (lumen_status s = CheckSessionArray(sessions, n); s != LUMEN_OK) return s;
  if (inputs == nullptr) return Fail(LUMEN_ERROR_INVALID_ARGUMENT, "inputs is NULL");
  if (output == nullptr) return Fail(LUMEN_ERROR_INVALID_ARGUMENT, "output is NULL");
  return LUMEN_OK;
}

}  // namespace

extern "C" {

void lumen_engine_options_init(lumen_engine_options* options) {
  if (options == nullptr) return;
  *options = lumen_engine_options{};
  options->struct_size = sizeof(lumen_engine_options);
  options->backend = LUMEN_BACKEND_AUTO;
}

lumen_status lumen_engine_create(const lumen_model* model, const lumen_engine_options* options,
                                 lumen_engine** out) {
  LUMEN_REQUIRE_NOT_NULL(model);
  LUMEN_REQUIRE_NOT_NULL(out);
  lumen_engine_options resolved;
  lumen_engine_options_init(&resolved);
  if (options != nullptr) {
    absl::Status size = lumen::CheckStructSize(*options, "lumen_engine_options");
    if (!size.ok()) return FromStatus(size);
    resolved = lumen::CurrentLayout(*options);
  }
  return Guard([&] {
    absl::StatusOr<std::shared_ptr<lumen::Engine>> engine =
        lumen::Engine::Create(model->model, resolved);
    if (!engine.ok()) return FromStatus(engine.status());
    *out = new lumen_engine{*std::move(engine)};
    return Ok();
  });
}

void lumen_engine_destroy(lumen_engine* engine) { delete engine; }

lumen_status lumen_engine_backend(const lumen_engine* engine, int32_t* out) {
  LUMEN_REQUIRE_NOT_NULL(engine);
  LUMEN_REQUIRE_NOT_NULL(out);
  *out = engine->engine->backend().kind();
  return Ok();
}

lumen_status lumen_engine_num_threads(const lumen_engine* engine, int32_t* out) {
  LUMEN_REQUIRE_NOT_NULL(engine);
  LUMEN_REQUIRE_NOT_NULL(out);
  *out = engine->engine->backend().num_threads();
  return Ok();
}

void lumen_reservation_init(lumen_reservation* reservation) {
  if (reservation == nullptr) return;
  *reservation = lumen_reservation{};
  reservation->struct_size = sizeof(lumen_reservation);
  reservation->max_sessions = 1;
  reservation->max_tokens = 1;
}

lumen_status lumen_engine_reserve(lumen_engine* engine, const lumen_reservation* reservation) {
  LUMEN_REQUIRE_NOT_NULL(engine);
  LUMEN_REQUIRE_NOT_NULL(reservation);
  return Guard([&] { return FromStatus(engine->engine->Reserve(*reservation)); });
}

void lumen_memory_stats_init(lumen_memory_stats* stats) {
  if (stats == nullptr) return;
  *stats = lumen_memory_stats{};
  stats->struct_size = sizeof(lumen_memory_stats);
}

lumen_status lumen_engine_stats(const lumen_engine* engine, lumen_memory_stats* out) {
  LUMEN_REQUIRE_NOT_NULL(engine);
  LUMEN_REQUIRE_NOT_NULL(out);
  if (out->struct_size < lumen::kEngineStatsSizeV0 || out->struct_size > lumen::kMaxStructSize) {
    return Fail(LUMEN_ERROR_INVALID_ARGUMENT,
                absl::StrCat("lumen_memory_stats.struct_size is ", out->struct_size,
                             "; call lumen_memory_stats_init first"));
  }
  return Guard([&] {
    lumen_memory_stats stats;
    lumen_memory_stats_init(&stats);
    engine->engine->FillStats(stats);
    std::memcpy(out, &stats, sizeof(stats));
    return Ok();
  });
}

lumen_status lumen_engine_scratch_bytes(const lumen_engine* engine, int64_t* out) {
  LUMEN_REQUIRE_NOT_NULL(engine);
  LUMEN_REQUIRE_NOT_NULL(out);
  *out = engine->engine->backend().scratch_bytes();
  return Ok();
}

lumen_status lumen_engine_step_batch(lumen_engine* engine, int32_t layer,
                                     lumen_session* const* sessions, int32_t n,
                                     const lumen_layer_inputs* inputs,
                                     lumen_layer_output* output) {
  LUMEN_REQUIRE_NOT_NULL(engine);
  if (lumen_status s = CheckBatch(sessions, n, inputs, output); s != LUMEN_OK) return s;
  return Guard([&] {
    return FromStatus(engine->engine->Step(layer, UnwrapSessions(sessions, n), *inputs, *output));
  });
}

lumen_status lumen_engine_prefill_varlen(lumen_engine* engine, int32_t layer,
                                         lumen_session* const* sessions, int32_t n,
                                         const int32_t* cu_seqlens,
                                         const lumen_layer_inputs* inputs,
                                         lumen_layer_output* output) {
  LUMEN_REQUIRE_NOT_NULL(engine);
  LUMEN_REQUIRE_NOT_NULL(cu_seqlens);
  if (lumen_status s = CheckBatch(sessions, n, inputs, output); s != LUMEN_OK) return s;
  return Guard([&] {
    return FromStatus(engine->engine->Prefill(layer, UnwrapSessions(sessions, n),
                                              absl::MakeConstSpan(cu_seqlens, n + 1), *inputs,
                                              *output));
  });
}

}  // extern "C"
