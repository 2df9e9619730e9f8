// The structs of lumen.h: what each _init function fills in, and struct_size both ways. A
// caller built against an older header (0.1.0's lumen_layer_options and lumen_layer_inputs)
// is read and written only as far as its struct reaches; a larger struct_size (a caller
// built against a newer header) is accepted only with zeros beyond the fields this library
// knows, and rejected naming the first non-zero byte's offset otherwise (the Linux kernel's
// convention for extensible structs). Every options and inputs struct goes through the
// same check.

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/api/api_test_util.h"
#include "tests/reference/layer_reference.h"
#include "tests/reference/session_fixture.h"

namespace lumen_test {
namespace {

TEST_CASE("options_init functions fill the documented defaults", "[capi]") {
  lumen_layer_options lo;
  std::memset(&lo, 0x5a, sizeof lo);
  lumen_layer_options_init(&lo);
  CHECK(lo.struct_size == sizeof(lumen_layer_options));
  CHECK(lo.family == 0);
  CHECK(lo.num_heads == 0);
  CHECK(lo.num_value_heads == 0);
  CHECK(lo.key_dim == 0);
  CHECK(lo.value_dim == 0);
  CHECK(lo.scale == 0.0f);
  CHECK(lo.feature_map == LUMEN_FEATURE_MAP_IDENTITY);
  CHECK(lo.normalize == 0);
  CHECK(lo.normalize_eps == 0.0f);
  CHECK(lo.qk_l2norm == 0);
  CHECK(lo.beta_sigmoid == 0);
  CHECK(lo.gate_raw == 0);
  CHECK(lo.state_dtype == LUMEN_DTYPE_FLOAT32);
  CHECK(lo.conv_size == 0);
  CHECK(lo.conv_activation == LUMEN_CONV_ACTIVATION_SILU);
  CHECK(lo.allow_neg_eigval == 0);
  CHECK(lo.gate_lower_bound == 0.0f);

  lumen_engine_options eo;
  std::memset(&eo, 0x5a, sizeof eo);
  lumen_engine_options_init(&eo);
  CHECK(eo.struct_size == sizeof(lumen_engine_options));
  CHECK(eo.backend == LUMEN_BACKEND_AUTO);
  CHECK(eo.num_threads == 0);
  CHECK(eo.device == 0);

  lumen_layer_inputs in;
  std::memset(&in, 0x5a, sizeof in);
  lumen_layer_inputs_init(&in);
  CHECK(in.struct_size == sizeof(lumen_layer_inputs));
  CHECK(in.dtype == LUMEN_DTYPE_FLOAT32);
  CHECK(in.memory == LUMEN_MEMORY_HOST);
  CHECK(in.q == nullptr);
  CHECK(in.k == nullptr);
  CHECK(in.v == nullptr);
  CHECK(in.g == nullptr);
  CHECK(in.beta == nullptr);
  CHECK(in.q_count == 0);
  CHECK(in.k_count == 0);
  CHECK(in.v_count == 0);
  CHECK(in.g_count == 0);
  CHECK(in.beta_count == 0);

  lumen_reservation reservation;
  std::memset(&reservation, 0x5a, sizeof reservation);
  lumen_reservation_init(&reservation);
  CHECK(reservation.struct_size == sizeof(lumen_reservation));
  CHECK(reservation.max_sessions == 1);
  CHECK(reservation.max_tokens == 1);

  lumen_layer_output out;
  std::memset(&out, 0x5a, sizeof out);
  lumen_layer_output_init(&out);
  CHECK(out.struct_size == sizeof(lumen_layer_output));
  CHECK(out.dtype == LUMEN_DTYPE_FLOAT32);
  CHECK(out.memory == LUMEN_MEMORY_HOST);
  CHECK(out.o == nullptr);
  CHECK(out.o_count == 0);
}

TEST_CASE("layer options are written only as far as the caller's struct reaches", "[capi]") {
  RefLayer layer = Layer(LUMEN_FAMILY_GATED_DELTA_NET, 1, 1, 4, 4);
  std::string error;
  ModelPtr model = BuildModel({layer}, &error);
  INFO(error);
  REQUIRE(model);
  // A 0.1.0 caller's struct (it ends before conv_size) followed by bytes it does not own; it
  // did not have to set struct_size, so both 0 and garbage mean 0.1.0's size.
  const size_t v0_size = offsetof(lumen_layer_options, conv_size);
  for (uint32_t declared : {0u, 1u, 5000u, static_cast<uint32_t>(v0_size)}) {
    INFO("struct_size " << declared);
    unsigned char buffer[sizeof(lumen_layer_options) + 16];
    std::memset(buffer, 0x5a, sizeof buffer);
    std::memcpy(buffer, &declared, sizeof declared);
    REQUIRE(lumen_model_layer_options(model.get(), 0,
                                      reinterpret_cast<lumen_layer_options*>(buffer)) == LUMEN_OK);
    lumen_layer_options seen;
    std::memcpy(&seen, buffer, v0_size);
    CHECK(seen.struct_size == v0_size);
    CHECK(seen.family == LUMEN_FAMILY_GATED_DELTA_NET);
    for (size_t i = v0_size; i < sizeof buffer; ++i) CHECK(buffer[i] == 0x5a);
  }
  // A newer caller's larger struct: the known fields are written, its own tail is kept.
  unsigned char buffer[sizeof(lumen_layer_options) + 16];
  std::memset(buffer, 0x5a, sizeof buffer);
  const uint32_t declared = sizeof buffer;
  std::memcpy(buffer, &declared, sizeof declared);
  REQUIRE(lumen_model_layer_options(model.get(), 0,
                                    reinterpret_cast<lumen_layer_options*>(buffer)) == LUMEN_OK);
  lumen_layer_options seen;
  std::memcpy(&seen, buffer, sizeof seen);
  CHECK(seen.struct_size == sizeof(lumen_layer_options));
  CHECK(seen.conv_size == 0);
  for (size_t i = sizeof(lumen_layer_options); i < sizeof buffer; ++i) CHECK(buffer[i] == 0x5a);
}

TEST_CASE("lumen_layer_inputs of 0.1.0's size (no stream) are accepted", "[capi]") {
  std::string error;
  const RefLayer layer = Layer(LUMEN_FAMILY_SSD, 1, 2, 4, 4);
  ModelPtr model = BuildModel({layer}, &error);
  REQUIRE(model);
  EnginePtr engine = MakeEngine(model.get(), 1, &error);
  REQUIRE(engine);
  SessionPtr session = MakeSession(engine.get(), &error);
  REQUIRE(session);
  std::mt19937 rng(TestSeed());
  const EncodedTokens tokens = EncodeTokens(RandomTokens(layer, 1, rng), LUMEN_DTYPE_FLOAT32);
  OutputBuffer out;
  out.Reset(layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
  lumen_layer_output o = out.Output(0, layer.VPerToken());
  // Bytes past the old struct_size are not the caller's: lumen must not read them.
  lumen_layer_inputs in = InputsFor(layer, tokens, 0, 1);
  in.stream = reinterpret_cast<void*>(0xdead);
  in.struct_size = offsetof(lumen_layer_inputs, stream);
  CHECK(lumen_session_step(session.get(), 0, &in, &o) == LUMEN_OK);
  in.struct_size = offsetof(lumen_layer_inputs, stream) - 1;
  CheckFailure(lumen_session_step(session.get(), 0, &in, &o),
               LUMEN_ERROR_INVALID_ARGUMENT, {"struct_size"});
}

}  // namespace
}  // namespace lumen_test

// ---------------------------------------------------------------------------------------------
// A larger struct_size than this library's

namespace lumen_fixture {
namespace {

constexpr size_t kExtra = 24;

// A struct as a newer header would lay it out: the known fields, then kExtra more bytes.
template <typename Struct>
struct Extended {
  Struct known;
  unsigned char extra[kExtra] = {};
};

template <typename Struct>
Extended<Struct> Extend(const Struct& known) {
  static_assert(offsetof(Extended<Struct>, extra) == sizeof(Struct));
  Extended<Struct> extended;
  extended.known = known;
  extended.known.struct_size = static_cast<uint32_t>(sizeof(Struct) + kExtra);
  return extended;
}

// Runs `call` on the struct extended with zeros (must pass), with a non-zero byte at each of
// a few offsets beyond the known fields (must fail naming it), and with a size far beyond
// any struct (must fail).
template <typename Struct, typename Call>
void CheckExtensions(const char* name, const Struct& valid, Call&& call) {
  INFO(name);
  Extended<Struct> extended = Extend(valid);
  {
    const lumen_status status = call(&extended.known);
    INFO("zeros beyond the known fields: " << Describe(status));
    CHECK(status == LUMEN_OK);
  }
  for (size_t at : {size_t{0}, size_t{5}, kExtra - 1}) {
    Extended<Struct> dirty = extended;
    dirty.extra[at] = 0x40;
    const lumen_status status = call(&dirty.known);
    const std::string message = lumen_last_error_message();
    INFO("byte " << sizeof(Struct) + at << " set: " << Describe(status));
    CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
    CHECK(message.find(name) != std::string::npos);
    CHECK(message.find("byte " + std::to_string(sizeof(Struct) + at) + " ") != std::string::npos);
  }
  Extended<Struct> huge = extended;
  huge.known.struct_size = 1u << 20;
  const lumen_status status = call(&huge.known);
  INFO("struct_size 2^20: " << Describe(status));
  CHECK(status == LUMEN_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("a larger struct_size is accepted only with zeros beyond the known fields",
          "[struct_size]") {
  const Stack stack({SmallLayer(LUMEN_FAMILY_DELTA_NET)});
  SessionPtr session = stack.NewSession();

  lumen_layer_options layer = lumen_test::ToOptions(stack.layers[0]);
  lumen_model_builder* builder = nullptr;
  REQUIRE_OK(lumen_model_builder_create(&builder));
  lumen_test::BuilderPtr builder_owner(builder);
  CheckExtensions("lumen_layer_options", layer, [&](const lumen_layer_options* options) {
    return lumen_model_builder_add_layer(builder, options, nullptr);
  });

  lumen_engine_options engine_options;
  lumen_engine_options_init(&engine_options);
  engine_options.num_threads = 1;
  CheckExtensions("lumen_engine_options", engine_options,
                  [&](const lumen_engine_options* options) {
                    lumen_engine* engine = nullptr;
                    const lumen_status status =
                        lumen_engine_create(stack.model.get(), options, &engine);
                    lumen_engine_destroy(engine);
                    return status;
                  });

  lumen_snapshot_options snapshot_options;
  lumen_snapshot_options_init(&snapshot_options);
  CheckExtensions("lumen_snapshot_options", snapshot_options,
                  [&](const lumen_snapshot_options* options) {
                    int64_t size = 0;
                    return lumen_session_snapshot_size(session.get(), options, &size);
                  });

  lumen_reservation reservation;
  lumen_reservation_init(&reservation);
  CheckExtensions("lumen_reservation", reservation, [&](const lumen_reservation* r) {
    return lumen_engine_reserve(stack.engine.get(), r);
  });

  std::mt19937 rng(5);
  const RefLayer& ref = stack.layers[0];
  const lumen_test::EncodedTokens tokens =
      lumen_test::EncodeTokens(lumen_test::RandomTokens(ref, 1, rng), LUMEN_DTYPE_FLOAT32);
  const lumen_layer_inputs inputs = lumen_test::InputsFor(ref, tokens, 0, 1);
  lumen_test::OutputBuffer out;
  out.Reset(ref.VPerToken(), LUMEN_DTYPE_FLOAT32);
  lumen_layer_output output = out.Output(0, ref.VPerToken());
  CheckExtensions("lumen_layer_inputs", inputs, [&](const lumen_layer_inputs* in) {
    return lumen_session_step(session.get(), 0, in, &output);
  });
  CheckExtensions("lumen_layer_output", output, [&](const lumen_layer_output* o) {
    // The call takes a mutable struct: a copy of the whole extended one (`o` is its first
    // member, so it points at it too).
    Extended<lumen_layer_output> copy = *reinterpret_cast<const Extended<lumen_layer_output>*>(o);
    return lumen_session_step(session.get(), 0, &inputs, &copy.known);
  });
}

}  // namespace
}  // namespace lumen_fixture
