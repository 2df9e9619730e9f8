package org.lumen;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.Arrays;
import java.util.Random;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Tentative tokens from Java: tentative then commit(m) is bitwise m plain steps. */
class TentativeTest {
  static final int H = 2, HV = 4, K = 8, V = 6;
  final Random random = new Random(28);
  Model model;
  Engine engine;

  @BeforeEach
  void buildModel() {
    try (ModelBuilder builder = new ModelBuilder()) {
      builder.addLayer(new LayerOptions(Family.GATED_DELTA_NET).numHeads(H).numValueHeads(HV)
          .keyDim(K).valueDim(V));
      model = builder.build();
    }
    engine = new Engine(model, new EngineOptions().numThreads(2));
  }

  @AfterEach
  void close() {
    engine.close();
    model.close();
  }

  /** q, k (unit rows), v, g, beta of `tokens` tokens. */
  float[][] inputs(int tokens) {
    float[] q = new float[tokens * H * K], k = new float[tokens * H * K];
    float[] v = new float[tokens * HV * V], g = new float[tokens * HV], beta = new float[tokens * HV];
    for (int i = 0; i < q.length; ++i) q[i] = (float) random.nextGaussian();
    for (int row = 0; row < tokens * H; ++row) {
      double norm = 0;
      for (int i = 0; i < K; ++i) {
        k[row * K + i] = (float) random.nextGaussian();
        norm += k[row * K + i] * k[row * K + i];
      }
      for (int i = 0; i < K; ++i) k[row * K + i] /= (float) Math.sqrt(norm);
    }
    for (int i = 0; i < v.length; ++i) v[i] = (float) random.nextGaussian();
    for (int i = 0; i < g.length; ++i) g[i] = -0.05f - 0.3f * random.nextFloat();
    for (int i = 0; i < beta.length; ++i) beta[i] = 0.1f + 0.8f * random.nextFloat();
    return new float[][] {q, k, v, g, beta};
  }

  static float[] token(float[] x, int t, int perToken) {
    return Arrays.copyOfRange(x, t * perToken, (t + 1) * perToken);
  }

  /** Steps tokens [first, first + count) of `in` one at a time; returns the outputs. */
  static float[] stepPlainly(Session session, float[][] in, int first, int count) {
    float[] out = new float[count * HV * V];
    for (int t = first; t < first + count; ++t) {
      float[] o = session.step(0, token(in[0], t, H * K), token(in[1], t, H * K),
          token(in[2], t, HV * V), token(in[3], t, HV), token(in[4], t, HV));
      System.arraycopy(o, 0, out, (t - first) * HV * V, HV * V);
    }
    return out;
  }

  @Test
  void tentativeThenCommitEqualsPlainSteps() {
    float[][] in = inputs(5);
    try (Session tentative = engine.newSession(); Session plain = engine.newSession();
         Session all = engine.newSession()) {
      float[] o = tentative.stepTentative(0, in[0], in[1], in[2], in[3], in[4]);
      assertEquals(5, tentative.tentativeTokens());
      assertArrayEquals(stepPlainly(all, in, 0, 5), o);  // bitwise
      LumenException busy = assertThrows(LumenException.class, () -> tentative.readState(0, StatePart.MATRIX));
      assertEquals(Status.UNCOMMITTED_TOKENS, busy.status());
      assertThrows(LumenException.class, () -> tentative.commit(6));
      tentative.commit(3);
      stepPlainly(plain, in, 0, 3);
      assertEquals(3, tentative.tokens(0));
      assertArrayEquals(plain.readState(0, StatePart.MATRIX), tentative.readState(0, StatePart.MATRIX));
      assertEquals(16, Session.MAX_TENTATIVE_TOKENS);
    }
  }

  @Test
  void rewindGoesBackBitwise() {
    float[][] in = inputs(5);
    try (Session session = engine.newSession()) {
      session.setRewindDepth(3);
      float[][] states = new float[6][];
      states[0] = session.readState(0, StatePart.MATRIX);
      for (int t = 0; t < 5; ++t) {
        stepPlainly(session, in, t, 1);
        states[t + 1] = session.readState(0, StatePart.MATRIX);
      }
      assertEquals(3, session.rewindAvailable());
      session.rewind(2);
      assertEquals(3, session.tokens(0));
      assertArrayEquals(states[3], session.readState(0, StatePart.MATRIX));
      assertThrows(LumenException.class, () -> session.rewind(Session.MAX_REWIND_TOKENS));
    }
  }

  @Test
  void batchedTentativeTokensCommitPerSession() {
    float[][] in = inputs(6);
    int[] cuSeqlens = {0, 2, 6};
    int[] accepted = {1, 4};
    try (Session a = engine.newSession(); Session b = engine.newSession()) {
      Session[] sessions = {a, b};
      engine.stepTentativeBatch(0, sessions, cuSeqlens, in[0], in[1], in[2], in[3], in[4]);
      engine.commitBatch(sessions, accepted);
      for (int i = 0; i < 2; ++i) {
        try (Session plain = engine.newSession()) {
          stepPlainly(plain, in, cuSeqlens[i], accepted[i]);
          assertEquals(accepted[i], sessions[i].tokens(0));
          assertArrayEquals(plain.readState(0, StatePart.MATRIX),
                            sessions[i].readState(0, StatePart.MATRIX));
        }
      }
    }
  }
}
