package org.lumen;

import java.nio.Buffer;

/**
 * The arrays of one layer call: q, k, v and, where the family takes them, g and beta. Each is
 * a {@code float[]} (fp32), a {@code short[]} (bf16 or fp16 bits: say which with
 * {@link #dtype}), or a direct {@link java.nio.FloatBuffer}, {@link java.nio.ShortBuffer} or
 * {@link java.nio.ByteBuffer} in the platform's byte order ({@link
 * java.nio.ByteOrder#nativeOrder()}), read from its position to its limit. None is copied:
 * arrays are pinned for the call, buffers are read in place; so a buffer in the other byte
 * order, or on the Java heap, is refused with an IllegalArgumentException. All inputs hold
 * the same dtype.
 */
public final class Inputs {
  final Object[] arrays = new Object[5]; // q, k, v, g, beta
  Dtype dtype; // null: FLOAT32, unless a short[] or ShortBuffer says otherwise (then an error)

  /** Sets q [T, H, K]. */
  public Inputs q(float[] q) { return set(0, q); }
  /** Sets q [T, H, K] as 16-bit values. */
  public Inputs q(short[] q) { return set(0, q); }
  /** Sets q [T, H, K] from a direct buffer. */
  public Inputs q(Buffer q) { return set(0, q); }
  /** Sets k [T, H, K]. */
  public Inputs k(float[] k) { return set(1, k); }
  /** Sets k [T, H, K] as 16-bit values. */
  public Inputs k(short[] k) { return set(1, k); }
  /** Sets k [T, H, K] from a direct buffer. */
  public Inputs k(Buffer k) { return set(1, k); }
  /** Sets v [T, HV, V]. */
  public Inputs v(float[] v) { return set(2, v); }
  /** Sets v [T, HV, V] as 16-bit values. */
  public Inputs v(short[] v) { return set(2, v); }
  /** Sets v [T, HV, V] from a direct buffer. */
  public Inputs v(Buffer v) { return set(2, v); }
  /** Sets g [T, HV] (a scalar gate) or [T, HV, K] (a vector gate). */
  public Inputs g(float[] g) { return set(3, g); }
  /** Sets g as 16-bit values. */
  public Inputs g(short[] g) { return set(3, g); }
  /** Sets g from a direct buffer. */
  public Inputs g(Buffer g) { return set(3, g); }
  /** Sets beta [T, HV]. */
  public Inputs beta(float[] beta) { return set(4, beta); }
  /** Sets beta [T, HV] as 16-bit values. */
  public Inputs beta(short[] beta) { return set(4, beta); }
  /** Sets beta [T, HV] from a direct buffer. */
  public Inputs beta(Buffer beta) { return set(4, beta); }

  /** The element type of every input (needed for 16-bit inputs: BFLOAT16 or FLOAT16). */
  public Inputs dtype(Dtype dtype) {
    this.dtype = dtype;
    return this;
  }

  /**
   * The element type as a lumen_dtype value.
   *
   * @deprecated use {@link #dtype(Dtype)}
   */
  @Deprecated
  public Inputs dtype(int dtype) {
    return dtype(Dtype.of(dtype));
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
