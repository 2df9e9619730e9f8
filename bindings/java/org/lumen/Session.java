package org.lumen;

import java.nio.file.Path;
import org.lumen.capi.Capi;

/**
 * One conversation: the state of every layer and the tokens each has consumed (lumen_session).
 * A session must not be used by two calls at the same time.
 *
 * <p><b>Memory.</b> A session's state ({@link #stateBytes()}, megabytes for a real model)
 * lives outside the Java heap, where the collector does not see it: {@link #close()} the
 * session (try-with-resources) to return it. The {@link java.lang.ref.Cleaner} that frees a
 * session nothing closed is a safety net only: it runs once a collection happens to find the
 * session unreachable, which may be after thousands of sessions have piled up.
 * {@link NativeMemory} counts the bytes held and the sessions that leaked.
 */
public final class Session extends Handle {
  private final Engine engine;

  Session(Engine engine) {
    this(engine, create(engine));
  }

  private Session(Engine engine, long address) {
    super(address, Capi::lumen_session_destroy, engine.stateBytes());
    this.engine = engine;
  }

  private static long create(Engine engine) {
    long[] out = new long[1];
    engine.useAddress(handle -> Capi.lumen_session_create(handle, out));
    return out[0];
  }

  /** The engine this session runs on. */
  public Engine engine() {
    return engine;
  }

  /** Bytes of native state this session holds until it is closed (the model's state bytes). */
  public long stateBytes() {
    return engine.stateBytes();
  }

  /** A deep copy of this session (state and token counts) on the same engine. */
  public Session fork() {
    long[] out = new long[1];
    useAddress(session -> Capi.lumen_session_fork(session, out));
    return new Session(engine, out[0]);
  }

  /**
   * Starts bringing an evicted session back into the engine's memory in the background
   * (lumen_session_prefetch), so that a later call need not wait; a no-op when it is
   * resident. See the memory budget of {@link EngineOptions#memoryBudgetBytes(long)}. Since 0.3.
   */
  public void prefetch() {
    useAddress(Capi::lumen_session_prefetch);
  }

  /** Whether the session's state is in the engine's memory, false once evicted. Since 0.3. */
  public boolean isResident() {
    int[] out = new int[1];
    useAddress(session -> Capi.lumen_session_resident(session, out));
    return out[0] != 0;
  }

  /** Zeroes every state and token count. */
  public void reset() {
    useAddress(Capi::lumen_session_reset);
  }

  /** Tokens layer {@code layer} has consumed. */
  public long tokens(int layer) {
    long[] out = new long[1];
    useAddress(session -> Capi.lumen_session_tokens(session, layer, out));
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
    useAddress(session -> LayerCall.run(LayerCall.STEP, session, layer, 0, null, null, inputs,
                                        o));
  }

  /** T tokens through one layer (T from q's length); returns o [T, HV, V]. */
  public float[] prefill(int layer, float[] q, float[] k, float[] v, float[] g, float[] beta) {
    if (q == null) throw new IllegalArgumentException("q is null");
    int[] shape = engine.shape(layer);
    int tokens = q.length / (shape[0] * shape[2]);
    float[] o = new float[tokens * shape[1] * shape[3]];
    prefill(layer, tokens, Inputs.of(q, k, v, g, beta), o);
    return o;
  }

  /** The general form: o is a float[], short[] or direct buffer of T * HV * V elements. */
  public void prefill(int layer, int numTokens, Inputs inputs, Object o) {
    useAddress(session -> LayerCall.run(LayerCall.PREFILL, session, layer, numTokens, null,
                                        null, inputs, o));
  }

  /**
   * T tokens (1 to {@link #MAX_TENTATIVE_TOKENS}, T from q's length) through one layer
   * tentatively (lumen_session_step_tentative): returns every token's o [T, HV, V] and leaves
   * the state unchanged until {@link #commit(int)}. Since 0.4.
   */
  public float[] stepTentative(int layer, float[] q, float[] k, float[] v, float[] g,
                               float[] beta) {
    if (q == null) throw new IllegalArgumentException("q is null");
    int[] shape = engine.shape(layer);
    int tokens = q.length / (shape[0] * shape[2]);
    float[] o = new float[tokens * shape[1] * shape[3]];
    stepTentative(layer, tokens, Inputs.of(q, k, v, g, beta), o);
    return o;
  }

  /** The general form: o is a float[], short[] or direct buffer of T * HV * V elements. */
  public void stepTentative(int layer, int numTokens, Inputs inputs, Object o) {
    useAddress(session -> LayerCall.run(LayerCall.STEP_TENTATIVE, session, layer, numTokens,
                                        null, null, inputs, o));
  }

  /** The most tokens one tentative call runs per session. Since 0.4. */
  public static final int MAX_TENTATIVE_TOKENS = org.lumen.capi.CapiConstants.LUMEN_MAX_TENTATIVE_TOKENS;

  /** How many tentative tokens the session holds (0: none). Since 0.4. */
  public int tentativeTokens() {
    int[] out = new int[1];
    useAddress(session -> Capi.lumen_session_tentative_tokens(session, out));
    return out[0];
  }

  /**
   * Accepts the first numAccepted tentative tokens, as steps would take them, and drops the
   * rest; 0 rejects them all (lumen_session_commit). Since 0.4.
   */
  public void commit(int numAccepted) {
    useAddress(session -> Capi.lumen_session_commit(session, numAccepted));
  }

