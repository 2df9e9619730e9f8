/* Streams a few tokens through one gated_delta_net layer, checking every status. */
#include <lumen/lumen.h>
#include <stdio.h>

#define CHECK(call) do { if ((status = (call)) != LUMEN_OK) goto done; } while (0)
enum { H = 2, K = 4, V = 4 };  /* heads, key width, value width */

int main(void) {
  lumen_status status = LUMEN_OK;
  lumen_model_builder* builder = NULL; lumen_model* model = NULL;
  lumen_engine* engine = NULL; lumen_session* session = NULL;
  lumen_layer_options layer; lumen_layer_inputs in; lumen_layer_output out;
  float q[H * K], k[H * K], v[H * V], g[H], beta[H], o[H * V];
  int t, i;

  lumen_layer_options_init(&layer);
  layer.family = LUMEN_FAMILY_GATED_DELTA_NET;
  layer.num_heads = H; layer.key_dim = K; layer.value_dim = V;
  layer.qk_l2norm = 1;  /* the delta rule wants unit-norm keys */
  CHECK(lumen_model_builder_create(&builder));
  CHECK(lumen_model_builder_add_layer(builder, &layer, NULL));
  CHECK(lumen_model_builder_build(builder, &model));
  CHECK(lumen_engine_create(model, NULL, &engine));  /* NULL: AUTO backend, all cores */
  CHECK(lumen_session_create(engine, &session));

  lumen_layer_inputs_init(&in);  /* fp32 host buffers, one token: [1, H, K], [1, H, V], [1, H] */
  in.q = q; in.q_count = H * K; in.k = k; in.k_count = H * K; in.v = v; in.v_count = H * V;
  in.g = g; in.g_count = H; in.beta = beta; in.beta_count = H;
  lumen_layer_output_init(&out);
  out.o = o; out.o_count = H * V;
  for (t = 0; t < 4; ++t) {
    for (i = 0; i < H * K; ++i) { q[i] = (float)((i + t) % 3); k[i] = (float)((i + 2 * t) % 5); }
    for (i = 0; i < H * V; ++i) v[i] = 0.25f * (float)(i + t);
    for (i = 0; i < H; ++i) { g[i] = -0.1f; beta[i] = 0.5f; }  /* decay e^-0.1, write 0.5 */
    CHECK(lumen_session_step(session, 0, &in, &out));
    printf("token %d: o[0..%d] = %.4f %.4f %.4f %.4f\n", t, V - 1, o[0], o[1], o[2], o[3]);
  }

done:
  if (status != LUMEN_OK) fprintf(stderr, "lumen: %s\n", lumen_last_error_message());
  lumen_session_destroy(session); lumen_engine_destroy(engine);  /* NULL is a no-op */
  lumen_model_destroy(model); lumen_model_builder_destroy(builder);
  return status == LUMEN_OK ? 0 : 1;
}
