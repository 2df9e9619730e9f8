package org.lumen;

import org.lumen.capi.Capi;
import org.lumen.capi.EngineOptions;
import org.lumen.capi.LayerOptions;
import org.lumen.capi.Reservation;

/**
 * A model bound to a backend and its worker threads (lumen_engine). Thread-safe: its calls
 * may come from several threads (they take turns on its workers).
 */
public final class Engine extends Handle {
  private final Model model;
  private final int[][] shapes; // per layer: H, HV, K, V

  /** An engine with default options (AUTO backend, one thread per core). */
  public Engine(Model model) {
    this(model, null);
  }

  /** options may be null (defaults). */
  public Engine(Model model, EngineOptions options) {
    super(create(model, options), Capi::lumen_engine_destroy);
    this.model = model;
    int layers = model.numLayers();
    shapes = new int[layers][];
    for (int i = 0; i < layers; ++i) {
      LayerOptions layer = model.layerOptions(i);
      shapes[i] = new int[] {layer.getNumHeads(), layer.getNumValueHeads(), layer.getKeyDim(),
                             layer.getValueDim()};
      layer.delete();
    }
  }

  private static long create(Model model, EngineOptions options) {
    long[] out = new long[1];
    Capi.lumen_engine_create(model.address(), options, out);
    return out[0];
  }

  public Model model() {
    return model;
  }

  /** The backend in use (a {@link org.lumen.capi.LumenBackend} constant, never AUTO). */
  public int backend() {
    int[] out = new int[1];
    Capi.lumen_engine_backend(address(), out);
    return out[0];
  }

  public int numThreads() {
    int[] out = new int[1];
    Capi.lumen_engine_num_threads(address(), out);
    return out[0];
  }

  /**
   * Makes the engine ready for every layer call within {@code reservation} (the most sessions
   * and tokens one call takes): on a GPU, device-buffer calls within it neither allocate nor
   * synchronize (lumen_engine_reserve); on the CPU only the arguments are checked.
   */
  public void reserve(Reservation reservation) {
    Capi.lumen_engine_reserve(address(), reservation);
  }

  /** Bytes of device scratch the engine holds (lumen_engine_scratch_bytes; 0 on the CPU). */
  public long scratchBytes() {
    long[] out = new long[1];
    Capi.lumen_engine_scratch_bytes(address(), out);
    return out[0];
  }

  /** A new session of this engine with every state zero. */
  public Session newSession() {
    return new Session(this);
  }

  /** One token for each of n distinct sessions: inputs stack a leading n; returns o [n, HV, V]. */
  public float[] stepBatch(int layer, Session[] sessions, float[] q, float[] k, float[] v,
                           float[] g, float[] beta) {
    float[] o = new float[sessions.length * shape(layer)[1] * shape(layer)[3]];
    stepBatch(layer, sessions, Inputs.of(q, k, v, g, beta), o);
    return o;
  }

  /** The general form: o is a float[], short[] or direct buffer of n * HV * V elements. */
  public void stepBatch(int layer, Session[] sessions, Inputs inputs, Object o) {
    LayerCall.run(LayerCall.STEP_BATCH, address(), layer, 0, addresses(sessions), null, inputs,
                  o);
  }

  /**
   * Session i consumes tokens cuSeqlens[i] .. cuSeqlens[i + 1] of the concatenated inputs;
   * returns o [cuSeqlens[n], HV, V].
   */
  public float[] prefillVarlen(int layer, Session[] sessions, int[] cuSeqlens, float[] q,
                               float[] k, float[] v, float[] g, float[] beta) {
    checkOffsets(sessions, cuSeqlens);
    float[] o = new float[cuSeqlens[sessions.length] * shape(layer)[1] * shape(layer)[3]];
    prefillVarlen(layer, sessions, cuSeqlens, Inputs.of(q, k, v, g, beta), o);
    return o;
  }

  /** The general form of {@link #prefillVarlen(int, Session[], int[], float[], float[],
   *  float[], float[], float[])}. */
  public void prefillVarlen(int layer, Session[] sessions, int[] cuSeqlens, Inputs inputs,
                            Object o) {
    checkOffsets(sessions, cuSeqlens);
    LayerCall.run(LayerCall.PREFILL_VARLEN, address(), layer, 0, addresses(sessions), cuSeqlens,
                  inputs, o);
  }

  /** {H, HV, K, V} of a layer; the library's own error for a bad index. */
  int[] shape(int layer) {
    if (layer < 0 || layer >= shapes.length) {
      model.layerOptions(layer); // throws LUMEN_ERROR_OUT_OF_RANGE with the library's message
    }
    return shapes[layer];
  }

  private static void checkOffsets(Session[] sessions, int[] cuSeqlens) {
    if (cuSeqlens == null || cuSeqlens.length != sessions.length + 1) {
      throw new IllegalArgumentException("cuSeqlens must have sessions.length + 1 entries");
    }
  }

  private static long[] addresses(Session[] sessions) {
    long[] addresses = new long[sessions.length];
    for (int i = 0; i < sessions.length; ++i) addresses[i] = sessions[i].address();
    return addresses;
  }
}
