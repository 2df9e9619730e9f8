// The snapshot format and what restores across: a newer format version gives
// SNAPSHOT_VERSION; a snapshot of another model gives MODEL_MISMATCH naming what differs;
// the layers' state dtype is not part of the model's identity (fp32 <-> bf16-state sessions
// restore across); bf16 snapshots are half the payload, within 2^-8 per element; and a
// format-1 snapshot written by lumen 0.1.0 (tests/snapshot/format1_two_layers.snap) still
// restores.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/reference/layer_reference.h"
#include "tests/snapshot/snapshot_test_util.h"

namespace lumen_snapshot_test {
namespace {

TEST_CASE("a newer format version gives SNAPSHOT_VERSION and changes nothing",
          "[snapshot][version]") {
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(14);
  SessionPtr source = stack.NewSession(), target = stack.NewSession();
  AddHistory(stack, {source.get()}, rng);
  AddHistory(stack, {target.get()}, rng, 25);
  Bytes b = TakeSnapshot(source.get());
  const uint32_t version = GENERATE(kFormatVersion + 1, kFormatVersion + 2, 0xffffffffu);
  PutU32(b, kVersionOffset, version);
  Reseal(b);
  ExpectRejected(target.get(), stack.model.get(), b, LUMEN_ERROR_SNAPSHOT_VERSION,
                 {std::to_string(version).c_str()});

  // Unsealed, the same edit is damage: the checksum is checked before the version.
  Bytes unsealed = TakeSnapshot(source.get());
  PutU32(unsealed, kVersionOffset, version);
  ExpectRejected(target.get(), stack.model.get(), unsealed, LUMEN_ERROR_CORRUPT_SNAPSHOT);
}

// ---------------------------------------------------------------------------------------------
// Other models
// ---------------------------------------------------------------------------------------------

TEST_CASE("a snapshot of another model gives MODEL_MISMATCH naming what differs",
          "[snapshot][mismatch]") {
  const Stack base(MixedLayers(kDims));
  std::mt19937 rng(21);
  SessionPtr source = base.NewSession();
  AddHistory(base, {source.get()}, rng);
  const Bytes snapshot = TakeSnapshot(source.get());
  const Bytes snapshot_bf16 = TakeSnapshot(source.get(), LUMEN_DTYPE_BFLOAT16);

  struct Variant {
    const char* name;
    std::vector<LayerDesc> layers;
    std::vector<const char*> words;  // the message must contain each
  };
  std::vector<Variant> variants;
  {
    Dims d = kDims;
    d.k = 8;
    variants.push_back({"other dims (K)", MixedLayers(d), {"layer 0", "K=16", "K=8"}});
  }
  {
    Dims d = kDims;
    d.hv = 2;
    variants.push_back({"other dims (HV)", MixedLayers(d), {"layer 0", "HV=4", "HV=2"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[2] = Layer(LUMEN_FAMILY_SSD, kDims);
    variants.push_back({"other family in layer 2", l, {"layer 2", "gla", "ssd"}});
  }
  {
    auto l = MixedLayers(kDims);
    l.pop_back();
    variants.push_back({"fewer layers", l, {"4 layers", "3"}});
  }
  {
    auto l = MixedLayers(kDims);
    l.push_back(Retention(kDims));
    variants.push_back({"more layers", l, {"4 layers", "5"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[0] = GatedDeltaNet(kDims, 0.25f);
    variants.push_back({"other A_log", l, {"options or parameters"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[0].dt_bias[1] += 1.0f;
    variants.push_back({"other dt_bias", l, {"options or parameters"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[3].decay = {0.9f, 0.8f, 0.7f, 0.6f};
    variants.push_back({"other retention decays", l, {"options or parameters"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[3].options.qk_l2norm = 1;
    variants.push_back({"other option (qk_l2norm)", l, {"options or parameters"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[0].options.allow_neg_eigval = 1;  // fla's: the same dims and parameters, beta in [0, 2]
    variants.push_back({"other option (allow_neg_eigval)", l, {"options or parameters"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[0].options.gate_lower_bound = -5.0f;  // fla's lower-bounded gate on the same parameters
    variants.push_back({"other option (gate_lower_bound)", l, {"options or parameters"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[2].options.scale = 0.5f;
    variants.push_back({"other option (scale)", l, {"options or parameters"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[1].options.normalize = 0;
    variants.push_back({"no normalizer", l, {"layer 1", "normalizer"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[0].conv_weight[2][5] += 0.125f;
    variants.push_back({"other conv weight", l, {"options or parameters"}});
  }
  {
    auto l = MixedLayers(kDims);
    l[0].options.conv_activation = LUMEN_CONV_ACTIVATION_NONE;
    variants.push_back({"other conv activation", l, {"options or parameters"}});
  }
  {
    auto l = MixedLayers(kDims);
    SetConv(l[0], 0, false);
    variants.push_back({"no convolution", l, {"layer 0", "conv_size 4", "0"}});
  }
  {
    auto l = MixedLayers(kDims);
    SetConv(l[0], 3, false);
    variants.push_back({"other conv_size", l, {"layer 0", "conv_size 4", "3"}});
  }

  for (const Variant& v : variants) {
    INFO("variant: " << v.name);
    const Stack other(v.layers);
    SessionPtr target = other.NewSession();
    AddHistory(other, {target.get()}, rng, 20);
    for (const Bytes* bytes : {&snapshot, &snapshot_bf16}) {
      const SessionState before = Capture(target.get(), other.model.get());
      const lumen_status status = Restore(target.get(), *bytes);
      const std::string message = lumen_last_error_message();
      INFO("restore -> " << lumen_status_string(status) << ": " << message);
      CHECK(status == LUMEN_ERROR_MODEL_MISMATCH);
      for (const char* word : v.words) CHECK(message.find(word) != std::string::npos);
      CHECK(SameBits(before, Capture(target.get(), other.model.get())));
    }
    // And the other way round.
    const Bytes theirs = TakeSnapshot(target.get());
    SessionPtr mine = base.NewSession();
    AddHistory(base, {mine.get()}, rng, 20);
    ExpectRejected(mine.get(), base.model.get(), theirs, LUMEN_ERROR_MODEL_MISMATCH);
  }
}

TEST_CASE("the state dtype of the layers is not part of the model's identity",
          "[snapshot][bf16]") {
  // fp32 session <-> bf16-state session, both ways, both snapshot dtypes.
  const Stack fp32(MixedLayers(kDims, LUMEN_DTYPE_FLOAT32));
  const Stack bf16(MixedLayers(kDims, LUMEN_DTYPE_BFLOAT16));
  int64_t fp32_bytes = 0, bf16_bytes = 0;
  for (int32_t i = 0; i < fp32.num_layers(); ++i) {
    int64_t a = 0, b = 0;
    REQUIRE(lumen_model_state_bytes(fp32.model.get(), i, &a) == LUMEN_OK);
    REQUIRE(lumen_model_state_bytes(bf16.model.get(), i, &b) == LUMEN_OK);
    fp32_bytes += a;
    bf16_bytes += b;
  }
  CHECK(bf16_bytes * 2 == fp32_bytes);

  std::mt19937 rng(31);
  SessionPtr a = fp32.NewSession();
  AddHistory(fp32, {a.get()}, rng);
  const SessionState a_state = Capture(a.get(), fp32.model.get());

  SECTION("fp32 snapshot of an fp32 session into a bf16-state session rounds to nearest even") {
    SessionPtr b = bf16.NewSession();
    REQUIRE_OK(Restore(b.get(), TakeSnapshot(a.get())));
    const SessionState b_state = Capture(b.get(), bf16.model.get());
    CHECK(SameBits(RoundedToBFloat16(a_state), b_state));
    // ... and back: the fp32 session gets the bf16 values exactly.
    SessionPtr a2 = fp32.NewSession();
    REQUIRE_OK(Restore(a2.get(), TakeSnapshot(b.get())));
    CHECK(SameBits(b_state, Capture(a2.get(), fp32.model.get())));
    REQUIRE_OK(Restore(a2.get(), TakeSnapshot(b.get(), LUMEN_DTYPE_BFLOAT16)));
    CHECK(SameBits(b_state, Capture(a2.get(), fp32.model.get())));
    // Rounding once or twice gives the same bf16 snapshot bytes.
    CHECK(TakeSnapshot(b.get(), LUMEN_DTYPE_BFLOAT16) ==
          TakeSnapshot(a.get(), LUMEN_DTYPE_BFLOAT16));
  }
  SECTION("bf16 snapshot of an fp32 session into a bf16-state session") {
    SessionPtr b = bf16.NewSession();
    REQUIRE_OK(Restore(b.get(), TakeSnapshot(a.get(), LUMEN_DTYPE_BFLOAT16)));
    CHECK(SameBits(RoundedToBFloat16(a_state), Capture(b.get(), bf16.model.get())));
    // The bf16-state session runs on from there.
    const Tokens t = RandomTokens(bf16.layers[0], 20, rng);
    const std::vector<float> o = Run(b.get(), 0, t, Path::kPrefill);
    CHECK(std::all_of(o.begin(), o.end(), [](float x) { return std::isfinite(x); }));
  }
}

TEST_CASE("bf16 snapshots are half the payload and within 2^-8 per element",
          "[snapshot][bf16]") {
  const Stack stack(MixedLayers(kDims));
  std::mt19937 rng(41);
  SessionPtr source = stack.NewSession();
  AddHistory(stack, {source.get()}, rng, 120);
  const SessionState exact = Capture(source.get(), stack.model.get());

  const Bytes fp32 = TakeSnapshot(source.get());
  const Bytes bf16 = TakeSnapshot(source.get(), LUMEN_DTYPE_BFLOAT16);
  int64_t state_bytes = 0;
  for (int32_t i = 0; i < stack.num_layers(); ++i) {
    int64_t b = 0;
    REQUIRE(lumen_model_state_bytes(stack.model.get(), i, &b) == LUMEN_OK);
    state_bytes += b;
  }
  // Same fixed overhead; the payload halves.
  CHECK(static_cast<int64_t>(fp32.size() - bf16.size()) * 2 == state_bytes);
  CHECK(bf16.size() < fp32.size() * 0.55);

  SessionPtr restored = stack.NewSession();
  REQUIRE_OK(Restore(restored.get(), bf16));
  const SessionState rounded = Capture(restored.get(), stack.model.get());
  CHECK(rounded.tokens == exact.tokens);
  CHECK(SameBits(RoundedToBFloat16(exact), rounded));

  double worst = 0.0, error_squares = 0.0, value_squares = 0.0;
  int64_t count = 0, over = 0, zero_mismatch = 0;
  for (size_t p = 0; p < exact.parts.size(); ++p) {
    for (size_t i = 0; i < exact.parts[p].size(); ++i) {
      const double a = exact.parts[p][i], b = rounded.parts[p][i];
      ++count;
      error_squares += (a - b) * (a - b);
      value_squares += a * a;
      if (a == 0.0) {
        if (b != 0.0) ++zero_mismatch;
        continue;
      }
      const double relative = std::abs(a - b) / std::abs(a);
      worst = std::max(worst, relative);
      if (relative > std::ldexp(1.0, -8)) ++over;
    }
  }
  const double relative_rms = std::sqrt(error_squares / value_squares);
  std::cout << "[snapshot] bf16: " << count << " elements, payload " << bf16.size()
            << " vs " << fp32.size() << " bytes; worst relative error " << worst << " (2^"
            << std::log2(worst) << "), relative RMS " << relative_rms << " (2^"
            << std::log2(relative_rms) << ")\n";
  CHECK(over == 0);
  CHECK(zero_mismatch == 0);
  CHECK(worst <= std::ldexp(1.0, -8));
  CHECK(relative_rms <= std::ldexp(1.0, -8));
  // Re-snapshotting the restored fp32 session as bf16 gives the same bytes.
  CHECK(TakeSnapshot(restored.get(), LUMEN_DTYPE_BFLOAT16) == bf16);
}

// tests/snapshot/format1_two_layers.snap was written by lumen 0.1.0 (format 1, 48-byte
// records) through its public API: a gated_delta_net layer (H=1, HV=2, K=4, V=3, gate_raw,
// qk_l2norm, beta_sigmoid, A_log {0.5, 1.25}, dt_bias {-0.5, 0.25}) after a prefill of 3
// tokens and a linear_attn layer (H=HV=2, K=3, V=2, elu1, normalize) after 5 steps; then
// every state value was overwritten with Format1Value(layer, i) (normalizer: i + 1000), and
// the session saved with lumen_session_save.
float Format1Value(int layer, int64_t i) {
  return static_cast<float>((i % 97) - 48) / 64.0f * static_cast<float>(layer + 1);
}

std::vector<LayerDesc> Format1Layers() {
  LayerDesc gdn = Layer(LUMEN_FAMILY_GATED_DELTA_NET, {1, 2, 4, 3});
  gdn.options.gate_raw = 1;
  gdn.options.qk_l2norm = 1;
  gdn.options.beta_sigmoid = 1;
  gdn.a_log = {0.5f, 1.25f};
  gdn.dt_bias = {-0.5f, 0.25f};
  LayerDesc linear = Layer(LUMEN_FAMILY_LINEAR_ATTN, {2, 2, 3, 2});
  linear.options.feature_map = LUMEN_FEATURE_MAP_ELU1;
  linear.options.normalize = 1;
  return {gdn, linear};
}

TEST_CASE("a format-1 snapshot written by lumen 0.1.0 still restores", "[snapshot][version]") {
  const fs::path file = fs::path(LUMEN_SNAPSHOT_TEST_DATA) / "format1_two_layers.snap";
  const Bytes bytes = ReadFile(file);
  REQUIRE(GetU32(bytes, kVersionOffset) == 1);
  const Stack stack(Format1Layers());

  auto check = [&](lumen_session* s) {
    const SessionState state = Capture(s, stack.model.get());
    CHECK(state.tokens == std::vector<int64_t>{3, 5});
    // Parts: layer 0's matrix, layer 1's matrix and normalizer.
    REQUIRE(state.parts.size() == 3);
    const int layer_of[3] = {0, 1, 1};
    const int64_t first[3] = {0, 0, 1000};
    int64_t wrong = 0;
    for (int p = 0; p < 3; ++p) {
      for (size_t i = 0; i < state.parts[p].size(); ++i) {
        wrong += state.parts[p][i] != Format1Value(layer_of[p], first[p] + static_cast<int64_t>(i));
      }
    }
    CHECK(wrong == 0);
  };
  SessionPtr from_memory = stack.NewSession();
  REQUIRE_OK(Restore(from_memory.get(), bytes));
  check(from_memory.get());
  SessionPtr from_file = stack.NewSession();
  REQUIRE_OK(lumen_session_load(from_file.get(), file.string().c_str()));
  check(from_file.get());
  // Saved again, it is a format-2 snapshot of the same state.
  const Bytes again = TakeSnapshot(from_memory.get());
  CHECK(GetU32(again, kVersionOffset) == kFormatVersion);
  SessionPtr round_trip = stack.NewSession();
  REQUIRE_OK(Restore(round_trip.get(), again));
  check(round_trip.get());

  // A model whose first layer has a convolution is another model: format 1 had none.
  std::vector<LayerDesc> with_conv = Format1Layers();
  SetConv(with_conv[0], 4, false);
  const Stack conv_stack(with_conv);
  SessionPtr conv_session = conv_stack.NewSession();
  ExpectRejected(conv_session.get(), conv_stack.model.get(), bytes, LUMEN_ERROR_MODEL_MISMATCH,
                 {"layer 0", "conv_size"});
}

}  // namespace
}  // namespace lumen_snapshot_test