  /** The deepest rewind a session keeps. Since 0.4. */
  public static final int MAX_REWIND_TOKENS = org.lumen.capi.CapiConstants.LUMEN_MAX_REWIND_TOKENS;

  /**
   * Keeps what the session needs to go back up to {@code depth} tokens (0 to
   * {@link #MAX_REWIND_TOKENS}; 0 keeps nothing) (lumen_session_set_rewind_depth). Since 0.4.
   */
  public void setRewindDepth(int depth) {
    useAddress(session -> Capi.lumen_session_set_rewind_depth(session, depth));
  }

  /** How many tokens the session can go back now (lumen_session_rewind_available). Since 0.4. */
  public int rewindAvailable() {
    int[] out = new int[1];
    useAddress(session -> Capi.lumen_session_rewind_available(session, out));
    return out[0];
  }

  /** Takes every layer back numTokens tokens, bitwise (lumen_session_rewind). Since 0.4. */
  public void rewind(int numTokens) {
    useAddress(session -> Capi.lumen_session_rewind(session, numTokens));
  }

  /** One part of a layer's state, fp32 in the canonical layout ([HV, K, V] for the matrix). */
  public float[] readState(int layer, StatePart part) {
    float[] out = new float[Math.toIntExact(engine.stateCount(layer, part))];
    useAddress(session -> Capi.lumen_session_read_state(session, layer, part.value(), out));
    return out;
  }

  /**
   * One part, given by its lumen_state_part value, of a layer's state.
   *
   * @deprecated use {@link #readState(int, StatePart)}
   */
  @Deprecated
  public float[] readState(int layer, int part) {
    return readState(layer, StatePart.of(part));
  }

  /**
   * One part of a layer's state in a layout: {@link StateLayout#FLA} is fla's layer caches (the
   * matrix V-first, [HV, V, K]; a conv window [C, W] whose oldest column reads 0).
   */
  public float[] readState(int layer, StatePart part, StateLayout layout) {
    float[] out = new float[Math.toIntExact(engine.stateCount(layer, part, layout))];
    useAddress(session -> Capi.lumen_session_read_state_as(session, layer, part.value(),
                                                           layout.value(), out));
    return out;
  }

  /**
   * Overwrites one part of a layer's state from values in a layout ({@link StateLayout#FLA}: a
   * state from an fla layer's cache, as it is).
   */
  public void writeState(int layer, StatePart part, StateLayout layout, float[] values) {
    useAddress(session -> Capi.lumen_session_write_state_as(session, layer, part.value(),
                                                            layout.value(), values));
  }

  /** Overwrites one part of a layer's state (fp32, canonical layout). */
  public void writeState(int layer, StatePart part, float[] values) {
    useAddress(session -> Capi.lumen_session_write_state(session, layer, part.value(), values));
  }

  /**
   * Overwrites one part, given by its lumen_state_part value, of a layer's state.
   *
   * @deprecated use {@link #writeState(int, StatePart, float[])}
   */
  @Deprecated
  public void writeState(int layer, int part, float[] values) {
    writeState(layer, StatePart.of(part), values);
  }

  /** The session's snapshot, fp32 state. */
  public byte[] snapshot() {
    return snapshot(new SnapshotOptions());
  }

  /** The session's snapshot, written as {@code options} say. */
  public byte[] snapshot(SnapshotOptions options) {
    try (org.lumen.capi.SnapshotOptions copy = options.toNative()) {
      return snapshot(copy);
    }
  }

  /**
   * The session's snapshot with options given by the raw struct (null: defaults).
   *
   * @deprecated use {@link #snapshot(SnapshotOptions)}, which needs nothing freed
   */
  @Deprecated
  public byte[] snapshot(org.lumen.capi.SnapshotOptions options) {
    return withAddress(session -> {
      long[] size = new long[1];
      Capi.lumen_session_snapshot_size(session, options, size);
      byte[] data = new byte[Math.toIntExact(size[0])];
      Capi.lumen_session_snapshot(session, options, data, size);
      return data;
    });
  }

  /** Replaces state and token counts from a snapshot; all or nothing. */
  public void restore(byte[] data) {
    useAddress(session -> Capi.lumen_session_restore(session, data));
  }

  /** Saves the snapshot (fp32 state) to a file, atomically and durably. */
  public void save(Path path) {
    save(path.toString());
  }

  /** Saves the snapshot, written as {@code options} say, to a file atomically and durably. */
  public void save(Path path, SnapshotOptions options) {
    save(path.toString(), options);
  }

  /** {@link #save(Path)} for a path given as a string. */
  public void save(String path) {
    save(path, new SnapshotOptions());
  }

  /** {@link #save(Path, SnapshotOptions)} for a path given as a string. */
  public void save(String path, SnapshotOptions options) {
    try (org.lumen.capi.SnapshotOptions copy = options.toNative()) {
      save(path, copy);
    }
  }

  /**
   * Saves the snapshot with options given by the raw struct (null: defaults).
   *
   * @deprecated use {@link #save(Path, SnapshotOptions)}, which needs nothing freed
   */
  @Deprecated
  public void save(String path, org.lumen.capi.SnapshotOptions options) {
    useAddress(session -> Capi.lumen_session_save(session, path, options));
  }

  /** Restores from a snapshot file; all or nothing. */
  public void load(Path path) {
    load(path.toString());
  }

  /** {@link #load(Path)} for a path given as a string. */
  public void load(String path) {
    useAddress(session -> Capi.lumen_session_load(session, path));
  }
}
