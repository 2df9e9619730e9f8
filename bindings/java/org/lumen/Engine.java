package org.lumen;

import org.lumen.capi.Capi;

/**
 * A model bound to a backend and its worker threads (lumen_engine). Thread-safe: its calls
 * may come from several threads (they take turns on its workers).
 *
 * <p><b>Memory.</b> An engine, and each of its sessions, holds native memory that the Java
 * collector does not see: {@link #close()} them (try-with-resources) to return it. A
 * {@link java.lang.ref.Cleaner} frees what nothing closed, but only once a collection finds
 * it unreachable, which may be long after; {@link NativeMemory} counts what is held.
 */
public final class Engine extends Handle {
  private final Model model;
  private final Layout layout;

  /** An engine with default options (AUTO backend, one thread per core). */
  public Engine(Model model) {
    this(model, new EngineOptions());
  }

  /** An engine with the given options. */
  public Engine(Model model, EngineOptions options) {
    this(model, new Layout(model), create(model, options));
  }

  /**
   * An engine with options given by the raw struct (null: defaults).
   *
   * @deprecated use {@link #Engine(Model, EngineOptions)}, which needs nothing freed
   */
  @Deprecated
  public Engine(Model model, org.lumen.capi.EngineOptions options) {
    this(model, new Layout(model), create(model, options));
  }

  private Engine(Model model, Layout layout, long address) {
    super(address, Capi::lumen_engine_destroy);
    this.model = model;
    this.layout = layout;
  }

  private static long create(Model model, EngineOptions options) {
    try (org.lumen.capi.EngineOptions copy = options.toNative()) {
      return create(model, copy);
    }
  }

  private static long create(Model model, org.lumen.capi.EngineOptions options) {
    long[] out = new long[1];
    model.useAddress(handle -> Capi.lumen_engine_create(handle, options, out));
    return out[0];
  }

  /** The model given to the constructor (closing it does not affect this engine). */
  public Model model() {
    return model;
  }

  /** The backend in use (never AUTO). */
  public Backend backend() {
    int[] out = new int[1];
    useAddress(engine -> Capi.lumen_engine_backend(engine, out));
    return Backend.of(out[0]);
  }

  /** The threads its layer calls use, the caller's included. */
  public int numThreads() {
    int[] out = new int[1];
    useAddress(engine -> Capi.lumen_engine_num_threads(engine, out));
    return out[0];
  }

  /**
   * Makes the engine ready for every layer call of at most {@code maxSessions} sessions and
   * {@code maxTokens} tokens: on a GPU, device-buffer calls within it neither allocate nor
   * synchronize (lumen_engine_reserve); on the CPU only the arguments are checked.
   */
  public void reserve(int maxSessions, int maxTokens) {
    try (org.lumen.capi.Reservation reservation = new org.lumen.capi.Reservation()) {
      reservation.setMaxSessions(maxSessions);
      reservation.setMaxTokens(maxTokens);
      reserve(reservation);
    }
  }

  /**
   * {@link #reserve(int, int)} with the raw struct.
   *
   * @deprecated use {@link #reserve(int, int)}
   */
  @Deprecated
  public void reserve(org.lumen.capi.Reservation reservation) {
    useAddress(engine -> Capi.lumen_engine_reserve(engine, reservation));
  }

  /**
   * Bytes of device scratch the engine holds (lumen_engine_scratch_bytes; 0 on the CPU).
   * Experimental, as in lumen.h: it may change or go in a minor version.
   */
  public long scratchBytes() {
    long[] out = new long[1];
    useAddress(engine -> Capi.lumen_engine_scratch_bytes(engine, out));
    return out[0];
  }

  /**
   * Where the engine's session state is and how much has moved (lumen_engine_stats); every
   * field 0 for an engine without a memory budget. Since 0.3.
   */
  public MemoryStats stats() {
    try (org.lumen.capi.MemoryStats stats = new org.lumen.capi.MemoryStats()) {
      useAddress(engine -> Capi.lumen_engine_stats(engine, stats));
      return new MemoryStats(stats);
    }
  }

  /** A new session of this engine with every state zero; close it when done. */
  public Session newSession() {
    return new Session(this);
  }

  /** One token for each of n distinct sessions: inputs stack a leading n; returns o [n, HV, V]. */
  public float[] stepBatch(int layer, Session[] sessions, float[] q, float[] k, float[] v,
                           float[] g, float[] beta) {
    int[] shape = shape(layer);
    float[] o = new float[sessions.length * shape[1] * shape[3]];
    stepBatch(layer, sessions, Inputs.of(q, k, v, g, beta), o);
    return o;
  }

  /** The general form: o is a float[], short[] or direct buffer of n * HV * V elements. */
  public void stepBatch(int layer, Session[] sessions, Inputs inputs, Object o) {
    useAddress(engine -> withAddresses(sessions, addresses -> {
      LayerCall.run(LayerCall.STEP_BATCH, engine, layer, 0, addresses, null, inputs, o);
      return null;
    }));
  }

