package org.lumen;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.util.Arrays;
import org.junit.jupiter.api.Test;

/**
 * A session that nothing refers to once its call has started must live until the call
 * returns. A thread runs the collector without pause while sessions of 2 MiB of state are
 * used once and dropped ({@code engine.newSession().prefill(...)}), with arrays (pinned, so
 * no collection runs during the native call itself) and with direct buffers (collections run
 * meanwhile). Freed too early, the state is written after it was freed: the JVM dies
 * (malloc's checks, or SIGSEGV), which fails the test run, or the outputs differ.
 */
class ReachabilityTest {
  static final int HEADS = 8, DIM = 256; // 8 * 256 * 256 floats: 2 MiB of state
  static final int TOKENS = 32; // a prefill long enough for the Cleaner to run meanwhile
  static final int LONG_TOKENS = 512; // a prefill longer than a collection (about 10 ms)
  static final long COLLECTING_NANOS = 2_500_000_000L;
  /** Rounds that let the JIT compile the calls first: compiled code drops `this` early. */
  static final int WARM_UP_ROUNDS = 10000;

  static Engine retentionEngine(int heads, int dim) {
    try (ModelBuilder builder = new ModelBuilder()) {
      builder.addLayer(new LayerOptions(Family.RETENTION).numHeads(heads).keyDim(dim)
                       .valueDim(dim));
      try (Model model = builder.build()) {
        return new Engine(model, new EngineOptions().numThreads(1));
      }
    }
  }

  static FloatBuffer direct(float[] values) {
    FloatBuffer buffer = ByteBuffer.allocateDirect(4 * values.length)
                             .order(ByteOrder.nativeOrder()).asFloatBuffer().put(values);
    return buffer.flip();
  }

  static float[] contents(FloatBuffer buffer) {
    float[] out = new float[buffer.capacity()];
    buffer.get(0, out);
    return out;
  }

  static float[] values(int count, double salt) {
    float[] out = new float[count];
    for (int i = 0; i < count; ++i) out[i] = (float) (0.1 * Math.sin(0.37 * i + salt));
    return out;
  }

  /** Each call of the loop below, on closed sessions of a small model, until compiled. */
  static void warmUp() {
    try (Engine small = retentionEngine(1, 4)) {
      float[] one = new float[4], two = new float[8];
      Inputs buffers = new Inputs().q(direct(two)).k(direct(two)).v(direct(two));
      FloatBuffer out = direct(two);
      for (int i = 0; i < WARM_UP_ROUNDS; ++i) {
        try (Session a = small.newSession(); Session b = small.newSession()) {
          a.prefill(0, one, one, one, null, null);
          a.step(0, one, one, one, null, null);
          small.stepBatch(0, new Session[] {a, b}, two, two, two, null, null);
          a.prefill(0, 2, buffers, out);
          small.stepBatch(0, new Session[] {a, b}, buffers, out);
        }
      }
    }
  }

  @Test
  void droppedSessionsSurviveTheCollectorDuringACall() throws Exception {
    warmUp();
    int width = HEADS * DIM;
    float[] q = values(TOKENS * width, 0), k = values(TOKENS * width, 1);
    float[] v = values(TOKENS * width, 2);
    float[] q1 = Arrays.copyOf(q, width), k1 = Arrays.copyOf(k, width);
    float[] v1 = Arrays.copyOf(v, width);
    float[] q2 = Arrays.copyOf(q, 2 * width), k2 = Arrays.copyOf(k, 2 * width);
    float[] v2 = Arrays.copyOf(v, 2 * width);
    float[] longQ = values(LONG_TOKENS * width, 3), longK = values(LONG_TOKENS * width, 4);
    float[] longV = values(LONG_TOKENS * width, 5);
    Inputs longPrompt = new Inputs().q(direct(longQ)).k(direct(longK)).v(direct(longV));
    Inputs batch = new Inputs().q(direct(q2)).k(direct(k2)).v(direct(v2));
    FloatBuffer longOut = direct(new float[longV.length]), batchOut = direct(new float[v2.length]);
    try (Engine engine = retentionEngine(HEADS, DIM)) {
      float[] prefilled, longPrefilled, stepped, batched;
      try (Session a = engine.newSession(); Session b = engine.newSession();
           Session c = engine.newSession(); Session d = engine.newSession();
           Session e = engine.newSession()) {
        prefilled = a.prefill(0, q, k, v, null, null);
        longPrefilled = e.prefill(0, longQ, longK, longV, null, null);
        stepped = b.step(0, q1, k1, v1, null, null);
        batched = engine.stepBatch(0, new Session[] {c, d}, q2, k2, v2, null, null);
      }
      Thread collector = new Thread(() -> {
        while (!Thread.currentThread().isInterrupted()) System.gc();
      });
      collector.setDaemon(true);
      collector.start();
      long deadline = System.nanoTime() + COLLECTING_NANOS;
      int rounds = 0;
      try {
        while (System.nanoTime() < deadline) {
          assertArrayEquals(prefilled, engine.newSession().prefill(0, q, k, v, null, null));
          assertArrayEquals(stepped, engine.newSession().step(0, q1, k1, v1, null, null));
          assertArrayEquals(batched, engine.stepBatch(
              0, new Session[] {engine.newSession(), engine.newSession()}, q2, k2, v2, null,
              null));
          engine.newSession().prefill(0, LONG_TOKENS, longPrompt, longOut);
          assertArrayEquals(longPrefilled, contents(longOut));
          engine.stepBatch(0, new Session[] {engine.newSession(), engine.newSession()}, batch,
                           batchOut);
          assertArrayEquals(batched, contents(batchOut));
          ++rounds;
        }
      } finally {
        collector.interrupt();
        collector.join();
      }
      System.out.println(rounds + " rounds of calls on dropped sessions");
      assertTrue(rounds > 0);
    }
  }
}
