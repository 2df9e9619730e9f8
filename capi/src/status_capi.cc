// Versions, the names of statuses and backends, and the thread-local error message.

#include <string>

#include "capi/src/capi_util.h"
#include "src/layer_traits.h"
#include "src/status.h"

namespace lumen::capi {
namespace {

std::string& LastMessage() {
  thread_local std::string message;
  return message;
}

}  // namespace

lumen_status Fail(lumen_status status, absl::string_view message) {
  LastMessage().assign(message.data(), message.size());
  return status;
}

lumen_status FromStatus(const absl::Status& status) {
  if (status.ok()) return Ok();
  return Fail(LumenStatusOf(status), status.message());
}

lumen_status Ok() {
  LastMessage().clear();
  return LUMEN_OK;
}

}  // namespace lumen::capi

extern "C" {

int32_t lumen_version_number(void) {
  return LUMEN_VERSION_MAJOR * 10000 + LUMEN_VERSION_MINOR * 100 + LUMEN_VERSION_PATCH;
}

#define LUMEN_STRINGIFY_(x) #x
#define LUMEN_STRINGIFY(x) LUMEN_STRINGIFY_(x)

const char* lumen_version_string(void) {
  return LUMEN_STRINGIFY(LUMEN_VERSION_MAJOR) "." LUMEN_STRINGIFY(
      LUMEN_VERSION_MINOR) "." LUMEN_STRINGIFY(LUMEN_VERSION_PATCH);
}

const char* lumen_status_string(int32_t status) {
  switch (status) {
    case LUMEN_OK: return "LUMEN_OK";
    case LUMEN_ERROR_INVALID_ARGUMENT: return "LUMEN_ERROR_INVALID_ARGUMENT";
    case LUMEN_ERROR_OUT_OF_RANGE: return "LUMEN_ERROR_OUT_OF_RANGE";
    case LUMEN_ERROR_MODEL_MISMATCH: return "LUMEN_ERROR_MODEL_MISMATCH";
    case LUMEN_ERROR_OUT_OF_MEMORY: return "LUMEN_ERROR_OUT_OF_MEMORY";
    case LUMEN_ERROR_UNSUPPORTED: return "LUMEN_ERROR_UNSUPPORTED";
    case LUMEN_ERROR_BACKEND: return "LUMEN_ERROR_BACKEND";
    case LUMEN_ERROR_INTERNAL: return "LUMEN_ERROR_INTERNAL";
    case LUMEN_ERROR_BUFFER_TOO_SMALL: return "LUMEN_ERROR_BUFFER_TOO_SMALL";
    case LUMEN_ERROR_CORRUPT_SNAPSHOT: return "LUMEN_ERROR_CORRUPT_SNAPSHOT";
    case LUMEN_ERROR_SNAPSHOT_VERSION: return "LUMEN_ERROR_SNAPSHOT_VERSION";
    case LUMEN_ERROR_IO: return "LUMEN_ERROR_IO";
    case LUMEN_ERROR_NOT_FOUND: return "LUMEN_ERROR_NOT_FOUND";
    case LUMEN_ERROR_VERSION_CONFLICT: return "LUMEN_ERROR_VERSION_CONFLICT";
    case LUMEN_ERROR_UNAVAILABLE: return "LUMEN_ERROR_UNAVAILABLE";
    case LUMEN_ERROR_TIMEOUT: return "LUMEN_ERROR_TIMEOUT";
    case LUMEN_ERROR_UNCOMMITTED_TOKENS: return "LUMEN_ERROR_UNCOMMITTED_TOKENS";
  }
  return "LUMEN_ERROR_UNKNOWN_STATUS";
}

const char* lumen_backend_string(int32_t backend) {
  switch (backend) {
    case LUMEN_BACKEND_AUTO: return "AUTO";
    case LUMEN_BACKEND_CPU: return "CPU";
    case LUMEN_BACKEND_CUDA: return "CUDA";
    case LUMEN_BACKEND_ROCM: return "ROCM";
  }
  return "UNKNOWN";
}

const char* lumen_family_string(int32_t family) {
  return lumen::FamilyName(static_cast<lumen::Family>(family));
}

const char* lumen_last_error_message(void) { return lumen::capi::LastMessage().c_str(); }

}  // extern "C"
