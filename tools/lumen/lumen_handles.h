#pragma once
// What the `lumen` program's commands share around the C API: owned handles, the message
// of a failed call, how a command stops on an error it cannot go past, and the model and
// engine every command makes.

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

// The builder's model, or the program stops with lumen's message.
inline Owned<lumen_model> BuildModelAs(const char* program, lumen_model_builder* builder) {
  lumen_model* model = nullptr;
  CheckAs(program, lumen_model_builder_build(builder, &model), "lumen_model_builder_build");
  return Owned<lumen_model>(model);
}

// An engine of `model` on `backend` with `threads` CPU threads (0: the default), or the
// program stops with lumen's message.
inline Owned<lumen_engine> CreateEngineAs(const char* program, const lumen_model* model,
                                          lumen_backend backend, int32_t threads) {
  lumen_engine_options options;
  lumen_engine_options_init(&options);
  options.backend = backend;
  options.num_threads = threads;
  lumen_engine* engine = nullptr;
  CheckAs(program, lumen_engine_create(model, &options, &engine), "lumen_engine_create");
  return Owned<lumen_engine>(engine);
}

}  // namespace lumen::cli
