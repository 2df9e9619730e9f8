using System;
using System.Runtime.InteropServices;
using Lumen.CApi;

namespace Lumen {

/// <summary>One conversation: every layer's state and token count (lumen_session). A session
/// must not be used by two calls at the same time. Dispose it to free its state now; the
/// collector is told the state's bytes, so dropped sessions are collected soon, but only
/// Dispose returns the memory at a known point.</summary>
public sealed class Session : NativeObject {
  internal Session(Engine engine, IntPtr address)
      : base(address, Capi.lumen_session_destroy, engine.StateBytes) {
    Engine = engine;
  }

  /// <summary>The engine the session runs on.</summary>
  public Engine Engine { get; }

  /// <summary>A deep copy (state and token counts) on the same engine.</summary>
  public Session Fork() {
    using (HandleLease session = Lease()) {
      Capi.lumen_session_fork(session.Address, out IntPtr copy);
      return new Session(Engine, copy);
    }
  }

  /// <summary>Starts bringing an evicted session back into the engine's memory in the
  /// background (lumen_session_prefetch), so that a later call need not wait; a no-op when it
  /// is resident or the engine has no memory budget. Since 0.3.</summary>
  public void Prefetch() {
    using (HandleLease session = Lease()) Capi.lumen_session_prefetch(session.Address);
  }

  /// <summary>Whether the session's state is in the engine's memory, false once the memory
  /// budget evicted it (lumen_session_resident). Since 0.3.</summary>
  public bool Resident {
    get {
      using (HandleLease session = Lease()) {
        Capi.lumen_session_resident(session.Address, out int resident);
        return resident != 0;
      }
    }
  }

  /// <summary>Zeroes every state and token count.</summary>
  public void Reset() {
    using (HandleLease session = Lease()) Capi.lumen_session_reset(session.Address);
  }

