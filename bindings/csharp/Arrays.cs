using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using Lumen.CApi;

namespace Lumen {

/// <summary>One array of a layer call: a float[] (fp32), a ushort[] (bf16 or fp16 bits), or
/// native or pinned memory given as an IntPtr and an element count. Managed arrays are pinned
/// for the call, never copied.</summary>
public struct Tensor {
  internal readonly Array Managed;
  internal readonly IntPtr Native;
  internal readonly long Count;
  internal readonly int Bits; // 32 or 16; 0 for native memory (any dtype)

  private Tensor(Array managed, IntPtr native, long count, int bits) {
    Managed = managed;
    Native = native;
    Count = count;
    Bits = bits;
  }

  /// <summary>An fp32 array (null: absent).</summary>
  public static implicit operator Tensor(float[] array) =>
      new Tensor(array, IntPtr.Zero, array?.LongLength ?? 0, 32);

  /// <summary>bf16 or fp16 bits (null: absent); the call's Dtype says which.</summary>
  public static implicit operator Tensor(ushort[] array) =>
      new Tensor(array, IntPtr.Zero, array?.LongLength ?? 0, 16);

  /// <summary>count elements of the call's dtype at address (host memory, or device memory of
  /// a GPU engine).</summary>
  public static Tensor FromPointer(IntPtr address, long count) =>
      new Tensor(null, address, count, 0);

  /// <summary>A pinned span's elements; an empty span is an absent tensor.</summary>
  internal static unsafe Tensor Pinned(void* address, int count) =>
      count == 0 ? default(Tensor) : FromPointer((IntPtr)address, count);

  internal bool IsEmpty => Managed == null && Native == IntPtr.Zero;
}

/// <summary>The arrays of one layer call: q, k, v and, where the family takes them, g and
/// beta, all of one dtype (FLOAT32 for float[]; say BFLOAT16 or FLOAT16 for ushort[]).</summary>
public sealed class Inputs {
  /// <summary>q [T, H, K].</summary>
  public Tensor Q;
  /// <summary>k [T, H, K].</summary>
  public Tensor K;
  /// <summary>v [T, HV, V].</summary>
  public Tensor V;
  /// <summary>g [T, HV] (scalar gate) or [T, HV, K] (vector gate), where the family takes
  /// one.</summary>
  public Tensor G;
  /// <summary>beta [T, HV], for the delta rule family.</summary>
  public Tensor Beta;
  /// <summary>The inputs' dtype; null means FLOAT32, which ushort[] inputs cannot be.</summary>
  public LumenDtype? Dtype;
  /// <summary>Where pointer tensors live: HOST, or DEVICE for a GPU engine.</summary>
  public LumenMemory Memory = LumenMemory.HOST;

  /// <summary>No tensors yet: set the fields.</summary>
  public Inputs() {}

  /// <summary>The tensors of a call (g and beta absent by default).</summary>
  public Inputs(Tensor q, Tensor k, Tensor v, Tensor g = default, Tensor beta = default) {
    Q = q; K = k; V = v; G = g; Beta = beta;
  }

  /// <summary>Pinned spans of one dtype (the span overloads' inputs).</summary>
  internal static unsafe Inputs Pinned(LumenDtype dtype, void* q, int qCount, void* k, int kCount,
                                       void* v, int vCount, void* g, int gCount, void* beta,
                                       int betaCount) =>
      new Inputs(Tensor.Pinned(q, qCount), Tensor.Pinned(k, kCount), Tensor.Pinned(v, vCount),
                 Tensor.Pinned(g, gCount), Tensor.Pinned(beta, betaCount)) { Dtype = dtype };
}

/// <summary>Fills lumen_layer_inputs / lumen_layer_output, pinning managed arrays for one
/// call.</summary>
internal static class LayerCall {
  internal static void Run(Inputs inputs, Tensor output, LumenDtype? outputDtype,
                           Action<LayerInputs, LayerOutput> call) {
    if (inputs == null) throw new ArgumentNullException(nameof(inputs));
    var pins = new List<GCHandle>();
    using (var native = new LayerInputs())
    using (var result = new LayerOutput()) {
      try {
        LumenDtype dtype = inputs.Dtype ?? InferDtype(inputs);
        native.Dtype = dtype;
        native.Memory = inputs.Memory;
        native.Q = Address(inputs.Q, dtype, "q", pins); native.QCount = inputs.Q.Count;
        native.K = Address(inputs.K, dtype, "k", pins); native.KCount = inputs.K.Count;
        native.V = Address(inputs.V, dtype, "v", pins); native.VCount = inputs.V.Count;
        native.G = Address(inputs.G, dtype, "g", pins); native.GCount = inputs.G.Count;
        native.Beta = Address(inputs.Beta, dtype, "beta", pins);
        native.BetaCount = inputs.Beta.Count;
        LumenDtype oDtype = outputDtype ?? (output.Bits == 16 ? dtype : LumenDtype.FLOAT32);
        result.Dtype = oDtype;
        result.Memory = inputs.Memory;
        result.O = Address(output, oDtype, "o", pins);
        result.OCount = output.Count;
        call(native, result);
      } finally {
        foreach (GCHandle pin in pins) pin.Free();
      }
    }
  }

  private static LumenDtype InferDtype(Inputs inputs) {
    if (inputs.Q.Bits == 16) {
      throw new ArgumentException("ushort[] inputs need Inputs.Dtype (BFLOAT16 or FLOAT16)");
    }
    return LumenDtype.FLOAT32;
  }

  private static IntPtr Address(Tensor tensor, LumenDtype dtype, string name,
                                List<GCHandle> pins) {
    if (tensor.IsEmpty) return IntPtr.Zero;
    if (tensor.Managed == null) return tensor.Native;
    if ((tensor.Bits == 32) != (dtype == LumenDtype.FLOAT32)) {
      throw new ArgumentException(name + ": a " + tensor.Managed.GetType().Name +
                                  " does not hold " + dtype);
    }
    GCHandle pin = GCHandle.Alloc(tensor.Managed, GCHandleType.Pinned);
    pins.Add(pin);
    return pin.AddrOfPinnedObject();
  }
}

}
