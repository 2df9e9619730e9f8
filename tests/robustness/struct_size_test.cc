// struct_size larger than the library's structs (a caller built against a newer lumen.h):
// accepted when every byte beyond the fields this library knows is zero, rejected naming the
// first non-zero byte's offset otherwise (the Linux kernel's convention for extensible
// structs). Every options and inputs struct goes through the same check.

#include <cstddef>
#include <string>

#include "tests/robustness/robustness_util.h"

namespace lumen_robust {
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
}  // namespace lumen_robust
