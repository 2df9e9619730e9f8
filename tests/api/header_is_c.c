/* lumen.h must compile as strict C99 (-std=c99 -Wall -Wextra -Werror -pedantic) and be usable
 * from C. status_test.cc calls lumen_test_header_is_c() and checks what it returns. */
#include <lumen/lumen.h>

#include <stddef.h>
#include <string.h>

int lumen_test_header_is_c(void);

/* Returns 0 when every check passes, otherwise the number of the first failed check. */
int lumen_test_header_is_c(void) {
  lumen_layer_options layer;
  lumen_engine_options engine_options;
  lumen_layer_inputs inputs;
  lumen_layer_output output;
  lumen_model_builder* builder = NULL;
  lumen_model* model = NULL;
  lumen_engine* engine = NULL;
  lumen_session* session = NULL;
  int32_t backend = LUMEN_BACKEND_AUTO;
  int32_t index = -1;
  int64_t tokens = -1;
  float q[4] = {0.5f, -0.25f, 1.0f, 0.75f};
  float k[4] = {0.25f, 0.5f, -0.5f, 1.0f};
  float v[4] = {1.0f, 2.0f, -1.0f, 0.5f};
  float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int result = 0;

  if (lumen_version_number() !=
      LUMEN_VERSION_MAJOR * 10000 + LUMEN_VERSION_MINOR * 100 + LUMEN_VERSION_PATCH) {
    return 1;
  }
  if (lumen_status_string(LUMEN_OK) == NULL || lumen_version_string() == NULL) return 2;

  lumen_layer_options_init(&layer);
  if (layer.struct_size != sizeof(lumen_layer_options)) return 3;
  layer.family = LUMEN_FAMILY_LINEAR_ATTN;
  layer.num_heads = 1;
  layer.key_dim = 4;
  layer.value_dim = 4;
  if (lumen_model_builder_create(&builder) != LUMEN_OK) return 4;
  if (lumen_model_builder_add_layer(builder, &layer, &index) != LUMEN_OK || index != 0) {
    result = 5;
  } else if (lumen_model_builder_build(builder, &model) != LUMEN_OK) {
    result = 6;
  }
  lumen_model_builder_destroy(builder);
  if (result != 0) return result;

  lumen_engine_options_init(&engine_options);
  engine_options.backend = LUMEN_BACKEND_CPU;
  engine_options.num_threads = 1;
  if (lumen_engine_create(model, &engine_options, &engine) != LUMEN_OK) {
    result = 7;
  } else if (lumen_engine_backend(engine, &backend) != LUMEN_OK ||
             backend != LUMEN_BACKEND_CPU) {
    result = 8;
  } else if (lumen_session_create(engine, &session) != LUMEN_OK) {
    result = 9;
  }
  lumen_model_destroy(model);  /* the engine and the session keep their references */
  lumen_engine_destroy(engine);
  if (result != 0) {
    lumen_session_destroy(session);
    return result;
  }

  lumen_layer_inputs_init(&inputs);
  inputs.q = q;
  inputs.q_count = 4;
  inputs.k = k;
  inputs.k_count = 4;
  inputs.v = v;
  inputs.v_count = 4;
  lumen_layer_output_init(&output);
  output.o = o;
  output.o_count = 4;
  if (lumen_session_step(session, 0, &inputs, &output) != LUMEN_OK) {
    result = 10;
  } else if (lumen_session_tokens(session, 0, &tokens) != LUMEN_OK || tokens != 1) {
    result = 11;
  } else if (o[0] == 0.0f && o[1] == 0.0f) {
    result = 12; /* o = v * (k . q) / 2 with k . q = 1.0625: cannot be zero */
  }
  /* A failure sets a message for this thread. */
  if (result == 0 && (lumen_session_step(session, 7, &inputs, &output) != LUMEN_ERROR_OUT_OF_RANGE ||
                      strlen(lumen_last_error_message()) == 0)) {
    result = 13;
  }
  lumen_session_destroy(session);
  lumen_session_destroy(NULL);
  lumen_engine_destroy(NULL);
  lumen_model_destroy(NULL);
  lumen_model_builder_destroy(NULL);
  return result;
}
