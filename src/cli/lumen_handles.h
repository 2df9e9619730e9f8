#pragma once
// What the `lumen` program's commands share around the C API: owned handles, the message
// of a failed call, and how a command stops on an error it cannot go past.

#include <lumen/lumen.h>

#include <cstdio>
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

// Prints "<program>: <message>" on stderr and exits with status 1.
[[noreturn]] inline void FailAs(const char* program, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", program, message.c_str());
  std::exit(1);
}

// Stops the program with lumen's own message if a lumen call failed.
inline void CheckAs(const char* program, lumen_status status, const char* call) {
  if (status != LUMEN_OK) FailAs(program, CallFailure(status, call));
}

}  // namespace lumen::cli
