using System;
using Lumen.CApi;

namespace Lumen {

/// <summary>A model bound to a backend and its worker threads (lumen_engine). Thread-safe: its
/// calls may come from several threads (they take turns on its workers).</summary>
public sealed class Engine : Handle {
  private readonly int[][] shapes; // per layer: H, HV, K, V

  /// <summary>options may be null: AUTO backend, one thread per core.</summary>
  public Engine(Model model, EngineOptions options = null)
      : base(Create(model, options), Capi.lumen_engine_destroy) {
    Model = model;
    shapes = new int[model.NumLayers][];
    for (int i = 0; i < shapes.Length; ++i) {
      using (LayerOptions layer = model.LayerOptions(i)) {
        shapes[i] = new[] {layer.NumHeads, layer.NumValueHeads, layer.KeyDim, layer.ValueDim};
      }
    }
  }

  private static IntPtr Create(Model model, EngineOptions options) {
    Capi.lumen_engine_create(model.Address, options, out IntPtr engine);
    GC.KeepAlive(model);
    return engine;
  }

  public Model Model { get; }

  /// <summary>The backend in use (never AUTO).</summary>
  public LumenBackend Backend {
    get {
      Capi.lumen_engine_backend(Address, out int backend);
      GC.KeepAlive(this);
      return (LumenBackend)backend;
    }
  }

  public int NumThreads {
    get {
      Capi.lumen_engine_num_threads(Address, out int threads);
      GC.KeepAlive(this);
      return threads;
    }
  }

  /// <summary>Makes the engine ready for every layer call within the reservation (the most
  /// sessions and tokens one call takes): on a GPU, device-buffer calls within it neither
  /// allocate nor synchronize (lumen_engine_reserve); on the CPU only the arguments are
  /// checked.</summary>
  public void Reserve(Reservation reservation) {
    Capi.lumen_engine_reserve(Address, reservation);
    GC.KeepAlive(this);
  }

  /// <summary>Bytes of device scratch the engine holds (lumen_engine_scratch_bytes; 0 on the
  /// CPU).</summary>
  public long ScratchBytes {
    get {
      Capi.lumen_engine_scratch_bytes(Address, out long bytes);
      GC.KeepAlive(this);
      return bytes;
    }
  }

  /// <summary>A new session of this engine with every state zero.</summary>
  public Session NewSession() => new Session(this);

  /// <summary>One token for each of n distinct sessions (inputs stack a leading n); returns o
  /// [n, HV, V].</summary>
  public float[] StepBatch(int layer, Session[] sessions, float[] q, float[] k, float[] v,
                           float[] g = null, float[] beta = null) {
    int[] shape = Shape(layer);
    var o = new float[sessions.Length * shape[1] * shape[3]];
    StepBatch(layer, sessions, new Inputs(q, k, v, g, beta), o);
    return o;
  }

  /// <summary>The general form: o holds n * HV * V elements.</summary>
  public void StepBatch(int layer, Session[] sessions, Inputs inputs, Tensor o,
                        LumenDtype? outputDtype = null) {
    IntPtr[] handles = Handles(sessions);
    LayerCall.Run(inputs, o, outputDtype, (native, output) =>
        Capi.lumen_engine_step_batch(Address, layer, handles, handles.Length, native, output));
    GC.KeepAlive(sessions);
    GC.KeepAlive(this);
  }

  /// <summary>Session i consumes tokens cuSeqlens[i] .. cuSeqlens[i + 1] of the concatenated
  /// inputs; returns o [cuSeqlens[n], HV, V].</summary>
  public float[] PrefillVarlen(int layer, Session[] sessions, int[] cuSeqlens, float[] q,
                               float[] k, float[] v, float[] g = null, float[] beta = null) {
    CheckOffsets(sessions, cuSeqlens);
    int[] shape = Shape(layer);
    var o = new float[cuSeqlens[sessions.Length] * shape[1] * shape[3]];
    PrefillVarlen(layer, sessions, cuSeqlens, new Inputs(q, k, v, g, beta), o);
    return o;
  }

  /// <summary>The general form of PrefillVarlen.</summary>
  public void PrefillVarlen(int layer, Session[] sessions, int[] cuSeqlens, Inputs inputs,
                            Tensor o, LumenDtype? outputDtype = null) {
    CheckOffsets(sessions, cuSeqlens);
    IntPtr[] handles = Handles(sessions);
    LayerCall.Run(inputs, o, outputDtype, (native, output) =>
        Capi.lumen_engine_prefill_varlen(Address, layer, handles, handles.Length, cuSeqlens,
                                         native, output));
    GC.KeepAlive(sessions);
    GC.KeepAlive(this);
  }

  /// <summary>{H, HV, K, V} of a layer; the library's own error for a bad index.</summary>
  internal int[] Shape(int layer) {
    if (layer < 0 || layer >= shapes.Length) {
      Model.LayerOptions(layer).Dispose(); // throws OUT_OF_RANGE with the library's message
    }
    return shapes[layer];
  }

