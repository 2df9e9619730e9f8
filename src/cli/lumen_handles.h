#pragma once
// What the `lumen` program's commands share around the C API: owned handles, and the
// message of a failed call.

#include <lumen/lumen.h>

#include <cstdlib>
#include <memory>
#include <string>

namespace lumen::cli {

struct Destroy {
  void operator()(lumen_model_builder* p) const { lumen_model_builder_destroy(p); }
  void operator()(lumen_model* p) const { lumen_model_destroy(p); }
  void operator()(lumen_engine* p) const { lumen_engine_destroy(p); }
  void operator()(lumen_session* p) const { lumen_session_destroy(p); }
  void operator()(void* p) const { std::free(p); }  // buffers from std::aligned_alloc
};
template <typename T>
using Owned = std::unique_ptr<T, Destroy>;

// "<call> failed: <status>: <lumen's message>". Call it right after the failed call: the
// message is the calling thread's last error, which the next lumen call replaces.
inline std::string CallFailure(lumen_status status, const char* call) {
  const std::string message = lumen_last_error_message();
  return std::string(call) + " failed: " + lumen_status_string(status) + ": " + message;
}

}  // namespace lumen::cli
