package org.lumen;

import java.nio.Buffer;

/**
 * The arrays of one layer call: q, k, v and, where the family takes them, g and beta. Each is
 * a {@code float[]} (fp32), a {@code short[]} (bf16 or fp16 bits: say which with
 * {@link #dtype}), or a direct {@link java.nio.FloatBuffer}, {@link java.nio.ShortBuffer} or
 * {@link java.nio.ByteBuffer} read from its position to its limit. None is copied: arrays are
 * pinned for the call, buffers are read in place. All must hold the same dtype.
 */
public final class Inputs {
  final Object[] arrays = new Object[5]; // q, k, v, g, beta
  int dtype = -1; // -1: fp32 unless a short[] or ShortBuffer says otherwise (then an error)

  public Inputs q(float[] q) { return set(0, q); }
  public Inputs q(short[] q) { return set(0, q); }
  public Inputs q(Buffer q) { return set(0, q); }
  public Inputs k(float[] k) { return set(1, k); }
  public Inputs k(short[] k) { return set(1, k); }
  public Inputs k(Buffer k) { return set(1, k); }
  public Inputs v(float[] v) { return set(2, v); }
  public Inputs v(short[] v) { return set(2, v); }
  public Inputs v(Buffer v) { return set(2, v); }
  public Inputs g(float[] g) { return set(3, g); }
  public Inputs g(short[] g) { return set(3, g); }
  public Inputs g(Buffer g) { return set(3, g); }
  public Inputs beta(float[] beta) { return set(4, beta); }
  public Inputs beta(short[] beta) { return set(4, beta); }
  public Inputs beta(Buffer beta) { return set(4, beta); }

  /** The element type of every input: a {@link org.lumen.capi.LumenDtype} constant. */
  public Inputs dtype(int dtype) {
    this.dtype = dtype;
    return this;
  }

  /** fp32 inputs from arrays; g and beta may be null. */
  public static Inputs of(float[] q, float[] k, float[] v, float[] g, float[] beta) {
    return new Inputs().set(0, q).set(1, k).set(2, v).set(3, g).set(4, beta);
  }

  private Inputs set(int index, Object array) {
    arrays[index] = array;
    return this;
  }
}
