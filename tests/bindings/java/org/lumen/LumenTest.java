package org.lumen;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Random;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.lumen.capi.Capi;

/** The Java binding against lumen.h's contract (the header path is the lumen.header property). */
class LumenTest {
  static final int H = 2, HV = 4, K = 8, V = 6;
  final Random random = new Random(7);
  Model model;
  Engine engine;

  static LayerOptions layer(Family family, int heads, int valueHeads, int keyDim, int valueDim) {
    return new LayerOptions(family).numHeads(heads).numValueHeads(valueHeads).keyDim(keyDim)
        .valueDim(valueDim);
  }

  @BeforeEach
  void buildModel() {
    try (ModelBuilder builder = new ModelBuilder()) {
      builder.addLayer(layer(Family.GATED_DELTA_NET, H, HV, K, V));
      builder.addLayer(layer(Family.RETENTION, H, H, K, V));
      model = builder.build();
    }
    engine = new Engine(model, new EngineOptions().numThreads(2));
  }

  @AfterEach
  void close() {
    engine.close();
    model.close();
  }

  /** Token-major inputs of `tokens` tokens: q, k (unit rows), v, g, beta. */
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
    for (int i = 0; i < g.length; ++i) g[i] = (float) -(0.01 + 0.5 * random.nextDouble());
    for (int i = 0; i < beta.length; ++i) beta[i] = (float) (0.1 + 0.8 * random.nextDouble());
    return new float[][] {q, k, v, g, beta};
  }

  /** Gated DeltaNet in float64, the recurrence of docs/spec.md §2: o [T, HV, V]. */
  static double[] reference(float[][] in, int tokens) {
    double[][][] state = new double[HV][K][V];
    double[] out = new double[tokens * HV * V];
    double scale = 1 / Math.sqrt(K);
    for (int t = 0; t < tokens; ++t) {
      for (int hv = 0; hv < HV; ++hv) {
        int h = hv / (HV / H);
        double[][] s = state[hv];
        double decay = Math.exp(in[3][t * HV + hv]), beta = in[4][t * HV + hv];
        for (double[] row : s) for (int j = 0; j < V; ++j) row[j] *= decay;
        for (int j = 0; j < V; ++j) {
          double sk = 0;
          for (int i = 0; i < K; ++i) sk += s[i][j] * in[1][(t * H + h) * K + i];
          double u = beta * (in[2][(t * HV + hv) * V + j] - sk);
          for (int i = 0; i < K; ++i) s[i][j] += in[1][(t * H + h) * K + i] * u;
        }
        for (int j = 0; j < V; ++j) {
          double o = 0;
          for (int i = 0; i < K; ++i) o += s[i][j] * scale * in[0][(t * H + h) * K + i];
          out[(t * HV + hv) * V + j] = o;
        }
      }
    }
    return out;
  }

  static double relativeRms(float[] actual, double[] expected) {
    double error = 0, norm = 0;
    for (int i = 0; i < expected.length; ++i) {
      error += (actual[i] - expected[i]) * (actual[i] - expected[i]);
      norm += expected[i] * expected[i];
    }
    return Math.sqrt(error / norm);
  }

  static float[] token(float[] array, int t, int width) {
    return Arrays.copyOfRange(array, t * width, (t + 1) * width);
  }

  @Test
  void everyHeaderFunctionIsReachable() throws Exception {
    String header = Files.readString(Paths.get(System.getProperty("lumen.header")));
    Matcher matcher = Pattern.compile("LUMEN_API\\s+[\\w\\s*]+?\\b(lumen_\\w+)\\s*\\(")
        .matcher(header);
    Set<String> methods = new HashSet<>();
    for (Method method : Capi.class.getMethods()) methods.add(method.getName());
    int count = 0;
    while (matcher.find()) {
      ++count;
      assertTrue(methods.contains(matcher.group(1)), matcher.group(1) + " is not in Capi");
    }
    assertTrue(count > 30);
  }

  @Test
  void stepAndPrefillMatchTheReference() {
    int tokens = 19;
    float[][] in = inputs(tokens);
    double[] expected = reference(in, tokens);
    try (Session stepped = engine.newSession(); Session prefilled = engine.newSession()) {
      float[] out = new float[tokens * HV * V];
      for (int t = 0; t < tokens; ++t) {
        float[] o = stepped.step(0, token(in[0], t, H * K), token(in[1], t, H * K),
                                 token(in[2], t, HV * V), token(in[3], t, HV),
                                 token(in[4], t, HV));
        System.arraycopy(o, 0, out, t * HV * V, HV * V);
      }
      assertTrue(relativeRms(out, expected) <= 1e-5, "step error " + relativeRms(out, expected));
      assertEquals(tokens, stepped.tokens(0));
      float[] o = prefilled.prefill(0, in[0], in[1], in[2], in[3], in[4]);
      assertTrue(relativeRms(o, expected) <= 1e-4, "prefill error " + relativeRms(o, expected));
    }
  }

  @Test
  void directBuffersAndBf16Inputs() {
    float[][] in = inputs(1);
    try (Session arrays = engine.newSession(); Session buffers = engine.newSession();
         Session bf16 = engine.newSession(); Session rounded = engine.newSession()) {
      float[] expected = arrays.step(0, in[0], in[1], in[2], in[3], in[4]);
      Inputs direct = new Inputs();
      FloatBuffer[] copies = new FloatBuffer[5];
      for (int i = 0; i < 5; ++i) {
        copies[i] = ByteBuffer.allocateDirect(4 * in[i].length).order(ByteOrder.nativeOrder())
                        .asFloatBuffer().put(in[i]);
        copies[i].flip();
      }
      direct.q(copies[0]).k(copies[1]).v(copies[2]).g(copies[3]).beta(copies[4]);
      ByteBuffer out = ByteBuffer.allocateDirect(4 * HV * V).order(ByteOrder.nativeOrder());
      buffers.step(0, direct, out);
      float[] got = new float[HV * V];
      out.asFloatBuffer().get(got);
      assertArrayEquals(expected, got);

      // bf16 bits in short[] against fp32 inputs holding the same rounded values.
      short[][] bits = new short[5][];
      float[][] widened = new float[5][];
      for (int i = 0; i < 5; ++i) {
        bits[i] = new short[in[i].length];
        widened[i] = new float[in[i].length];
        for (int j = 0; j < in[i].length; ++j) {
          int x = Float.floatToRawIntBits(in[i][j]);
          int roundedBits = (x + 0x7fff + ((x >>> 16) & 1)) >>> 16;
          bits[i][j] = (short) roundedBits;
          widened[i][j] = Float.intBitsToFloat(roundedBits << 16);
        }
      }
      float[] fromBf16 = new float[HV * V];
      bf16.step(0, new Inputs().q(bits[0]).k(bits[1]).v(bits[2]).g(bits[3]).beta(bits[4])
                        .dtype(Dtype.BFLOAT16), fromBf16);
      float[] fromRounded = rounded.step(0, widened[0], widened[1], widened[2], widened[3],
                                         widened[4]);
      for (int i = 0; i < fromBf16.length; ++i) {
        assertEquals(fromRounded[i], fromBf16[i], 1e-6 * Math.max(1, Math.abs(fromRounded[i])));
      }
      assertThrows(IllegalArgumentException.class,
                   () -> bf16.step(0, new Inputs().q(bits[0]).k(bits[1]).v(bits[2]), fromBf16));
    }
  }

  @Test
  void batchedStepAndVarlenPrefillMatchSingleSessions() {
    int n = 3;
    float[][] in = inputs(n);
    Session[] batch = {engine.newSession(), engine.newSession(), engine.newSession()};
    Session[] singles = {engine.newSession(), engine.newSession(), engine.newSession()};
    float[] o = engine.stepBatch(0, batch, in[0], in[1], in[2], in[3], in[4]);
    for (int i = 0; i < n; ++i) {
      float[] single = singles[i].step(0, token(in[0], i, H * K), token(in[1], i, H * K),
                                       token(in[2], i, HV * V), token(in[3], i, HV),
                                       token(in[4], i, HV));
      assertArrayEquals(single, Arrays.copyOfRange(o, i * HV * V, (i + 1) * HV * V));
    }
    int[] offsets = {0, 4, 4, 9};
    float[][] more = inputs(9);
    engine.prefillVarlen(0, batch, offsets, more[0], more[1], more[2], more[3], more[4]);
    assertEquals(5, batch[0].tokens(0));
    assertEquals(1, batch[1].tokens(0));
    assertEquals(6, batch[2].tokens(0));
    assertThrows(IllegalArgumentException.class,
                 () -> engine.prefillVarlen(0, batch, new int[] {0, 1}, more[0], more[1],
                                            more[2], more[3], more[4]));
    LumenException twice = assertThrows(LumenException.class,
        () -> engine.stepBatch(0, new Session[] {batch[0], batch[0]}, token(in[0], 0, 2 * H * K),
                               token(in[1], 0, 2 * H * K), token(in[2], 0, 2 * HV * V),
                               token(in[3], 0, 2 * HV), token(in[4], 0, 2 * HV)));
    assertTrue(twice.getMessage().contains("more than once"),
               twice.getMessage());
    assertEquals(Status.INVALID_ARGUMENT, twice.status());
    for (Session s : batch) s.close();
    for (Session s : singles) s.close();
  }

  @Test
  void snapshotRoundTripsThroughBytesAndAFile(@TempDir Path directory) {
    float[][] in = inputs(6);
    try (Session session = engine.newSession(); Session fromBytes = engine.newSession();
         Session fromFile = engine.newSession()) {
      session.prefill(0, in[0], in[1], in[2], in[3], in[4]);
      byte[] data = session.snapshot();
      fromBytes.restore(data);
      String path = directory.resolve("session.lumen").toString();
      session.save(path);
      fromFile.load(path);
      float[][] next = inputs(1);
      float[] expected = session.step(0, next[0], next[1], next[2], next[3], next[4]);
      for (Session restored : new Session[] {fromBytes, fromFile}) {
        assertEquals(6, restored.tokens(0));
        assertArrayEquals(expected, restored.step(0, next[0], next[1], next[2], next[3], next[4]));
        assertArrayEquals(session.readState(0, StatePart.MATRIX),
                          restored.readState(0, StatePart.MATRIX));
      }
    }
  }

  @Test
  void badCallsThrowWithTheLibraryMessage() {
    try (Session session = engine.newSession()) {
      float[] q = new float[H * K], v = new float[HV * V];
      LumenException missing = assertThrows(LumenException.class,
          () -> session.step(0, q, q, v, null, null));
      assertEquals(Status.INVALID_ARGUMENT, missing.status());
      assertEquals("LUMEN_ERROR_INVALID_ARGUMENT", missing.statusName());
      assertTrue(missing.getMessage().contains("g"), missing.getMessage());
      assertEquals(0, session.tokens(0));
      LumenException range = assertThrows(LumenException.class, () -> session.tokens(7));
      assertEquals(Status.OUT_OF_RANGE, range.status());
      assertTrue(range.getMessage().contains("7"));
      LumenException corrupt = assertThrows(LumenException.class,
          () -> session.restore(new byte[] {1, 2, 3}));
      assertEquals(Status.CORRUPT_SNAPSHOT, corrupt.status());
      LumenException io = assertThrows(LumenException.class,
          () -> session.load("/nonexistent/dir/file.lumen"));
      assertEquals(Status.IO, io.status());
    }
    Session closed = engine.newSession();
    closed.close();
    closed.close();
    assertThrows(IllegalStateException.class, () -> closed.tokens(0));
  }

  @Test
  void reservingScratchChecksItsArguments() {
    // The CPU backend holds no device scratch: a valid reservation changes nothing.
    engine.reserve(8, 4096);
    assertEquals(0, engine.scratchBytes());
    int[][] bad = {{0, 1}, {1, 0}, {-3, 5}, {(1 << 20) + 1, 1}};
    for (int[] counts : bad) {
      LumenException error = assertThrows(LumenException.class,
                                          () -> engine.reserve(counts[0], counts[1]));
      assertEquals(Status.INVALID_ARGUMENT, error.status());
      assertTrue(error.getMessage().contains("max_sessions"), error.getMessage());
    }
  }

  static long residentBytes() throws Exception {
    String[] fields = Files.readString(Paths.get("/proc/self/statm")).trim().split(" ");
    return Long.parseLong(fields[1]) * 4096;
  }

  @Test
  void nativeMemoryIsReleased() throws Exception {
    // 256 KiB of state per session: the 1,600 sessions of the two measured rounds would hold
    // 400 MiB if they leaked.
    try (ModelBuilder builder = new ModelBuilder()) {
      builder.addLayer(layer(Family.RETENTION, 4, 4, 128, 128));
      EngineOptions oneThread = new EngineOptions().numThreads(1);
      try (Model big = builder.build()) {
        Runnable cycles = () -> {
          for (int i = 0; i < 400; ++i) {
            try (Engine e = new Engine(big, oneThread); Session s = e.newSession()) {
              Session fork = s.fork();
              fork.restore(s.snapshot());
              if (i % 2 == 0) fork.close();  // else: the Cleaner frees it
            }
          }
          System.gc();
        };
        cycles.run();
        long before = residentBytes();
        cycles.run();
        cycles.run();
        Thread.sleep(100);  // let the Cleaner's thread run
        long grown = residentBytes() - before;
        assertTrue(grown < (64L << 20), "resident memory grew by " + grown + " bytes");
      }
    }
  }
}
