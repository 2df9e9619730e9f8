// lumen.h's opening comment, "Conventions": NULL arguments and layer indexes in every call,
// destroy(NULL), and struct_size of callers built against older and newer headers, for each
// struct that carries one.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/header/header_claims.h"
#include "tests/reference/layer_reference.h"
#include "tests/reference/session_fixture.h"

namespace lumen_fixture {
namespace {

// The status of `call`, and that a failure comes with a message.
lumen_status Run(const std::function<lumen_status()>& call) {
  const lumen_status status = call();
  if (status != LUMEN_OK) CHECK(std::string(lumen_last_error_message()) != "");
  return status;
}

TEST_CASE("a NULL handle or out-pointer is INVALID_ARGUMENT, a layer outside the model "
          "OUT_OF_RANGE",
          "[header]") {
  LUMEN_CLAIM("Conventions",
              "In every call, a NULL handle or a NULL out-pointer that the call does not mark "
              "optional is LUMEN_ERROR_INVALID_ARGUMENT, and a layer index outside the model is "
              "LUMEN_ERROR_OUT_OF_RANGE; doc comments list the rest.");
  const Stack stack({SmallLayer(LUMEN_FAMILY_GLA)});
  SessionPtr session = stack.NewSession();
  lumen_model* model = stack.model.get();
  lumen_engine* engine = stack.engine.get();
  int32_t i32 = 0;
  int64_t i64 = 0;
  float values[64] = {};
  lumen_layer_options options;
  lumen_layer_options_init(&options);
  lumen_reservation reservation;
  lumen_reservation_init(&reservation);
  lumen_layer_inputs inputs;
  lumen_layer_inputs_init(&inputs);
  lumen_layer_output output;
  lumen_layer_output_init(&output);
  unsigned char buffer[16];

  const std::vector<std::pair<const char*, std::function<lumen_status()>>> null_calls = {
      {"builder_create(NULL)", [] { return lumen_model_builder_create(nullptr); }},
      {"add_layer(NULL builder)",
       [&] { return lumen_model_builder_add_layer(nullptr, &options, nullptr); }},
      {"build(NULL builder)",
       [&] {
         lumen_model* m = nullptr;
         return lumen_model_builder_build(nullptr, &m);
       }},
      {"num_layers(NULL model)", [&] { return lumen_model_num_layers(nullptr, &i32); }},
      {"num_layers(NULL out)", [&] { return lumen_model_num_layers(model, nullptr); }},
      {"state_bytes(NULL out)", [&] { return lumen_model_state_bytes(model, 0, nullptr); }},
      {"engine_create(NULL model)",
       [&] {
         lumen_engine* e = nullptr;
         return lumen_engine_create(nullptr, nullptr, &e);
       }},
      {"engine_create(NULL out)", [&] { return lumen_engine_create(model, nullptr, nullptr); }},
      {"engine_backend(NULL out)", [&] { return lumen_engine_backend(engine, nullptr); }},
      {"engine_num_threads(NULL engine)",
       [&] { return lumen_engine_num_threads(nullptr, &i32); }},
      {"engine_reserve(NULL engine)", [&] { return lumen_engine_reserve(nullptr, &reservation); }},
      {"session_create(NULL out)", [&] { return lumen_session_create(engine, nullptr); }},
      {"session_fork(NULL session)",
       [&] {
         lumen_session* s = nullptr;
         return lumen_session_fork(nullptr, &s);
       }},
      {"session_reset(NULL)", [&] { return lumen_session_reset(nullptr); }},
      {"session_model(NULL out)", [&] { return lumen_session_model(session.get(), nullptr); }},
      {"session_tokens(NULL out)",
       [&] { return lumen_session_tokens(session.get(), 0, nullptr); }},
      {"session_step(NULL inputs)",
       [&] { return lumen_session_step(session.get(), 0, nullptr, &output); }},
      {"session_step(NULL output)",
       [&] { return lumen_session_step(session.get(), 0, &inputs, nullptr); }},
      {"snapshot_size(NULL out)",
       [&] { return lumen_session_snapshot_size(session.get(), nullptr, nullptr); }},
      {"snapshot(NULL buffer)",
       [&] { return lumen_session_snapshot(session.get(), nullptr, nullptr, 16, nullptr); }},
      {"restore(NULL session)", [&] { return lumen_session_restore(nullptr, buffer, 16); }},
      {"save(NULL path)", [&] { return lumen_session_save(session.get(), nullptr, nullptr); }},
      {"load(NULL path)", [&] { return lumen_session_load(session.get(), nullptr); }},
  };
  for (const auto& [name, call] : null_calls) {
    INFO(name);
    CHECK(Run(call) == LUMEN_ERROR_INVALID_ARGUMENT);
  }

  const SessionState before = Capture(session.get(), stack.layers);
  for (int32_t layer : {-1, 1, 1 << 30}) {
    const std::vector<std::pair<const char*, std::function<lumen_status()>>> index_calls = {
        {"layer_options", [&] { return lumen_model_layer_options(model, layer, &options); }},
        {"state_count",
         [&] { return lumen_model_state_count(model, layer, LUMEN_STATE_MATRIX, &i64); }},
        {"session_tokens", [&] { return lumen_session_tokens(session.get(), layer, &i64); }},
        {"read_state",
         [&] {
           return lumen_session_read_state(session.get(), layer, LUMEN_STATE_MATRIX, values,
                                           64);
         }},
        {"write_state",
         [&] {
           return lumen_session_write_state(session.get(), layer, LUMEN_STATE_MATRIX, values,
                                            64);
         }},
        {"session_step",
         [&] { return lumen_session_step(session.get(), layer, &inputs, &output); }},
        {"session_prefill",
         [&] { return lumen_session_prefill(session.get(), layer, 1, &inputs, &output); }},
    };
    for (const auto& [name, call] : index_calls) {
      INFO(name << ", layer " << layer);
      CHECK(Run(call) == LUMEN_ERROR_OUT_OF_RANGE);
    }
  }
  // state_bytes takes -1 for the whole model; every other index outside it is out of range.
  CHECK(Run([&] { return lumen_model_state_bytes(model, 1, &i64); }) ==
        LUMEN_ERROR_OUT_OF_RANGE);
  CHECK(Capture(session.get(), stack.layers).SameBits(before));
}

TEST_CASE("a failing call leaves a message and changes nothing; results only on success",
          "[header]") {
  LUMEN_CLAIM("Conventions",
              "Every fallible call returns lumen_status; on failure lumen_last_error_message() "
              "holds a message for the calling thread, and no object was changed.");
  LUMEN_CLAIM("Conventions",
              "Results come back through trailing out-pointers, written only on success.");
  const Stack stack({SmallLayer(LUMEN_FAMILY_GLA)});
  SessionPtr session = stack.NewSession();
  AddHistory(stack, session.get(), 4, 1);
  const SessionState before = Capture(session.get(), stack.layers);
  lumen_model* const kUntouchedModel = reinterpret_cast<lumen_model*>(0x1);
  lumen_engine* const kUntouchedEngine = reinterpret_cast<lumen_engine*>(0x1);
  lumen_session* const kUntouchedSession = reinterpret_cast<lumen_session*>(0x1);
  int64_t i64 = -99;
  int32_t i32 = -99;
  lumen_model* model = kUntouchedModel;
  lumen_engine* engine = kUntouchedEngine;
  lumen_session* created = kUntouchedSession;
  lumen_engine_options bad_options;
  lumen_engine_options_init(&bad_options);
  bad_options.backend = 99;
  lumen_model_builder* builder = nullptr;
  REQUIRE_OK(lumen_model_builder_create(&builder));
  lumen_test::BuilderPtr builder_owner(builder);
  const std::vector<std::pair<const char*, std::function<lumen_status()>>> failing = {
      {"build of no layer", [&] { return lumen_model_builder_build(builder, &model); }},
      {"engine of an unknown backend",
       [&] { return lumen_engine_create(stack.model.get(), &bad_options, &engine); }},
      {"tokens of layer 5", [&] { return lumen_session_tokens(session.get(), 5, &i64); }},
      {"state count of part 99",
       [&] { return lumen_model_state_count(stack.model.get(), 0, 99, &i64); }},
      {"state bytes of layer 7",
       [&] { return lumen_model_state_bytes(stack.model.get(), 7, &i64); }},
      {"fork of NULL", [&] { return lumen_session_fork(nullptr, &created); }},
      {"restore of 3 bytes",
       [&] {
         const unsigned char junk[3] = {1, 2, 3};
         return lumen_session_restore(session.get(), junk, 3);
       }},
      {"add_layer of family 0",
       [&] {
         lumen_layer_options options;
         lumen_layer_options_init(&options);
         return lumen_model_builder_add_layer(builder, &options, &i32);
       }},
  };
  for (const auto& [name, call] : failing) {
    INFO(name);
    REQUIRE_OK(lumen_session_tokens(session.get(), 0, &i64));  // clears the thread's message
    i64 = -99;
    CHECK(std::string(lumen_last_error_message()).empty());
    CHECK(Run(call) != LUMEN_OK);
    CHECK(std::string(lumen_last_error_message()) != "");
    CHECK(i64 == -99);
    CHECK(i32 == -99);
    CHECK(model == kUntouchedModel);
    CHECK(engine == kUntouchedEngine);
    CHECK(created == kUntouchedSession);
    CHECK(Capture(session.get(), stack.layers).SameBits(before));
  }
}

LUMEN_CLAIM_PROVEN_ELSEWHERE("Conventions",
                             "Every fallible call returns lumen_status; on failure "
                             "lumen_last_error_message() holds a message for the calling thread, "
                             "and no object was changed.",
                             "tests/api/failing_calls_test.cc",
                             "failing session calls leave sessions and outputs unchanged");
LUMEN_CLAIM_PROVEN_ELSEWHERE("Conventions",
                             "Every fallible call returns lumen_status; on failure "
                             "lumen_last_error_message() holds a message for the calling thread, "
                             "and no object was changed.",
                             "tests/api/failing_calls_test.cc",
                             "failing batched calls leave every session unchanged");

LUMEN_CLAIM_UNPROVEN("Conventions",
                     "A session must not be used by two calls at the same time, including calls "
                     "that only read it (fork, read_state, snapshot) while another call changes "
                     "it.",
                     "a duty of the caller's, which the library does not check (the bindings "
                     "keep it: Rust's Session is Send but not Sync)");

TEST_CASE("every destroy(NULL) is a no-op", "[header]") {
  LUMEN_CLAIM("Conventions", "*_destroy(NULL) is a no-op.");
  // A failed call's message stays: a no-op touches nothing, the thread's error included.
  REQUIRE(lumen_model_builder_create(nullptr) == LUMEN_ERROR_INVALID_ARGUMENT);
  const std::string message = lumen_last_error_message();
  lumen_model_builder_destroy(nullptr);
  lumen_model_destroy(nullptr);
  lumen_engine_destroy(nullptr);
  lumen_session_destroy(nullptr);
  CHECK(lumen_last_error_message() == message);
}

// ---------------------------------------------------------------------------------------------
// struct_size

LUMEN_CLAIM_UNPROVEN(
    "Conventions",
    "Structs that start with struct_size (options, reservations, layer inputs and output) are "
    "filled by their *_init(); new fields are only ever added at the end, and each says since "
    "which version.",
    "a rule for the header's authors, not a behaviour: src/struct_versions.h holds it at compile "
    "time (each struct's added fields follow its first version and end at sizeof), and the "
    "struct_size tests below list each struct's versions");

// Whether a struct of `size` bytes is accepted by `call`, given the bytes of a valid struct
// followed by zeros (the caller's bytes: up to the struct_size it declares).
template <typename Struct, typename Call>
lumen_status WithSize(const Struct& valid, uint32_t size, Call&& call) {
  std::vector<unsigned char> bytes(std::max<size_t>(size, sizeof(Struct)) + 64, 0);
  std::memcpy(bytes.data(), &valid, sizeof(Struct));
  // The bytes the caller does not own past a smaller size: garbage the library must not read.
  for (size_t i = size; i < sizeof(Struct); ++i) bytes[i] = 0xa5;
  std::memcpy(bytes.data(), &size, sizeof size);
  return call(reinterpret_cast<Struct*>(bytes.data()));
}

// The sizes each struct's history allows between its first version and this header: the
// first version's end, and the end of each field added since (lumen.h marks them "Since").
template <typename Struct, typename Call>
void CheckSizesUpToSizeof(const char* name, const Struct& valid, size_t first_size,
                          const std::vector<size_t>& added_field_ends, Call&& call) {
  INFO(name);
  for (size_t size = 0; size <= sizeof(Struct); ++size) {
    const bool whole = size == first_size ||
                       std::find(added_field_ends.begin(), added_field_ends.end(), size) !=
                           added_field_ends.end();
    const lumen_status status = WithSize(valid, static_cast<uint32_t>(size), call);
    INFO("struct_size " << size << " of " << sizeof(Struct) << ": " << Describe(status));
    if (whole) {
      CHECK(status == LUMEN_OK);
    } else {
      CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
      CHECK(std::string(lumen_last_error_message()).find("struct_size") != std::string::npos);
    }
  }
}

struct Calls {
  Calls() : stack({SmallLayer(LUMEN_FAMILY_DELTA_NET)}), session(stack.NewSession()) {
    REQUIRE_OK(lumen_model_builder_create(&builder_handle));
    builder.reset(builder_handle);
    std::mt19937 rng(5);
    const RefLayer& ref = stack.layers[0];
    tokens = lumen_test::EncodeTokens(lumen_test::RandomTokens(ref, 1, rng), LUMEN_DTYPE_FLOAT32);
    inputs = lumen_test::InputsFor(ref, tokens, 0, 1);
    out.Reset(ref.VPerToken(), LUMEN_DTYPE_FLOAT32);
    output = out.Output(0, ref.VPerToken());
    layer = lumen_test::ToOptions(ref);
    lumen_engine_options_init(&engine_options);
    engine_options.num_threads = 1;
    lumen_snapshot_options_init(&snapshot_options);
    lumen_reservation_init(&reservation);
  }
  lumen_status AddLayer(const lumen_layer_options* o) {
    return lumen_model_builder_add_layer(builder.get(), o, nullptr);
  }
  lumen_status CreateEngine(const lumen_engine_options* o) {
    lumen_engine* engine = nullptr;
    const lumen_status status = lumen_engine_create(stack.model.get(), o, &engine);
    lumen_engine_destroy(engine);
    return status;
  }
  lumen_status SnapshotSize(const lumen_snapshot_options* o) {
    int64_t size = 0;
    return lumen_session_snapshot_size(session.get(), o, &size);
  }
  lumen_status Reserve(const lumen_reservation* r) {
    return lumen_engine_reserve(stack.engine.get(), r);
  }
  lumen_status StepWithInputs(const lumen_layer_inputs* in) {
    return lumen_session_step(session.get(), 0, in, &output);
  }
  lumen_status StepWithOutput(lumen_layer_output* o) {
    return lumen_session_step(session.get(), 0, &inputs, o);
  }