  private static void CheckOffsets(Session[] sessions, int[] cuSeqlens) {
    if (cuSeqlens == null || cuSeqlens.Length != sessions.Length + 1) {
      throw new ArgumentException("cuSeqlens must have sessions.Length + 1 entries");
    }
  }

  private static IntPtr[] Handles(Session[] sessions) {
    var handles = new IntPtr[sessions.Length];
    for (int i = 0; i < sessions.Length; ++i) handles[i] = sessions[i].Address;
    return handles;
  }
}

/// <summary>One conversation: every layer's state and token count (lumen_session). A session
/// must not be used by two calls at the same time.</summary>
public sealed class Session : Handle {
  internal Session(Engine engine) : this(engine, Create(engine)) {}

  private Session(Engine engine, IntPtr address) : base(address, Capi.lumen_session_destroy) {
    Engine = engine;
  }

  private static IntPtr Create(Engine engine) {
    Capi.lumen_session_create(engine.Address, out IntPtr session);
    GC.KeepAlive(engine);
    return session;
  }

  public Engine Engine { get; }

  /// <summary>A deep copy (state and token counts) on the same engine.</summary>
  public Session Fork() {
    Capi.lumen_session_fork(Address, out IntPtr copy);
    GC.KeepAlive(this);
    return new Session(Engine, copy);
  }

  /// <summary>Zeroes every state and token count.</summary>
  public void Reset() {
    Capi.lumen_session_reset(Address);
    GC.KeepAlive(this);
  }

  /// <summary>Tokens layer `layer` has consumed.</summary>
  public long Tokens(int layer) {
    Capi.lumen_session_tokens(Address, layer, out long tokens);
    GC.KeepAlive(this);
    return tokens;
  }

  /// <summary>One token through one layer (fp32; g and beta may be null); returns o
  /// [HV, V].</summary>
  public float[] Step(int layer, float[] q, float[] k, float[] v, float[] g = null,
                      float[] beta = null) {
    int[] shape = Engine.Shape(layer);
    var o = new float[shape[1] * shape[3]];
    Step(layer, new Inputs(q, k, v, g, beta), o);
    return o;
  }

  /// <summary>The general form: o holds HV * V elements.</summary>
  public void Step(int layer, Inputs inputs, Tensor o, LumenDtype? outputDtype = null) {
    LayerCall.Run(inputs, o, outputDtype, (native, output) =>
        Capi.lumen_session_step(Address, layer, native, output));
    GC.KeepAlive(this);
  }

  /// <summary>T tokens through one layer (T from q's length); returns o [T, HV, V].</summary>
  public float[] Prefill(int layer, float[] q, float[] k, float[] v, float[] g = null,
                         float[] beta = null) {
    int[] shape = Engine.Shape(layer);
    int tokens = q.Length / (shape[0] * shape[2]);
    var o = new float[tokens * shape[1] * shape[3]];
    Prefill(layer, tokens, new Inputs(q, k, v, g, beta), o);
    return o;
  }

  /// <summary>The general form: o holds T * HV * V elements.</summary>
  public void Prefill(int layer, int numTokens, Inputs inputs, Tensor o,
                      LumenDtype? outputDtype = null) {
    LayerCall.Run(inputs, o, outputDtype, (native, output) =>
        Capi.lumen_session_prefill(Address, layer, numTokens, native, output));
    GC.KeepAlive(this);
  }

  /// <summary>One part of a layer's state, fp32 canonical layout.</summary>
  public float[] ReadState(int layer, LumenStatePart part = LumenStatePart.MATRIX) {
    var state = new float[checked((int)Engine.Model.StateCount(layer, part))];
    Capi.lumen_session_read_state(Address, layer, (int)part, state, state.Length);
    GC.KeepAlive(this);
    return state;
  }

  /// <summary>Overwrites one part of a layer's state (fp32, canonical layout).</summary>
  public void WriteState(int layer, float[] values,
                         LumenStatePart part = LumenStatePart.MATRIX) {
    Capi.lumen_session_write_state(Address, layer, (int)part, values, values.Length);
    GC.KeepAlive(this);
  }

  /// <summary>The session's snapshot (options may be null: fp32 state).</summary>
  public byte[] Snapshot(SnapshotOptions options = null) {
    Capi.lumen_session_snapshot_size(Address, options, out long size);
    var data = new byte[checked((int)size)];
    Capi.lumen_session_snapshot(Address, options, data, data.Length, out long written);
    GC.KeepAlive(this);
    return data;
  }

  /// <summary>Replaces state and token counts from a snapshot; all or nothing.</summary>
  public void Restore(byte[] data) {
    Capi.lumen_session_restore(Address, data, data.Length);
    GC.KeepAlive(this);
  }

  /// <summary>Saves the snapshot to a file, atomically and durably.</summary>
  public void Save(string path, SnapshotOptions options = null) {
    Capi.lumen_session_save(Address, path, options);
    GC.KeepAlive(this);
  }

  /// <summary>Restores from a snapshot file; all or nothing.</summary>
  public void Load(string path) {
    Capi.lumen_session_load(Address, path);
    GC.KeepAlive(this);
  }
}

}
