using System;
using System.Runtime.InteropServices;
using Lumen.CApi;

namespace Lumen {

/// <summary>A model bound to a backend and its worker threads (lumen_engine). Thread-safe: its
/// calls may come from several threads (they take turns on its workers).</summary>
public sealed class Engine : NativeObject {
  private readonly int[][] shapes; // per layer: H, HV, K, V

  /// <summary>An engine for the model; options may be null (AUTO backend, one thread per
  /// core). Its memory counted by the collector is one session's state: the block it keeps
  /// after a restore.</summary>
  public Engine(Model model, EngineOptions options = null)
      : this(model ?? throw new ArgumentNullException(nameof(model)), options, model.StateBytes()) {}

  private Engine(Model model, EngineOptions options, long stateBytes)
      : base(Create(model, options), Capi.lumen_engine_destroy, stateBytes) {
    Model = model;
    StateBytes = stateBytes;
    shapes = new int[model.NumLayers][];
    for (int i = 0; i < shapes.Length; ++i) {
      using (LayerOptions layer = model.LayerOptions(i)) {
        shapes[i] = new[] {layer.NumHeads, layer.NumValueHeads, layer.KeyDim, layer.ValueDim};
      }
    }
  }

  private static IntPtr Create(Model model, EngineOptions options) {
    using (HandleLease lease = model.Lease()) {
      Capi.lumen_engine_create(lease.Address, options, out IntPtr engine);
      return engine;
    }
  }

  /// <summary>The model the engine runs.</summary>
  public Model Model { get; }

  /// <summary>Bytes of one session's state (Model.StateBytes()).</summary>
  internal long StateBytes { get; }

  /// <summary>The backend in use (never AUTO).</summary>
  public LumenBackend Backend {
    get {
      using (HandleLease engine = Lease()) {
        Capi.lumen_engine_backend(engine.Address, out int backend);
        return (LumenBackend)backend;
      }
    }
  }

  /// <summary>Threads the engine's layer calls use, the caller's included.</summary>
  public int NumThreads {
    get {
      using (HandleLease engine = Lease()) {
        Capi.lumen_engine_num_threads(engine.Address, out int threads);
        return threads;
      }
    }
  }

  /// <summary>Makes the engine ready for every layer call within the reservation (the most
  /// sessions and tokens one call takes): on a GPU, device-buffer calls within it neither
  /// allocate nor synchronize (lumen_engine_reserve); on the CPU only the arguments are
  /// checked.</summary>
  public void Reserve(Reservation reservation) {
    using (HandleLease engine = Lease()) Capi.lumen_engine_reserve(engine.Address, reservation);
  }

  /// <summary>Where the engine's session state is and how much has moved (lumen_engine_stats):
  /// resident, spilled, evictions, reloads, prefetches...; every field 0 for an engine without
  /// a memory budget (EngineOptions.MemoryBudgetBytes). A new struct each call: Dispose it, or
  /// leave it to the finalizer. Since 0.3.</summary>
  public MemoryStats Stats() {
    var stats = new MemoryStats();
    try {
      using (HandleLease engine = Lease()) Capi.lumen_engine_stats(engine.Address, stats);
      return stats;
    } catch {
      stats.Dispose();
      throw;
    }
  }

  /// <summary>Bytes of device scratch the engine holds (lumen_engine_scratch_bytes; 0 on the
  /// CPU).</summary>
  public long ScratchBytes {
    get {
      using (HandleLease engine = Lease()) {
        Capi.lumen_engine_scratch_bytes(engine.Address, out long bytes);
        return bytes;
      }
    }
  }

  /// <summary>A new session of this engine with every state zero.</summary>
  public Session NewSession() {
    using (HandleLease engine = Lease()) {
      Capi.lumen_session_create(engine.Address, out IntPtr session);
      return new Session(this, session);
    }
  }

  /// <summary>One token for each of n distinct sessions (inputs stack a leading n); returns o
  /// [n, HV, V].</summary>
  public float[] StepBatch(int layer, Session[] sessions, float[] q, float[] k, float[] v,
                           float[] g = null, float[] beta = null) {
    if (sessions == null) throw new ArgumentNullException(nameof(sessions));
    int[] shape = Shape(layer);
    var o = new float[sessions.Length * shape[1] * shape[3]];
    StepBatch(layer, sessions, new Inputs(q, k, v, g, beta), o);
    return o;
  }

  /// <summary>StepBatch from fp32 spans into o [n, HV, V] (g and beta empty where the family
  /// takes none).</summary>
  public unsafe void StepBatch(int layer, Session[] sessions, ReadOnlySpan<float> q,
                               ReadOnlySpan<float> k, ReadOnlySpan<float> v,
                               ReadOnlySpan<float> g, ReadOnlySpan<float> beta, Span<float> o) {
    fixed (float* pq = &MemoryMarshal.GetReference(q), pk = &MemoryMarshal.GetReference(k),
           pv = &MemoryMarshal.GetReference(v), pg = &MemoryMarshal.GetReference(g),
           pb = &MemoryMarshal.GetReference(beta), po = &MemoryMarshal.GetReference(o)) {
      StepBatch(layer, sessions, Inputs.Pinned(LumenDtype.FLOAT32, pq, q.Length, pk, k.Length,
                                               pv, v.Length, pg, g.Length, pb, beta.Length),
                Tensor.Pinned(po, o.Length), LumenDtype.FLOAT32);
    }
  }