  /**
   * Session i consumes tokens cuSeqlens[i] .. cuSeqlens[i + 1] of the concatenated inputs;
   * returns o [cuSeqlens[n], HV, V].
   */
  public float[] prefillVarlen(int layer, Session[] sessions, int[] cuSeqlens, float[] q,
                               float[] k, float[] v, float[] g, float[] beta) {
    checkOffsets(sessions, cuSeqlens);
    int[] shape = shape(layer);
    float[] o = new float[cuSeqlens[sessions.length] * shape[1] * shape[3]];
    prefillVarlen(layer, sessions, cuSeqlens, Inputs.of(q, k, v, g, beta), o);
    return o;
  }

  /** The general form of {@link #prefillVarlen(int, Session[], int[], float[], float[],
   *  float[], float[], float[])}. */
  public void prefillVarlen(int layer, Session[] sessions, int[] cuSeqlens, Inputs inputs,
                            Object o) {
    checkOffsets(sessions, cuSeqlens);
    useAddress(engine -> withAddresses(sessions, addresses -> {
      LayerCall.run(LayerCall.PREFILL_VARLEN, engine, layer, 0, addresses, cuSeqlens, inputs,
                    o);
      return null;
    }));
  }

  /**
   * Tentative tokens for n distinct sessions (lumen_engine_step_tentative_batch): session i
   * runs tokens cuSeqlens[i] .. cuSeqlens[i + 1] (1 to Session.MAX_TENTATIVE_TOKENS each)
   * without changing its state; returns o [cuSeqlens[n], HV, V]. Since 0.4.
   */
  public float[] stepTentativeBatch(int layer, Session[] sessions, int[] cuSeqlens, float[] q,
                                    float[] k, float[] v, float[] g, float[] beta) {
    checkOffsets(sessions, cuSeqlens);
    int[] shape = shape(layer);
    float[] o = new float[cuSeqlens[sessions.length] * shape[1] * shape[3]];
    useAddress(engine -> withAddresses(sessions, addresses -> {
      LayerCall.run(LayerCall.STEP_TENTATIVE_BATCH, engine, layer, 0, addresses, cuSeqlens,
                    Inputs.of(q, k, v, g, beta), o);
      return null;
    }));
    return o;
  }

  /**
   * Session i accepts the first numAccepted[i] of its tentative tokens
   * (lumen_engine_commit_batch). Since 0.4.
   */
  public void commitBatch(Session[] sessions, int[] numAccepted) {
    if (numAccepted == null || numAccepted.length != sessions.length) {
      throw new IllegalArgumentException("numAccepted needs one entry per session");
    }
    useAddress(engine -> withAddresses(
        sessions, addresses -> Capi.lumen_engine_commit_batch(engine, addresses, numAccepted)));
  }

  /** {H, HV, K, V} of a layer; LumenException OUT_OF_RANGE for a bad index. */
  int[] shape(int layer) {
    return layout.shapes[layout.check(layer)];
  }

  /** Elements of one part of a layer's state. */
  long stateCount(int layer, StatePart part) {
    return layout.stateCounts[layout.check(layer)][part.ordinal()];
  }

  /** Elements of a state part in a layout. */
  long stateCount(int layer, StatePart part, StateLayout stateLayout) {
    if (stateLayout == StateLayout.LUMEN) return stateCount(layer, part);
    return layout.flaStateCounts[layout.check(layer)][part.ordinal()];
  }

  /** Bytes of each session's state. */
  long stateBytes() {
    return layout.stateBytes;
  }

  private static void checkOffsets(Session[] sessions, int[] cuSeqlens) {
    if (cuSeqlens == null || cuSeqlens.length != sessions.length + 1) {
      throw new IllegalArgumentException("cuSeqlens must have sessions.length + 1 entries");
    }
  }

  /**
   * What the Java side needs of the model, read once: the model may be closed while the
   * engine lives.
   */
  private static final class Layout {
    final int[][] shapes; // per layer: H, HV, K, V
    final long[][] stateCounts; // per layer and StatePart
    final long[][] flaStateCounts; // the same in StateLayout.FLA
    final long stateBytes;

    Layout(Model model) {
      int layers = model.numLayers();
      StatePart[] parts = StatePart.values();
      shapes = new int[layers][];
      stateCounts = new long[layers][parts.length];
      flaStateCounts = new long[layers][parts.length];
      for (int i = 0; i < layers; ++i) {
        LayerOptions layer = model.layerOptions(i);
        shapes[i] = new int[] {layer.numHeads(), layer.numValueHeads(), layer.keyDim(),
                               layer.valueDim()};
        for (StatePart part : parts) {
          stateCounts[i][part.ordinal()] = model.stateCount(i, part);
          flaStateCounts[i][part.ordinal()] = model.stateCount(i, part, StateLayout.FLA);
        }
      }
      stateBytes = model.stateBytes();
    }

    int check(int layer) {
      if (layer < 0 || layer >= shapes.length) {
        throw new LumenException(Status.OUT_OF_RANGE, "layer " + layer + " is outside the model ("
                                 + shapes.length + " layers)");
      }
      return layer;
    }
  }
}
