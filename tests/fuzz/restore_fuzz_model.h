#pragma once
// The model, engine and session that the restore fuzzer works on, shared with the program that
// writes its seed corpus (so the seeds are snapshots of exactly this model).
//
// Two small layers of different families and storage types, so that a snapshot is a few
// hundred bytes and every conversion path (fp32 <-> bf16, per layer) is reachable:
//   layer 0: gated_delta_net, gate_raw with A_log and dt_bias, H=1 HV=2 K=4 V=4, fp32 state
//   layer 1: linear_attn, elu1 + normalize (a normalizer part), H=1 K=4 V=3, bf16 state
//
// Public API only (lumen.h). Failures here are setup bugs: they print and abort.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "lumen/lumen.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace lumen_fuzz {

// Snapshot layout (src/snapshot.h): what the fuzzer and the seeds need to read and reseal.
constexpr size_t kHeaderBytes = 32;
constexpr size_t kFormatVersion = 2;
constexpr size_t kRecordBytes = 56;          // format 2; format 1's records are 48 bytes
constexpr size_t kRecordBytesVersion1 = 48;
constexpr size_t kChecksumBytes = 8;
constexpr size_t kWriterVersionOffset = 12;  // u32: lumen_version_number() of the writer
constexpr size_t kReservedOffset = 28;       // u32: written as 0
constexpr size_t kRecordDType = 20;
constexpr size_t kRecordTokens = 32;
constexpr size_t kRecordPayloadBytes = 40;

inline void Check(lumen_status status, const char* what) {
  if (status != LUMEN_OK) {
    std::fprintf(stderr, "restore fuzzer setup: %s -> %s: %s\n", what,
                 lumen_status_string(status), lumen_last_error_message());
    std::abort();
  }
}

inline uint32_t GetU32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
inline uint64_t GetU64(const uint8_t* p) { return GetU32(p) | uint64_t{GetU32(p + 4)} << 32; }
inline void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Appends XXH3-64 of `body` in little-endian: a snapshot that passes the checksum.
inline void AppendChecksum(std::vector<uint8_t>& body) {
  const uint64_t hash = XXH3_64bits(body.data(), body.size());
  body.resize(body.size() + kChecksumBytes);
  PutU64(body.data() + body.size() - kChecksumBytes, hash);
}
// Recomputes the checksum in the last 8 bytes.
inline void Reseal(std::vector<uint8_t>& bytes) {
  bytes.resize(bytes.size() - kChecksumBytes);
  AppendChecksum(bytes);
}

struct Objects {
  lumen_model* model = nullptr;
  lumen_engine* engine = nullptr;
};

// `variant` 0 is the fuzzer's model; 1 has other dims (for MODEL_MISMATCH seeds).
inline Objects CreateObjects(int variant = 0) {
  lumen_model_builder* builder = nullptr;
  Check(lumen_model_builder_create(&builder), "builder");
  lumen_layer_options gdn;
  lumen_layer_options_init(&gdn);
  gdn.family = LUMEN_FAMILY_GATED_DELTA_NET;
  gdn.num_heads = 1;
  gdn.num_value_heads = 2;
  gdn.key_dim = 4;
  gdn.value_dim = variant == 0 ? 4 : 5;
  gdn.gate_raw = 1;
  gdn.qk_l2norm = 1;
  gdn.beta_sigmoid = 1;
  Check(lumen_model_builder_add_layer(builder, &gdn, nullptr), "add gated_delta_net");
  const float a_log[2] = {0.0f, 0.7f}, dt_bias[2] = {0.1f, -0.3f};
  Check(lumen_model_builder_set_param(builder, 0, LUMEN_PARAM_A_LOG, a_log, 2), "A_log");
  Check(lumen_model_builder_set_param(builder, 0, LUMEN_PARAM_DT_BIAS, dt_bias, 2), "dt_bias");
  lumen_layer_options linear;
  lumen_layer_options_init(&linear);
  linear.family = LUMEN_FAMILY_LINEAR_ATTN;
  linear.num_heads = 1;
  linear.key_dim = 4;
  linear.value_dim = 3;
  linear.feature_map = LUMEN_FEATURE_MAP_ELU1;
  linear.normalize = 1;
  linear.state_dtype = LUMEN_DTYPE_BFLOAT16;
  Check(lumen_model_builder_add_layer(builder, &linear, nullptr), "add linear_attn");
  Objects objects;
  Check(lumen_model_builder_build(builder, &objects.model), "build");
  lumen_model_builder_destroy(builder);
  lumen_engine_options options;
  lumen_engine_options_init(&options);
  options.backend = LUMEN_BACKEND_CPU;
  options.num_threads = 1;
  Check(lumen_engine_create(objects.model, &options, &objects.engine), "engine");
  return objects;
}

inline void DestroyObjects(Objects& objects) {
  lumen_engine_destroy(objects.engine);
  lumen_model_destroy(objects.model);
  objects = Objects{};
}

// Runs `tokens` deterministic pseudo-random tokens through both layers.
inline void AddHistory(lumen_session* session, const lumen_model* model, uint32_t seed,
                       int32_t tokens) {
  uint32_t state = seed * 2654435761u + 1;
  auto next = [&state] {  // uniform in [-1, 1)
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / 8388608.0f - 1.0f;
  };
  for (int32_t layer = 0; layer < 2; ++layer) {
    lumen_layer_options o;
    Check(lumen_model_layer_options(model, layer, &o), "layer options");
    const int64_t qk = int64_t{tokens} * o.num_heads * o.key_dim;
    const int64_t v = int64_t{tokens} * o.num_value_heads * o.value_dim;
    const int64_t per_head = int64_t{tokens} * o.num_value_heads;
    std::vector<float> q(qk), k(qk), vv(v), g(per_head), beta(per_head), out(v);
    for (float& x : q) x = 2 * next();
    for (float& x : k) x = 2 * next();
    for (float& x : vv) x = 2 * next();
    for (float& x : g) x = 2 * next();
    for (float& x : beta) x = 2 * next();
    lumen_layer_inputs in;
    lumen_layer_inputs_init(&in);
    in.q = q.data();
    in.q_count = qk;
    in.k = k.data();
    in.k_count = qk;
    in.v = vv.data();
    in.v_count = v;
    if (o.family == LUMEN_FAMILY_GATED_DELTA_NET) {
      in.g = g.data();
      in.g_count = per_head;
      in.beta = beta.data();
      in.beta_count = per_head;
    }
    lumen_layer_output output;
    lumen_layer_output_init(&output);
    output.o = out.data();
    output.o_count = v;
    Check(lumen_session_prefill(session, layer, tokens, &in, &output), "prefill");
  }
}

inline std::vector<uint8_t> TakeSnapshot(const lumen_session* session, int32_t dtype) {
  lumen_snapshot_options options;
  lumen_snapshot_options_init(&options);
  options.state_dtype = dtype;
  int64_t size = 0;
  Check(lumen_session_snapshot_size(session, &options, &size), "snapshot size");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  Check(lumen_session_snapshot(session, &options, bytes.data(), size, nullptr), "snapshot");
  return bytes;
}

}  // namespace lumen_fuzz