  Stack stack;
  SessionPtr session;
  lumen_model_builder* builder_handle = nullptr;
  lumen_test::BuilderPtr builder;
  lumen_test::EncodedTokens tokens;
  lumen_test::OutputBuffer out;
  lumen_layer_inputs inputs;
  lumen_layer_output output;
  lumen_layer_options layer;
  lumen_engine_options engine_options;
  lumen_snapshot_options snapshot_options;
  lumen_reservation reservation;
};

TEST_CASE("struct_size: a size between fields from the first version up is accepted, one "
          "below it or inside a field is INVALID_ARGUMENT",
          "[header][struct_size]") {
  LUMEN_CLAIM("Conventions",
              "A struct_size that ends between two fields, from the end of the struct's first "
              "version up to this header's sizeof, is accepted (a caller built against an older "
              "header): the fields wholly inside it are read and the later ones take their "
              "defaults.");
  LUMEN_CLAIM("Conventions",
              "A struct_size below the first version's end, or one that ends inside a field, is "
              "LUMEN_ERROR_INVALID_ARGUMENT.");
  Calls calls;
  // lumen_layer_options: 0.1.0's struct ended before conv_size; conv_size and conv_activation
  // came in 0.2, allow_neg_eigval and gate_lower_bound in 0.4.
  CheckSizesUpToSizeof("lumen_layer_options", calls.layer,
                       offsetof(lumen_layer_options, conv_size),
                       {offsetof(lumen_layer_options, conv_activation),
                        offsetof(lumen_layer_options, allow_neg_eigval),
                        offsetof(lumen_layer_options, gate_lower_bound),
                        sizeof(lumen_layer_options)},
                       [&](const lumen_layer_options* o) { return calls.AddLayer(o); });
  // lumen_layer_inputs: 0.1.0's struct ended before stream.
  CheckSizesUpToSizeof("lumen_layer_inputs", calls.inputs, offsetof(lumen_layer_inputs, stream),
                       {sizeof(lumen_layer_inputs)},
                       [&](const lumen_layer_inputs* in) { return calls.StepWithInputs(in); });
  // lumen_engine_options: 0.2's struct ended before memory_budget_bytes; the budget's two
  // fields came in 0.3.
  CheckSizesUpToSizeof("lumen_engine_options", calls.engine_options,
                       offsetof(lumen_engine_options, memory_budget_bytes),
                       {offsetof(lumen_engine_options, spill_directory),
                        sizeof(lumen_engine_options)},
                       [&](const lumen_engine_options* o) { return calls.CreateEngine(o); });
  // The structs still at their first version.
  CheckSizesUpToSizeof("lumen_layer_output", calls.output, sizeof(lumen_layer_output), {},
                       [&](lumen_layer_output* o) { return calls.StepWithOutput(o); });
  CheckSizesUpToSizeof("lumen_snapshot_options", calls.snapshot_options,
                       sizeof(lumen_snapshot_options), {},
                       [&](const lumen_snapshot_options* o) { return calls.SnapshotSize(o); });
  CheckSizesUpToSizeof("lumen_reservation", calls.reservation, sizeof(lumen_reservation), {},
                       [&](const lumen_reservation* r) { return calls.Reserve(r); });
}

TEST_CASE("struct_size: the fields beyond an older caller's size take their defaults",
          "[header][struct_size]") {
  LUMEN_CLAIM("Conventions",
              "A struct_size that ends between two fields, from the end of the struct's first "
              "version up to this header's sizeof, is accepted (a caller built against an older "
              "header): the fields wholly inside it are read and the later ones take their "
              "defaults.");
  Calls calls;
  // The bytes past the caller's size hold garbage (WithSize): were they read, conv_size 0xa5a5a5a5
  // would fail the call, and a valid-looking one would show in the model.
  lumen_layer_options with_conv = calls.layer;  // delta_net
  with_conv.conv_size = 3;
  with_conv.conv_activation = LUMEN_CONV_ACTIVATION_NONE;
  with_conv.allow_neg_eigval = 1;
  struct Case {
    uint32_t size;
    int32_t conv_size, conv_activation, allow_neg_eigval;
  };
  for (const Case& c : {Case{offsetof(lumen_layer_options, conv_size), 0,
                             LUMEN_CONV_ACTIVATION_SILU, 0},
                        Case{offsetof(lumen_layer_options, conv_activation), 3,
                             LUMEN_CONV_ACTIVATION_SILU, 0},
                        Case{offsetof(lumen_layer_options, allow_neg_eigval), 3,
                             LUMEN_CONV_ACTIVATION_NONE, 0},
                        Case{offsetof(lumen_layer_options, gate_lower_bound), 3,
                             LUMEN_CONV_ACTIVATION_NONE, 1},
                        Case{sizeof(lumen_layer_options), 3, LUMEN_CONV_ACTIVATION_NONE, 1}}) {
    INFO("struct_size " << c.size);
    lumen_model_builder* builder = nullptr;
    REQUIRE_OK(lumen_model_builder_create(&builder));
    lumen_test::BuilderPtr owner(builder);
    REQUIRE_OK(WithSize(with_conv, c.size, [&](const lumen_layer_options* o) {
      return lumen_model_builder_add_layer(builder, o, nullptr);
    }));
    // A convolution needs its weights before the model builds.
    if (c.conv_size > 0) {
      const lumen_layer_options& o = with_conv;
      std::vector<float> qk(static_cast<size_t>(o.num_heads * o.key_dim * c.conv_size), 0.5f);
      std::vector<float> v(static_cast<size_t>(o.num_value_heads * o.value_dim * c.conv_size),
                           0.5f);
      REQUIRE_OK(lumen_model_builder_set_param(builder, 0, LUMEN_PARAM_CONV_Q_WEIGHT, qk.data(),
                                               static_cast<int64_t>(qk.size())));
      REQUIRE_OK(lumen_model_builder_set_param(builder, 0, LUMEN_PARAM_CONV_K_WEIGHT, qk.data(),
                                               static_cast<int64_t>(qk.size())));
      REQUIRE_OK(lumen_model_builder_set_param(builder, 0, LUMEN_PARAM_CONV_V_WEIGHT, v.data(),
                                               static_cast<int64_t>(v.size())));
    }
    lumen_model* model = nullptr;
    REQUIRE_OK(lumen_model_builder_build(builder, &model));
    lumen_test::ModelPtr model_owner(model);
    lumen_layer_options seen;
    lumen_layer_options_init(&seen);
    REQUIRE_OK(lumen_model_layer_options(model, 0, &seen));
    CHECK(seen.conv_size == c.conv_size);
    CHECK(seen.conv_activation == c.conv_activation);
    CHECK(seen.allow_neg_eigval == c.allow_neg_eigval);
  }

  // 0.1.0's lumen_layer_inputs: `stream` (garbage past the size) is not read; the CPU backend
  // ignores it anyway, so the proof is that the call succeeds and steps like a full struct.
  CHECK(WithSize(calls.inputs, offsetof(lumen_layer_inputs, stream),
                 [&](const lumen_layer_inputs* in) { return calls.StepWithInputs(in); }) ==
        LUMEN_OK);
}

// Runs `call` on the struct followed by `extra` zero bytes (struct_size covering them), then
// with each of those bytes non-zero in turn.
template <typename Struct, typename Call>
void CheckLargerSizes(const char* name, const Struct& valid, Call&& call) {
  INFO(name);
  constexpr size_t kExtra = 24;
  std::vector<unsigned char> bytes(sizeof(Struct) + kExtra, 0);
  std::memcpy(bytes.data(), &valid, sizeof(Struct));
  const uint32_t size = static_cast<uint32_t>(bytes.size());
  std::memcpy(bytes.data(), &size, sizeof size);
  {
    const lumen_status status = call(reinterpret_cast<Struct*>(bytes.data()));
    INFO("zeros beyond the known fields: " << Describe(status));
    CHECK(status == LUMEN_OK);
  }
  for (size_t at = sizeof(Struct); at < bytes.size(); ++at) {
    std::vector<unsigned char> dirty = bytes;
    dirty[at] = 0x01;
    const lumen_status status = call(reinterpret_cast<Struct*>(dirty.data()));
    const std::string message = lumen_last_error_message();
    INFO("byte " << at << " set: " << Describe(status));
    CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(message.find("byte " + std::to_string(at) + " ") != std::string::npos);
  }
}

TEST_CASE("struct_size: a larger one is accepted only with zeros beyond the known fields",
          "[header][struct_size]") {
  LUMEN_CLAIM("Conventions",
              "A larger one (a caller built against a newer header) is accepted only when every "
              "byte beyond the fields this library knows is zero, i.e. the newer fields are left "
              "at their defaults; otherwise the call fails with LUMEN_ERROR_INVALID_ARGUMENT "
              "naming the offset of the first non-zero byte (the Linux kernel's convention for "
              "extensible structs).");
  Calls calls;
  CheckLargerSizes("lumen_layer_options", calls.layer,
                   [&](const lumen_layer_options* o) { return calls.AddLayer(o); });
  CheckLargerSizes("lumen_layer_inputs", calls.inputs,
                   [&](const lumen_layer_inputs* in) { return calls.StepWithInputs(in); });
  CheckLargerSizes("lumen_layer_output", calls.output,
                   [&](lumen_layer_output* o) { return calls.StepWithOutput(o); });
  CheckLargerSizes("lumen_engine_options", calls.engine_options,
                   [&](const lumen_engine_options* o) { return calls.CreateEngine(o); });
  CheckLargerSizes("lumen_snapshot_options", calls.snapshot_options,
                   [&](const lumen_snapshot_options* o) { return calls.SnapshotSize(o); });
  CheckLargerSizes("lumen_reservation", calls.reservation,
                   [&](const lumen_reservation* r) { return calls.Reserve(r); });
}

TEST_CASE("struct_size is at most 4096", "[header][struct_size]") {
  LUMEN_CLAIM("Conventions", "struct_size is at most 4096.");
  Calls calls;
  auto check = [](const char* name, auto valid, auto&& call) {
    INFO(name);
    CHECK(WithSize(valid, 4096, call) == LUMEN_OK);
    CHECK(WithSize(valid, 4097, call) == LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(WithSize(valid, 0xffffffffu >> 12, call) == LUMEN_ERROR_INVALID_ARGUMENT);
  };
  check("lumen_layer_options", calls.layer,
        [&](const lumen_layer_options* o) { return calls.AddLayer(o); });
  check("lumen_layer_inputs", calls.inputs,
        [&](const lumen_layer_inputs* in) { return calls.StepWithInputs(in); });
  check("lumen_layer_output", calls.output,
        [&](lumen_layer_output* o) { return calls.StepWithOutput(o); });
  check("lumen_engine_options", calls.engine_options,
        [&](const lumen_engine_options* o) { return calls.CreateEngine(o); });
  check("lumen_snapshot_options", calls.snapshot_options,
        [&](const lumen_snapshot_options* o) { return calls.SnapshotSize(o); });
  check("lumen_reservation", calls.reservation,
        [&](const lumen_reservation* r) { return calls.Reserve(r); });
}

}  // namespace
}  // namespace lumen_fixture
