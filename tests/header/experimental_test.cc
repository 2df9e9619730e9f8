// lumen.h's "Experimental" section (LUMEN_EXPERIMENTAL, defined for every test).

#include <catch2/catch.hpp>

#include <cstdint>

#include "lumen/lumen.h"
#include "tests/header/header_claims.h"
#include "tests/reference/layer_reference.h"
#include "tests/reference/session_fixture.h"

namespace lumen_fixture {
namespace {

TEST_CASE("a CPU engine holds no device scratch, whatever it ran or reserved", "[header]") {
  LUMEN_CLAIM("lumen_engine_scratch_bytes", "Always 0 for the CPU backend.");
  const RefLayer layer = SmallLayer(LUMEN_FAMILY_GATED_DELTA_NET);
  const Stack stack({layer});
  lumen_engine_options options;
  lumen_engine_options_init(&options);
  options.backend = LUMEN_BACKEND_CPU;
  lumen_engine* raw = nullptr;
  REQUIRE_OK(lumen_engine_create(stack.model.get(), &options, &raw));
  EnginePtr engine(raw);
  int64_t scratch = -1;
  REQUIRE_OK(lumen_engine_scratch_bytes(engine.get(), &scratch));
  CHECK(scratch == 0);
  lumen_session* session_raw = nullptr;
  REQUIRE_OK(lumen_session_create(engine.get(), &session_raw));
  SessionPtr session(session_raw);
  AddHistory(stack, session.get(), 200, 1);  // a prefill of many chunks
  REQUIRE_OK(lumen_engine_scratch_bytes(engine.get(), &scratch));
  CHECK(scratch == 0);
  lumen_reservation reservation;
  lumen_reservation_init(&reservation);
  reservation.max_sessions = 16;
  reservation.max_tokens = 1 << 16;
  REQUIRE_OK(lumen_engine_reserve(engine.get(), &reservation));
  REQUIRE_OK(lumen_engine_scratch_bytes(engine.get(), &scratch));
  CHECK(scratch == 0);
}

LUMEN_CLAIM_PROVEN_ELSEWHERE("lumen_engine_scratch_bytes",
                             "A call that needs no more than this grows nothing.",
                             "tests/backends/cuda/cuda_graphs_test.cc",
                             "a reserved CUDA engine captures prefills and conv steps without a "
                             "first run");

}  // namespace
}  // namespace lumen_fixture