  /// <summary>Tokens layer `layer` has consumed.</summary>
  public long Tokens(int layer) {
    using (HandleLease session = Lease()) {
      Capi.lumen_session_tokens(session.Address, layer, out long tokens);
      return tokens;
    }
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

  /// <summary>One token from fp32 spans into o [HV, V] (g and beta empty where the family
  /// takes none).</summary>
  public unsafe void Step(int layer, ReadOnlySpan<float> q, ReadOnlySpan<float> k,
                          ReadOnlySpan<float> v, ReadOnlySpan<float> g, ReadOnlySpan<float> beta,
                          Span<float> o) {
    fixed (float* pq = &MemoryMarshal.GetReference(q), pk = &MemoryMarshal.GetReference(k),
           pv = &MemoryMarshal.GetReference(v), pg = &MemoryMarshal.GetReference(g),
           pb = &MemoryMarshal.GetReference(beta), po = &MemoryMarshal.GetReference(o)) {
      Step(layer, Inputs.Pinned(LumenDtype.FLOAT32, pq, q.Length, pk, k.Length, pv, v.Length,
                                pg, g.Length, pb, beta.Length),
           Tensor.Pinned(po, o.Length), LumenDtype.FLOAT32);
    }
  }

  /// <summary>One token from bf16 or fp16 bits (dtype says which) into fp32 o [HV, V].</summary>
  public unsafe void Step(int layer, LumenDtype dtype, ReadOnlySpan<ushort> q,
                          ReadOnlySpan<ushort> k, ReadOnlySpan<ushort> v, ReadOnlySpan<ushort> g,
                          ReadOnlySpan<ushort> beta, Span<float> o) {
    fixed (ushort* pq = &MemoryMarshal.GetReference(q), pk = &MemoryMarshal.GetReference(k),
           pv = &MemoryMarshal.GetReference(v), pg = &MemoryMarshal.GetReference(g),
           pb = &MemoryMarshal.GetReference(beta))
    fixed (float* po = &MemoryMarshal.GetReference(o)) {
      Step(layer, Inputs.Pinned(dtype, pq, q.Length, pk, k.Length, pv, v.Length, pg, g.Length, pb,
                                beta.Length),
           Tensor.Pinned(po, o.Length), LumenDtype.FLOAT32);
    }
  }

  /// <summary>One token from bf16 or fp16 bits into o [HV, V] of the same dtype.</summary>
  public unsafe void Step(int layer, LumenDtype dtype, ReadOnlySpan<ushort> q,
                          ReadOnlySpan<ushort> k, ReadOnlySpan<ushort> v, ReadOnlySpan<ushort> g,
                          ReadOnlySpan<ushort> beta, Span<ushort> o) {
    fixed (ushort* pq = &MemoryMarshal.GetReference(q), pk = &MemoryMarshal.GetReference(k),
           pv = &MemoryMarshal.GetReference(v), pg = &MemoryMarshal.GetReference(g),
           pb = &MemoryMarshal.GetReference(beta))
    fixed (ushort* po = &MemoryMarshal.GetReference(o)) {
      Step(layer, Inputs.Pinned(dtype, pq, q.Length, pk, k.Length, pv, v.Length, pg, g.Length, pb,
                                beta.Length),
           Tensor.Pinned(po, o.Length), dtype);
    }
  }

  /// <summary>The general form: o holds HV * V elements.</summary>
  public void Step(int layer, Inputs inputs, Tensor o, LumenDtype? outputDtype = null) {
    using (HandleLease session = Lease()) {
      LayerCall.Run(inputs, o, outputDtype, (native, output) =>
          Capi.lumen_session_step(session.Address, layer, native, output));
    }
  }

  /// <summary>T tokens through one layer (T from q's length); returns o [T, HV, V].</summary>
  public float[] Prefill(int layer, float[] q, float[] k, float[] v, float[] g = null,
                         float[] beta = null) {
    if (q == null) throw new ArgumentNullException(nameof(q));
    int[] shape = Engine.Shape(layer);
    int tokens = PrefillTokens(layer, q.Length);
    var o = new float[tokens * shape[1] * shape[3]];
    Prefill(layer, tokens, new Inputs(q, k, v, g, beta), o);
    return o;
  }

  /// <summary>T tokens (from q's length) from fp32 spans into o [T, HV, V].</summary>
  public unsafe void Prefill(int layer, ReadOnlySpan<float> q, ReadOnlySpan<float> k,
                             ReadOnlySpan<float> v, ReadOnlySpan<float> g,
                             ReadOnlySpan<float> beta, Span<float> o) {
    fixed (float* pq = &MemoryMarshal.GetReference(q), pk = &MemoryMarshal.GetReference(k),
           pv = &MemoryMarshal.GetReference(v), pg = &MemoryMarshal.GetReference(g),
           pb = &MemoryMarshal.GetReference(beta), po = &MemoryMarshal.GetReference(o)) {
      Prefill(layer, PrefillTokens(layer, q.Length),
              Inputs.Pinned(LumenDtype.FLOAT32, pq, q.Length, pk, k.Length, pv, v.Length, pg,
                            g.Length, pb, beta.Length),
              Tensor.Pinned(po, o.Length), LumenDtype.FLOAT32);
    }
  }

  /// <summary>T tokens from bf16 or fp16 bits (dtype says which) into fp32 o
  /// [T, HV, V].</summary>
  public unsafe void Prefill(int layer, LumenDtype dtype, ReadOnlySpan<ushort> q,
                             ReadOnlySpan<ushort> k, ReadOnlySpan<ushort> v,
                             ReadOnlySpan<ushort> g, ReadOnlySpan<ushort> beta, Span<float> o) {
    fixed (ushort* pq = &MemoryMarshal.GetReference(q), pk = &MemoryMarshal.GetReference(k),
           pv = &MemoryMarshal.GetReference(v), pg = &MemoryMarshal.GetReference(g),
           pb = &MemoryMarshal.GetReference(beta))
    fixed (float* po = &MemoryMarshal.GetReference(o)) {
      Prefill(layer, PrefillTokens(layer, q.Length),
              Inputs.Pinned(dtype, pq, q.Length, pk, k.Length, pv, v.Length, pg, g.Length, pb,
                            beta.Length),
              Tensor.Pinned(po, o.Length), LumenDtype.FLOAT32);
    }
  }

  /// <summary>T tokens from bf16 or fp16 bits into o [T, HV, V] of the same dtype.</summary>
  public unsafe void Prefill(int layer, LumenDtype dtype, ReadOnlySpan<ushort> q,
                             ReadOnlySpan<ushort> k, ReadOnlySpan<ushort> v,
                             ReadOnlySpan<ushort> g, ReadOnlySpan<ushort> beta,
                             Span<ushort> o) {
    fixed (ushort* pq = &MemoryMarshal.GetReference(q), pk = &MemoryMarshal.GetReference(k),
           pv = &MemoryMarshal.GetReference(v), pg = &MemoryMarshal.GetReference(g),
           pb = &MemoryMarshal.GetReference(beta))
    fixed (ushort* po = &MemoryMarshal.GetReference(o)) {
      Prefill(layer, PrefillTokens(layer, q.Length),
              Inputs.Pinned(dtype, pq, q.Length, pk, k.Length, pv, v.Length, pg, g.Length, pb,
                            beta.Length),
              Tensor.Pinned(po, o.Length), dtype);
    }
  }

  /// <summary>The general form: o holds T * HV * V elements.</summary>
  public void Prefill(int layer, int numTokens, Inputs inputs, Tensor o,
                      LumenDtype? outputDtype = null) {
    using (HandleLease session = Lease()) {
      LayerCall.Run(inputs, o, outputDtype, (native, output) =>
          Capi.lumen_session_prefill(session.Address, layer, numTokens, native, output));
    }
  }

  /// <summary>The most tokens one tentative call runs per session. Since 0.4.</summary>
  public const int MaxTentativeTokens = CApi.Capi.LUMEN_MAX_TENTATIVE_TOKENS;

  /// <summary>T tokens (1 to MaxTentativeTokens, T from q's length) through one layer
  /// tentatively (lumen_session_step_tentative): returns every token's o [T, HV, V] and leaves
  /// the state unchanged until Commit. Since 0.4.</summary>
  public float[] StepTentative(int layer, float[] q, float[] k, float[] v, float[] g = null,
                               float[] beta = null) {
    if (q == null) throw new ArgumentNullException(nameof(q));
    int[] shape = Engine.Shape(layer);
    int tokens = PrefillTokens(layer, q.Length);
    var o = new float[tokens * shape[1] * shape[3]];
    StepTentative(layer, tokens, new Inputs(q, k, v, g, beta), o);
    return o;
  }

  /// <summary>The general form: o holds T * HV * V elements.</summary>
  public void StepTentative(int layer, int numTokens, Inputs inputs, Tensor o,
                            LumenDtype? outputDtype = null) {
    using (HandleLease session = Lease()) {
      LayerCall.Run(inputs, o, outputDtype, (native, output) =>
          Capi.lumen_session_step_tentative(session.Address, layer, numTokens, native, output));
    }
  }

  /// <summary>How many tentative tokens the session holds (0: none). Since 0.4.</summary>
  public int TentativeTokens {
    get {
      using (HandleLease session = Lease()) {
        Capi.lumen_session_tentative_tokens(session.Address, out int count);
        return count;
      }
    }
  }

  /// <summary>Accepts the first numAccepted tentative tokens, as steps would take them, and
  /// drops the rest; 0 rejects them all (lumen_session_commit). Since 0.4.</summary>
  public void Commit(int numAccepted) {
    using (HandleLease session = Lease()) Capi.lumen_session_commit(session.Address, numAccepted);
  }

  /// <summary>The deepest rewind a session keeps. Since 0.4.</summary>
  public const int MaxRewindTokens = CApi.Capi.LUMEN_MAX_REWIND_TOKENS;

  /// <summary>Keeps what the session needs to go back up to `depth` tokens (0 to
  /// MaxRewindTokens; 0 keeps nothing) (lumen_session_set_rewind_depth). Since 0.4.</summary>
  public void SetRewindDepth(int depth) {
    using (HandleLease session = Lease()) Capi.lumen_session_set_rewind_depth(session.Address, depth);
  }

  /// <summary>How many tokens the session can go back now (lumen_session_rewind_available).
  /// Since 0.4.</summary>
  public int RewindAvailable {
    get {
      using (HandleLease session = Lease()) {
        Capi.lumen_session_rewind_available(session.Address, out int available);
        return available;
      }
    }
  }

  /// <summary>Takes every layer back numTokens tokens, bitwise (lumen_session_rewind).
  /// Since 0.4.</summary>
  public void Rewind(int numTokens) {
    using (HandleLease session = Lease()) Capi.lumen_session_rewind(session.Address, numTokens);
  }

  /// <summary>One part of a layer's state, fp32 canonical layout.</summary>
  public float[] ReadState(int layer, LumenStatePart part = LumenStatePart.MATRIX) {
    var state = new float[checked((int)Engine.Model.StateCount(layer, part))];
    using (HandleLease session = Lease()) {
      Capi.lumen_session_read_state(session.Address, layer, part, state, state.Length);
    }
    return state;
  }

  /// <summary>One part of a layer's state in a layout: LumenStateLayout.FLA is fla's layer
  /// caches (the matrix V-first, [HV, V, K]; a conv window [C, W] whose oldest column reads
  /// 0).</summary>
  public float[] ReadState(int layer, LumenStatePart part, LumenStateLayout layout) {
    var state = new float[checked((int)Engine.Model.StateCount(layer, part, layout))];
    using (HandleLease session = Lease()) {
      Capi.lumen_session_read_state_as(session.Address, layer, part, layout, state, state.Length);
    }
    return state;
  }

  /// <summary>Overwrites one part of a layer's state from values in a layout (FLA: a state
  /// from an fla layer's cache, as it is).</summary>
  public void WriteState(int layer, float[] values, LumenStatePart part,
                         LumenStateLayout layout) {
    if (values == null) throw new ArgumentNullException(nameof(values));
    using (HandleLease session = Lease()) {
      Capi.lumen_session_write_state_as(session.Address, layer, part, layout, values,
                                        values.Length);
    }
  }

  /// <summary>Overwrites one part of a layer's state (fp32, canonical layout).</summary>
  public void WriteState(int layer, float[] values,
                         LumenStatePart part = LumenStatePart.MATRIX) {
    if (values == null) throw new ArgumentNullException(nameof(values));
    using (HandleLease session = Lease()) {
      Capi.lumen_session_write_state(session.Address, layer, part, values, values.Length);
    }
  }

  /// <summary>The session's snapshot (options may be null: fp32 state).</summary>
  public byte[] Snapshot(SnapshotOptions options = null) {
    using (HandleLease session = Lease()) {
      Capi.lumen_session_snapshot_size(session.Address, options, out long size);
      var data = new byte[checked((int)size)];
      Capi.lumen_session_snapshot(session.Address, options, data, data.Length, out long written);
      return data;
    }
  }

  /// <summary>Replaces state and token counts from a snapshot; all or nothing.</summary>
  public void Restore(byte[] data) {
    if (data == null) throw new ArgumentNullException(nameof(data));
    using (HandleLease session = Lease()) {
      Capi.lumen_session_restore(session.Address, data, data.Length);
    }
  }

  /// <summary>Saves the snapshot to a file, atomically and durably.</summary>
  public void Save(string path, SnapshotOptions options = null) {
    if (path == null) throw new ArgumentNullException(nameof(path));
    using (HandleLease session = Lease()) Capi.lumen_session_save(session.Address, path, options);
  }

  /// <summary>Restores from a snapshot file; all or nothing.</summary>
  public void Load(string path) {
    if (path == null) throw new ArgumentNullException(nameof(path));
    using (HandleLease session = Lease()) Capi.lumen_session_load(session.Address, path);
  }

  /// <summary>The tokens of a prefill whose q holds qCount elements: qCount / (H * K).</summary>
  private int PrefillTokens(int layer, int qCount) {
    int[] shape = Engine.Shape(layer);
    return qCount / (shape[0] * shape[2]);
  }
}

}