  /// <summary>The general form: o holds n * HV * V elements.</summary>
  public void StepBatch(int layer, Session[] sessions, Inputs inputs, Tensor o,
                        LumenDtype? outputDtype = null) {
    using (var batch = new SessionBatch(sessions))
    using (HandleLease engine = Lease()) {
      LayerCall.Run(inputs, o, outputDtype, (native, output) =>
          Capi.lumen_engine_step_batch(engine.Address, layer, batch.Addresses,
                                       batch.Addresses.Length, native, output));
    }
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

  /// <summary>PrefillVarlen from fp32 spans into o [cuSeqlens[n], HV, V].</summary>
  public unsafe void PrefillVarlen(int layer, Session[] sessions, int[] cuSeqlens,
                                   ReadOnlySpan<float> q, ReadOnlySpan<float> k,
                                   ReadOnlySpan<float> v, ReadOnlySpan<float> g,
                                   ReadOnlySpan<float> beta, Span<float> o) {
    fixed (float* pq = &MemoryMarshal.GetReference(q), pk = &MemoryMarshal.GetReference(k),
           pv = &MemoryMarshal.GetReference(v), pg = &MemoryMarshal.GetReference(g),
           pb = &MemoryMarshal.GetReference(beta), po = &MemoryMarshal.GetReference(o)) {
      PrefillVarlen(layer, sessions, cuSeqlens,
                    Inputs.Pinned(LumenDtype.FLOAT32, pq, q.Length, pk, k.Length, pv, v.Length,
                                  pg, g.Length, pb, beta.Length),
                    Tensor.Pinned(po, o.Length), LumenDtype.FLOAT32);
    }
  }

  /// <summary>The general form of PrefillVarlen.</summary>
  public void PrefillVarlen(int layer, Session[] sessions, int[] cuSeqlens, Inputs inputs,
                            Tensor o, LumenDtype? outputDtype = null) {
    CheckOffsets(sessions, cuSeqlens);
    using (var batch = new SessionBatch(sessions))
    using (HandleLease engine = Lease()) {
      LayerCall.Run(inputs, o, outputDtype, (native, output) =>
          Capi.lumen_engine_prefill_varlen(engine.Address, layer, batch.Addresses,
                                           batch.Addresses.Length, cuSeqlens, native, output));
    }
  }

  /// <summary>Tentative tokens for n distinct sessions (lumen_engine_step_tentative_batch):
  /// session i runs tokens cuSeqlens[i] .. cuSeqlens[i + 1] (1 to Session.MaxTentativeTokens
  /// each) without changing its state; returns o [cuSeqlens[n], HV, V]. Since 0.4.</summary>
  public float[] StepTentativeBatch(int layer, Session[] sessions, int[] cuSeqlens, float[] q,
                                    float[] k, float[] v, float[] g = null,
                                    float[] beta = null) {
    CheckOffsets(sessions, cuSeqlens);
    int[] shape = Shape(layer);
    var o = new float[cuSeqlens[sessions.Length] * shape[1] * shape[3]];
    var inputs = new Inputs(q, k, v, g, beta);
    using (var batch = new SessionBatch(sessions))
    using (HandleLease engine = Lease()) {
      LayerCall.Run(inputs, o, null, (native, output) =>
          Capi.lumen_engine_step_tentative_batch(engine.Address, layer, batch.Addresses,
                                                 batch.Addresses.Length, cuSeqlens, native,
                                                 output));
    }
    return o;
  }

  /// <summary>Session i accepts the first numAccepted[i] of its tentative tokens
  /// (lumen_engine_commit_batch). Since 0.4.</summary>
  public void CommitBatch(Session[] sessions, int[] numAccepted) {
    if (sessions == null) throw new ArgumentNullException(nameof(sessions));
    if (numAccepted == null || numAccepted.Length != sessions.Length) {
      throw new ArgumentException("numAccepted needs one entry per session");
    }
    using (var batch = new SessionBatch(sessions))
    using (HandleLease engine = Lease()) {
      Capi.lumen_engine_commit_batch(engine.Address, batch.Addresses, batch.Addresses.Length,
                                     numAccepted);
    }
  }

  /// <summary>{H, HV, K, V} of a layer; the library's own error for a bad index.</summary>
  internal int[] Shape(int layer) {
    if (layer < 0 || layer >= shapes.Length) {
      Model.LayerOptions(layer).Dispose(); // throws OUT_OF_RANGE with the library's message
    }
    return shapes[layer];
  }

  private static void CheckOffsets(Session[] sessions, int[] cuSeqlens) {
    if (sessions == null) throw new ArgumentNullException(nameof(sessions));
    if (cuSeqlens == null || cuSeqlens.Length != sessions.Length + 1) {
      throw new ArgumentException("cuSeqlens must have sessions.Length + 1 entries");
    }
  }
}

/// <summary>The sessions of one batched call, each held open until the call returns.</summary>
internal sealed class SessionBatch : IDisposable {
  private readonly HandleLease[] leases;
  private int held;

  /// <summary>The sessions' native addresses, in order.</summary>
  internal readonly IntPtr[] Addresses;

  internal SessionBatch(Session[] sessions) {
    if (sessions == null) throw new ArgumentNullException(nameof(sessions));
    leases = new HandleLease[sessions.Length];
    Addresses = new IntPtr[sessions.Length];
    try {
      for (; held < sessions.Length; ++held) {
        Session session = sessions[held] ??
            throw new ArgumentNullException("sessions[" + held + "]");
        leases[held] = session.Lease();
        Addresses[held] = leases[held].Address;
      }
    } catch {
      Dispose();
      throw;
    }
  }

  public void Dispose() {
    while (held > 0) leases[--held].Dispose();
  }
}

}
