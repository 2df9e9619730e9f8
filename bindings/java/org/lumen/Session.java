package org.lumen;

import org.lumen.capi.Capi;
import org.lumen.capi.SnapshotOptions;

/**
 * One conversation: the state of every layer and the tokens each has consumed (lumen_session).
 * A session must not be used by two calls at the same time.
 */
public final class Session extends Handle {
  private final Engine engine;

  Session(Engine engine) {
    this(engine, create(engine));
  }

  private Session(Engine engine, long address) {
    super(address, Capi::lumen_session_destroy);
    this.engine = engine;
  }

  private static long create(Engine engine) {
    long[] out = new long[1];
    Capi.lumen_session_create(engine.address(), out);
    return out[0];
  }

  public Engine engine() {
    return engine;
  }

  /** A deep copy of this session (state and token counts) on the same engine. */
  public Session fork() {
    long[] out = new long[1];
    Capi.lumen_session_fork(address(), out);
    return new Session(engine, out[0]);
  }

  /** Zeroes every state and token count. */
  public void reset() {
    Capi.lumen_session_reset(address());
  }

  /** Tokens layer {@code layer} has consumed. */
  public long tokens(int layer) {
    long[] out = new long[1];
    Capi.lumen_session_tokens(address(), layer, out);
    return out[0];
  }

  /** One token through one layer (fp32; g and beta may be null); returns o [HV, V]. */
  public float[] step(int layer, float[] q, float[] k, float[] v, float[] g, float[] beta) {
    int[] shape = engine.shape(layer);
    float[] o = new float[shape[1] * shape[3]];
    step(layer, Inputs.of(q, k, v, g, beta), o);
    return o;
  }

  /** The general form: o is a float[], short[] or direct buffer of HV * V elements. */
  public void step(int layer, Inputs inputs, Object o) {
    LayerCall.run(LayerCall.STEP, address(), layer, 0, null, null, inputs, o);
  }

  /** T tokens through one layer (T from q's length); returns o [T, HV, V]. */
  public float[] prefill(int layer, float[] q, float[] k, float[] v, float[] g, float[] beta) {
    int[] shape = engine.shape(layer);
    int tokens = q.length / (shape[0] * shape[2]);
    float[] o = new float[tokens * shape[1] * shape[3]];
    prefill(layer, tokens, Inputs.of(q, k, v, g, beta), o);
    return o;
  }

  /** The general form: o is a float[], short[] or direct buffer of T * HV * V elements. */
  public void prefill(int layer, int numTokens, Inputs inputs, Object o) {
    LayerCall.run(LayerCall.PREFILL, address(), layer, numTokens, null, null, inputs, o);
  }

  /** One part ({@link org.lumen.capi.LumenStatePart}) of a layer's state, fp32 canonical. */
  public float[] readState(int layer, int part) {
    long count = engine.model().stateCount(layer, part);
    float[] out = new float[Math.toIntExact(count)];
    Capi.lumen_session_read_state(address(), layer, part, out);
    return out;
  }

  /** Overwrites one part of a layer's state (fp32, canonical layout). */
  public void writeState(int layer, int part, float[] values) {
    Capi.lumen_session_write_state(address(), layer, part, values);
  }

  /** The session's snapshot (options may be null: fp32 state). */
  public byte[] snapshot(SnapshotOptions options) {
    long[] size = new long[1];
    Capi.lumen_session_snapshot_size(address(), options, size);
    byte[] data = new byte[Math.toIntExact(size[0])];
    Capi.lumen_session_snapshot(address(), options, data, size);
    return data;
  }

  public byte[] snapshot() {
    return snapshot(null);
  }

  /** Replaces state and token counts from a snapshot; all or nothing. */
  public void restore(byte[] data) {
    Capi.lumen_session_restore(address(), data);
  }

  /** Saves the snapshot to a file, atomically and durably (options may be null). */
  public void save(String path, SnapshotOptions options) {
    Capi.lumen_session_save(address(), path, options);
  }

  public void save(String path) {
    save(path, null);
  }

  /** Restores from a snapshot file; all or nothing. */
  public void load(String path) {
    Capi.lumen_session_load(address(), path);
  }
}
