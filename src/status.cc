#include "src/status.h"

#include <optional>

#include "absl/strings/cord.h"

namespace lumen {
namespace {

constexpr absl::string_view kPayloadKey = "lumen.status";

absl::StatusCode AbslCodeFor(lumen_status code) {
  switch (code) {
    case LUMEN_ERROR_INVALID_ARGUMENT: return absl::StatusCode::kInvalidArgument;
    case LUMEN_ERROR_OUT_OF_RANGE: return absl::StatusCode::kOutOfRange;
    case LUMEN_ERROR_MODEL_MISMATCH: return absl::StatusCode::kFailedPrecondition;
    case LUMEN_ERROR_OUT_OF_MEMORY: return absl::StatusCode::kResourceExhausted;
    case LUMEN_ERROR_UNSUPPORTED: return absl::StatusCode::kUnimplemented;
    case LUMEN_ERROR_BACKEND: return absl::StatusCode::kUnavailable;
    case LUMEN_ERROR_CORRUPT_SNAPSHOT: return absl::StatusCode::kDataLoss;
    case LUMEN_ERROR_NOT_FOUND: return absl::StatusCode::kNotFound;
    case LUMEN_ERROR_VERSION_CONFLICT: return absl::StatusCode::kAborted;
    case LUMEN_ERROR_UNAVAILABLE: return absl::StatusCode::kUnavailable;
    case LUMEN_ERROR_TIMEOUT: return absl::StatusCode::kDeadlineExceeded;
    case LUMEN_ERROR_UNCOMMITTED_TOKENS: return absl::StatusCode::kFailedPrecondition;
    default: return absl::StatusCode::kUnknown;
  }
}

}  // namespace

absl::Status LumenError(lumen_status code, absl::string_view message) {
  absl::Status status(AbslCodeFor(code), message);
  status.SetPayload(kPayloadKey, absl::Cord(std::string(1, static_cast<char>(code))));
  return status;
}

lumen_status LumenStatusOf(const absl::Status& status) {
  if (auto payload = status.GetPayload(kPayloadKey)) {
    const std::string bytes(*payload);
    if (bytes.size() == 1) return static_cast<lumen_status>(bytes[0]);
  }
  switch (status.code()) {
    case absl::StatusCode::kOk: return LUMEN_OK;
    case absl::StatusCode::kInvalidArgument: return LUMEN_ERROR_INVALID_ARGUMENT;
    case absl::StatusCode::kOutOfRange: return LUMEN_ERROR_OUT_OF_RANGE;
    case absl::StatusCode::kFailedPrecondition: return LUMEN_ERROR_MODEL_MISMATCH;
    case absl::StatusCode::kResourceExhausted: return LUMEN_ERROR_OUT_OF_MEMORY;
    case absl::StatusCode::kUnimplemented: return LUMEN_ERROR_UNSUPPORTED;
    case absl::StatusCode::kUnavailable: return LUMEN_ERROR_BACKEND;
    case absl::StatusCode::kDataLoss: return LUMEN_ERROR_CORRUPT_SNAPSHOT;
    default: return LUMEN_ERROR_INTERNAL;
  }
}

}  // namespace lumen
