package org.lumen;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.ShortBuffer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * Buffers are read and written in place, so only direct buffers in the platform's byte order
 * are taken: any other is refused with an IllegalArgumentException that says why, and the
 * session is left unchanged. (Java's own default order is big-endian, which once gave zeros.)
 */
class BuffersTest {
  static final int H = 2, K = 4, V = 4;
  static final ByteOrder OTHER = ByteOrder.nativeOrder() == ByteOrder.LITTLE_ENDIAN
                                 ? ByteOrder.BIG_ENDIAN : ByteOrder.LITTLE_ENDIAN;
  Engine engine;
  Session session;
  final float[] q = values(H * K, 0), k = values(H * K, 1), v = values(H * V, 2);

  static float[] values(int count, double salt) {
    float[] out = new float[count];
    for (int i = 0; i < count; ++i) out[i] = (float) Math.sin(0.37 * i + salt);
    return out;
  }

  static FloatBuffer direct(float[] values, ByteOrder order) {
    FloatBuffer buffer = ByteBuffer.allocateDirect(4 * values.length).order(order)
                             .asFloatBuffer().put(values);
    return buffer.flip();
  }

  @BeforeEach
  void open() {
    try (ModelBuilder builder = new ModelBuilder()) {
      builder.addLayer(new LayerOptions(Family.RETENTION).numHeads(H).keyDim(K).valueDim(V));
      try (Model model = builder.build()) {
        engine = new Engine(model, new EngineOptions().numThreads(1));
      }
    }
    session = engine.newSession();
  }

  @AfterEach
  void close() {
    session.close();
    engine.close();
  }

  void refused(String expected, Executable call) {
    IllegalArgumentException error = assertThrows(IllegalArgumentException.class, call);
    assertTrue(error.getMessage().contains(expected), error.getMessage());
    assertEquals(0, session.tokens(0));
  }

  @Test
  void nativeOrderBuffersAreReadFromTheirPosition() {
    float[] expected;
    try (Session arrays = engine.newSession()) {
      expected = arrays.step(0, q, k, v, null, null);
    }
    float[] padded = new float[3 + q.length];
    System.arraycopy(q, 0, padded, 3, q.length);
    FloatBuffer offset = direct(padded, ByteOrder.nativeOrder()).position(3);
    ByteBuffer out = ByteBuffer.allocateDirect(4 * H * V).order(ByteOrder.nativeOrder());
    session.step(0, new Inputs().q(offset).k(direct(k, ByteOrder.nativeOrder()))
                     .v(direct(v, ByteOrder.nativeOrder())), out);
    float[] got = new float[H * V];
    out.asFloatBuffer().get(got);
    assertArrayEquals(expected, got);
  }

  @Test
  void buffersInTheOtherByteOrderAreRefused() {
    FloatBuffer nativeK = direct(k, ByteOrder.nativeOrder());
    FloatBuffer nativeV = direct(v, ByteOrder.nativeOrder());
    float[] o = new float[H * V];
    // ByteBuffer.allocateDirect(n).asFloatBuffer(): big-endian unless ordered.
    refused(OTHER.toString(), () -> session.step(
        0, new Inputs().q(direct(q, OTHER)).k(nativeK).v(nativeV), o));
    ByteBuffer otherBytes = ByteBuffer.allocateDirect(4 * q.length).order(OTHER);
    otherBytes.asFloatBuffer().put(q);
    refused("ByteBuffer in " + OTHER, () -> session.step(
        0, new Inputs().q(otherBytes).k(nativeK).v(nativeV), o));
    ShortBuffer otherShorts = ByteBuffer.allocateDirect(2 * q.length).order(OTHER)
                                  .asShortBuffer();
    refused("ShortBuffer in " + OTHER, () -> session.step(
        0, new Inputs().q(otherShorts).k(otherShorts).v(otherShorts).dtype(Dtype.BFLOAT16),
        new short[H * V]));
    ByteBuffer otherOut = ByteBuffer.allocateDirect(4 * H * V).order(OTHER);
    refused("o: a ByteBuffer in " + OTHER, () -> session.step(0, Inputs.of(q, k, v, null, null),
                                                            otherOut));
    refused("o: a FloatBuffer in " + OTHER, () -> session.step(
        0, Inputs.of(q, k, v, null, null), direct(new float[H * V], OTHER)));
  }

  @Test
  void heapAndReadOnlyBuffersAreRefused() {
    refused("q: a heap FloatBuffer", () -> session.step(
        0, new Inputs().q(FloatBuffer.wrap(q)).k(k).v(v), new float[H * V]));
    refused("o: a heap ByteBuffer", () -> session.step(
        0, Inputs.of(q, k, v, null, null), ByteBuffer.allocate(4 * H * V)));
    FloatBuffer readOnly = direct(new float[H * V], ByteOrder.nativeOrder()).asReadOnlyBuffer();
    refused("o: a read-only FloatBuffer", () -> session.step(0, Inputs.of(q, k, v, null, null),
                                                             readOnly));
    refused("expected float[], short[]", () -> session.step(
        0, Inputs.of(q, k, v, null, null), new double[H * V]));
  }
}
