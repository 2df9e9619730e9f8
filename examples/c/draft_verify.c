/* Speculative decoding against one gated_delta_net layer: a draft proposes N tokens, the layer
 * runs them tentatively (every token's output, no state written), the caller accepts a prefix
 * and commits it, then steps the layer's own token where the draft was rejected. At the end the session is checked, bit for bit, against a second session
 * that stepped only the accepted tokens. */
#include <lumen/lumen.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call) do { if ((status = (call)) != LUMEN_OK) goto done; } while (0)
enum { H = 2, K = 4, V = 4, N = 4, ROUNDS = 5 };  /* heads, key and value width, draft length */

/* The draft's guess for token t of the stream (a stand-in for a small model's proposal). */
static void Draft(int t, float* q, float* k, float* v, float* g, float* beta) {
  int i;
  for (i = 0; i < H * K; ++i) { q[i] = (float)((i + t) % 3); k[i] = (float)((i + 2 * t) % 5); }
  for (i = 0; i < H * V; ++i) v[i] = 0.25f * (float)((i + t) % 7);
  for (i = 0; i < H; ++i) { g[i] = -0.1f; beta[i] = 0.5f; }
}

static void Point(lumen_layer_inputs* in, lumen_layer_output* out, int tokens, float* q,
                  float* k, float* v, float* g, float* beta, float* o) {
  lumen_layer_inputs_init(in);  /* fp32 host buffers: [T, H, K], [T, H, V], [T, H] */
  in->q = q; in->q_count = tokens * H * K; in->k = k; in->k_count = tokens * H * K;
  in->v = v; in->v_count = tokens * H * V; in->g = g; in->g_count = tokens * H;
  in->beta = beta; in->beta_count = tokens * H;
  lumen_layer_output_init(out);
  out->o = o; out->o_count = tokens * H * V;
}

int main(void) {
  lumen_status status = LUMEN_OK;
  lumen_model_builder* builder = NULL; lumen_model* model = NULL; lumen_engine* engine = NULL;
  lumen_session* session = NULL; lumen_session* plain = NULL;
  lumen_layer_options layer; lumen_layer_inputs in; lumen_layer_output out;
  float q[N * H * K], k[N * H * K], v[N * H * V], g[N * H], beta[N * H], o[N * H * V];
  float a[H * K * V], b[H * K * V];
  int round, i, t = 0, same = 0;

  lumen_layer_options_init(&layer);
  layer.family = LUMEN_FAMILY_GATED_DELTA_NET;
  layer.num_heads = H; layer.key_dim = K; layer.value_dim = V;
  layer.qk_l2norm = 1;
  CHECK(lumen_model_builder_create(&builder));
  CHECK(lumen_model_builder_add_layer(builder, &layer, NULL));
  CHECK(lumen_model_builder_build(builder, &model));
  CHECK(lumen_engine_create(model, NULL, &engine));
  CHECK(lumen_session_create(engine, &session));
  CHECK(lumen_session_create(engine, &plain));

  for (round = 0; round < ROUNDS; ++round) {
    int accepted = 0;
    for (i = 0; i < N; ++i) {
      Draft(t + i, q + i * H * K, k + i * H * K, v + i * H * V, g + i * H, beta + i * H);
    }
    Point(&in, &out, N, q, k, v, g, beta, o);
    CHECK(lumen_session_step_tentative(session, 0, N, &in, &out));  /* verify all N at once */
    /* Accept while the layer's output agrees with the draft (here: o[0] of the token stays
     * below 0.4); the first disagreement and everything after it are rejected. */
    while (accepted < N && o[accepted * H * V] < 0.4f) ++accepted;
    CHECK(lumen_session_commit(session, accepted));
    for (i = 0; i < accepted; ++i) {  /* the reference: plain steps of the accepted tokens */
      Point(&in, &out, 1, q + i * H * K, k + i * H * K, v + i * H * V, g + i * H, beta + i * H,
            o);
      CHECK(lumen_session_step(plain, 0, &in, &out));
    }
    t += accepted;
    if (accepted < N) {
      /* The layer disagreed at token t: the target's own token replaces the draft's there
       * (stand-in: another draft), stepped plainly by both sessions. */
      Draft(t + 1000, q, k, v, g, beta);
      Point(&in, &out, 1, q, k, v, g, beta, o);
      CHECK(lumen_session_step(session, 0, &in, &out));
      CHECK(lumen_session_step(plain, 0, &in, &out));
      ++t;
    }
    printf("round %d: accepted %d of %d draft tokens\n", round, accepted, N);
  }
  CHECK(lumen_session_read_state(session, 0, LUMEN_STATE_MATRIX, a, H * K * V));
  CHECK(lumen_session_read_state(plain, 0, LUMEN_STATE_MATRIX, b, H * K * V));
  same = memcmp(a, b, sizeof(a)) == 0;
  printf("%d tokens consumed; state %s plain steps bit for bit\n", t,
         same ? "equals" : "DIFFERS FROM");

done:
  if (status != LUMEN_OK) fprintf(stderr, "lumen: %s\n", lumen_last_error_message());
  lumen_session_destroy(plain); lumen_session_destroy(session); lumen_engine_destroy(engine);
  lumen_model_destroy(model); lumen_model_builder_destroy(builder);
  return status == LUMEN_OK && same ? 0 : 1;
}
