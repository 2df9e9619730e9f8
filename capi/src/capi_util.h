#pragma once
// Shared by the C entry points: the handle structs, the thread-local error message and the
// conversion of absl::Status into lumen_status. Nothing here crosses the ABI.

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lumen/lumen.h"
#include "src/engine.h"
#include "src/layer_spec.h"
#include "src/model.h"
#include "src/session.h"

struct lumen_model_builder {
  std::vector<lumen::LayerSpec> layers;
};
struct lumen_model {
  std::shared_ptr<const lumen::Model> model;
};
struct lumen_engine {
  std::shared_ptr<lumen::Engine> engine;
};
struct lumen_session {
  std::unique_ptr<lumen::Session> session;
};

namespace lumen::capi {

// Records the message for lumen_last_error_message and returns the matching code.
lumen_status Fail(lumen_status status, absl::string_view message);
lumen_status FromStatus(const absl::Status& status);
// Clears the thread's message and returns LUMEN_OK.
lumen_status Ok();

// Runs body, turning any escaping C++ exception into a status; nothing throws across the ABI.
template <typename Body>
lumen_status Guard(Body&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(LUMEN_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return Fail(LUMEN_ERROR_INTERNAL, e.what());
  } catch (...) {
    return Fail(LUMEN_ERROR_INTERNAL, "unknown exception");
  }
}

// The C++ session pointers of a C array of n handles (NULL entries stay NULL for the engine to
// report by index).
inline std::vector<Session*> UnwrapSessions(lumen_session* const* sessions, int32_t n) {
  std::vector<Session*> out(n, nullptr);
  for (int32_t i = 0; i < n; ++i) {
    if (sessions[i] != nullptr) out[i] = sessions[i]->session.get();
  }
  return out;
}

// The arguments every batched call takes: n >= 0 sessions, the array present when n > 0.
inline lumen_status CheckSessionArray(lumen_session* const* sessions, int32_t n) {
  if (n < 0) return Fail(LUMEN_ERROR_INVALID_ARGUMENT, absl::StrCat("n is ", n, ", must be >= 0"));
  if (n > 0 && sessions == nullptr) return Fail(LUMEN_ERROR_INVALID_ARGUMENT, "sessions is NULL");
  return LUMEN_OK;
}

}  // namespace lumen::capi

// Returns LUMEN_ERROR_INVALID_ARGUMENT naming `arg` when it is NULL.
#define LUMEN_REQUIRE_NOT_NULL(arg)                                                 \
  do {                                                                              \
    if ((arg) == nullptr) {                                                         \
      return ::lumen::capi::Fail(LUMEN_ERROR_INVALID_ARGUMENT, #arg " is NULL");    \
    }                                                                               \
  } while (0)
