#pragma once
// What public-API tests of single calls share (tests/api: sizes, struct_size, input values,
// the token limit; tests/snapshot/file_edge_cases_test.cc): a small model and its sessions on
// the test backend, everything observable of a session (to check that a failed call changed
// nothing), and snapshot bytes that can be edited and resealed. Public API only (lumen.h),
// plus XXH3 to reseal edited snapshots.

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "lumen/lumen.h"
#include "tests/reference/layer_reference.h"
#include "tests/reference/require_ok.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace lumen_fixture {

using lumen_test::EnginePtr;
using lumen_test::ModelPtr;
using lumen_test::RefLayer;
using lumen_test::SessionPtr;
using Bytes = std::vector<unsigned char>;

// The status's name and the thread's message; call right after the call that failed.
inline std::string Describe(lumen_status status) {
  return std::string(lumen_status_string(status)) + ": " + lumen_last_error_message();
}


// A model of `layers` on a two-thread CPU engine.
struct Stack {
  explicit Stack(std::vector<RefLayer> layer_list) : layers(std::move(layer_list)) {
    std::string error;
    model = lumen_test::BuildModel(layers, &error);
    INFO(error);
    REQUIRE(model != nullptr);
    engine = lumen_test::MakeEngine(model.get(), 2, &error);
    INFO(error);
    REQUIRE(engine != nullptr);
  }
  SessionPtr NewSession() const {
    std::string error;
    SessionPtr session = lumen_test::MakeSession(engine.get(), &error);
    INFO(error);
    REQUIRE(session != nullptr);
    return session;
  }

  std::vector<RefLayer> layers;
  ModelPtr model;
  EnginePtr engine;
};

inline RefLayer SmallLayer(int32_t family) {
  RefLayer layer;
  layer.family = family;
  layer.num_heads = 2;
  layer.num_value_heads = 4;
  layer.key_dim = 4;
  layer.value_dim = 4;
  return layer;
}

// Every layer's state, bit for bit, and its token count.
struct SessionState {
  std::vector<std::vector<float>> matrices, normalizers;
  std::vector<int64_t> tokens;

  bool SameBits(const SessionState& other) const {
    auto same = [](const std::vector<std::vector<float>>& a,
                   const std::vector<std::vector<float>>& b) {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (a[i].size() != b[i].size()) return false;
        // An empty part (no normalizer) may have no storage at all: memcmp wants pointers.
        if (!a[i].empty() &&
            std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) {
          return false;
        }
      }
      return true;
    };
    return tokens == other.tokens && same(matrices, other.matrices) &&
           same(normalizers, other.normalizers);
  }
};

inline SessionState Capture(const lumen_session* session, const std::vector<RefLayer>& layers) {
  SessionState state;
  for (size_t i = 0; i < layers.size(); ++i) {
    std::vector<float> matrix, normalizer;
    REQUIRE_OK(lumen_test::ReadState(session, static_cast<int32_t>(i), layers[i], &matrix,
                                     &normalizer));
    int64_t tokens = -1;
    REQUIRE_OK(lumen_session_tokens(session, static_cast<int32_t>(i), &tokens));
    state.matrices.push_back(std::move(matrix));
    state.normalizers.push_back(std::move(normalizer));
    state.tokens.push_back(tokens);
  }
  return state;
}

// Runs `num_tokens` random tokens through every layer of the session (one prefill each).
inline void AddHistory(const Stack& stack, lumen_session* session, int64_t num_tokens,
                       uint32_t seed) {
  std::mt19937 rng(seed);
  for (size_t i = 0; i < stack.layers.size(); ++i) {
    const RefLayer& layer = stack.layers[i];
    const lumen_test::EncodedTokens tokens = lumen_test::EncodeTokens(
        lumen_test::RandomTokens(layer, num_tokens, rng), LUMEN_DTYPE_FLOAT32);
    const lumen_layer_inputs inputs = lumen_test::InputsFor(layer, tokens, 0, num_tokens);
    lumen_test::OutputBuffer out;
    out.Reset(num_tokens * layer.VPerToken(), LUMEN_DTYPE_FLOAT32);
    lumen_layer_output output = out.Output(0, num_tokens * layer.VPerToken());
    REQUIRE_OK(lumen_session_prefill(session, static_cast<int32_t>(i),
                                     static_cast<int32_t>(num_tokens), &inputs, &output));
  }
}

// ---------------------------------------------------------------------------------------------
// Snapshot bytes (docs/snapshot_format.md)
// ---------------------------------------------------------------------------------------------

constexpr size_t kHeaderBytes = 32;
constexpr size_t kRecordBytes = 56;
constexpr size_t kRecordTokens = 32;  // u64 in each layer record
constexpr size_t kChecksumBytes = 8;

inline void PutU64(Bytes& bytes, size_t at, uint64_t value) {
  for (int i = 0; i < 8; ++i) bytes.at(at + i) = static_cast<unsigned char>(value >> (8 * i));
}

// Recomputes the trailing checksum so that edited bytes pass it.
inline void Reseal(Bytes& bytes) {
  PutU64(bytes, bytes.size() - kChecksumBytes,
         XXH3_64bits(bytes.data(), bytes.size() - kChecksumBytes));
}

inline Bytes TakeSnapshot(const lumen_session* session) {
  int64_t size = 0;
  REQUIRE_OK(lumen_session_snapshot_size(session, nullptr, &size));
  Bytes bytes(static_cast<size_t>(size));
  REQUIRE_OK(lumen_session_snapshot(session, nullptr, bytes.data(), size, nullptr));
  return bytes;
}

// The snapshot of `session` with layer `layer`'s token count set to `tokens`, resealed.
inline Bytes WithTokenCount(const lumen_session* session, int32_t layer, uint64_t tokens) {
  Bytes bytes = TakeSnapshot(session);
  PutU64(bytes, kHeaderBytes + layer * kRecordBytes + kRecordTokens, tokens);
  Reseal(bytes);
  return bytes;
}

}  // namespace lumen_fixture
