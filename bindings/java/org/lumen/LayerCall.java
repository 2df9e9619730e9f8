package org.lumen;

import java.lang.ref.Reference;
import java.nio.Buffer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.ShortBuffer;
import org.lumen.capi.Capi;
import org.lumen.capi.LayerInputs;
import org.lumen.capi.LayerOutput;
import org.lumen.capi.LumenMemory;

/** Fills lumen_layer_inputs / lumen_layer_output from Java arrays and buffers and runs a call. */
final class LayerCall {
  static final int STEP = 0, PREFILL = 1, STEP_BATCH = 2, PREFILL_VARLEN = 3;
  static final int STEP_TENTATIVE = 4, STEP_TENTATIVE_BATCH = 5;
  private static final String[] NAMES = {"q", "k", "v", "g", "beta", "o"};
  private static final int OUTPUT = 5;

  private LayerCall() {}

  /**
   * Runs a call on {@code target} (a session, or the engine with {@code sessions}); the
   * caller keeps the handles reachable until it returns.
   */
  static void run(int call, long target, int layer, int numTokens, long[] sessions,
                  int[] cuSeqlens, Inputs inputs, Object out) {
    Dtype dtype = inputDtype(inputs);
    Object[] pinned = new Object[6];
    try (LayerInputs in = new LayerInputs(); LayerOutput output = new LayerOutput()) {
      in.setDtype(dtype.value());
      in.setMemory(LumenMemory.HOST);
      for (int i = 0; i < 5; ++i) {
        Object array = inputs.arrays[i];
        if (array == null) continue;
        long[] addressAndCount = describe(i, array, dtype, pinned);
        setInput(in, i, addressAndCount[0], addressAndCount[1]);
      }
      Dtype outDtype = out instanceof float[] || out instanceof FloatBuffer ? Dtype.FLOAT32
                       : out instanceof ByteBuffer && dtype == Dtype.FLOAT32 ? Dtype.FLOAT32
                       : dtype;
      long[] o = describe(OUTPUT, out, outDtype, pinned);
      output.setDtype(outDtype.value());
      output.setMemory(LumenMemory.HOST);
      output.setO(o[0]);
      output.setOCount(o[1]);
      Capi.binding_run_pinned(call, target, layer, numTokens, sessions, cuSeqlens, in, output,
                              pinned);
    } finally {
      // Direct buffers free their memory once unreachable: keep them until the call is done.
      Reference.reachabilityFence(inputs);
      Reference.reachabilityFence(out);
    }
  }

  private static Dtype inputDtype(Inputs inputs) {
    if (inputs.dtype != null) return inputs.dtype;
    for (Object array : inputs.arrays) {
      if (array instanceof short[] || array instanceof ShortBuffer) {
        throw new IllegalArgumentException(
            "16-bit inputs need Inputs.dtype(Dtype.BFLOAT16 or Dtype.FLOAT16)");
      }
    }
    return Dtype.FLOAT32;
  }

  private static int dtypeBytes(Dtype dtype) {
    return dtype == Dtype.FLOAT32 ? 4 : 2;
  }

  /** {address or 0 when pinned, element count}; a pinned array goes into pinned[index]. */
  private static long[] describe(int index, Object array, Dtype dtype, Object[] pinned) {
    String name = NAMES[index];
    if (array == null) {
      throw new IllegalArgumentException(name + " is null");
    }
    if (array instanceof float[] || array instanceof short[]) {
      boolean isFloat = array instanceof float[];
      if (isFloat != (dtype == Dtype.FLOAT32)) {
        throw new IllegalArgumentException(name + ": " + (isFloat ? "float[]" : "short[]")
                                           + " does not hold " + dtype);
      }
      pinned[index] = array;
      return new long[] {0, isFloat ? ((float[]) array).length : ((short[]) array).length};
    }
    if (!(array instanceof FloatBuffer || array instanceof ShortBuffer
          || array instanceof ByteBuffer)) {
      throw new IllegalArgumentException(name + ": expected float[], short[] or a direct "
                                         + "FloatBuffer, ShortBuffer or ByteBuffer, not "
                                         + array.getClass().getName());
    }
    Buffer buffer = (Buffer) array;
    String kind = buffer instanceof FloatBuffer ? "FloatBuffer"
                  : buffer instanceof ShortBuffer ? "ShortBuffer" : "ByteBuffer";
    if (!buffer.isDirect()) {
      throw new IllegalArgumentException(
          name + ": a heap " + kind + " (lumen reads buffers in place, and the collector may "
          + "move the Java heap): pass its array, or a direct buffer");
    }
    ByteOrder order = order(buffer);
    if (order != ByteOrder.nativeOrder()) {
      throw new IllegalArgumentException(
          name + ": a " + kind + " in " + order + " order; lumen reads the platform's order ("
          + ByteOrder.nativeOrder() + "): make it with "
          + "ByteBuffer.allocateDirect(bytes).order(ByteOrder.nativeOrder())");
    }
    if (index == OUTPUT && buffer.isReadOnly()) {
      throw new IllegalArgumentException(name + ": a read-only " + kind);
    }
    int elementBytes = buffer instanceof FloatBuffer ? 4 : buffer instanceof ShortBuffer ? 2 : 1;
    if (elementBytes != 1 && elementBytes != dtypeBytes(dtype)) {
      throw new IllegalArgumentException(name + ": a " + kind + " does not hold " + dtype);
    }
    long bytes = (long) buffer.remaining() * elementBytes;
    if (bytes % dtypeBytes(dtype) != 0) {
      throw new IllegalArgumentException(name + ": " + bytes + " bytes is not a whole number of "
                                         + dtype + " elements");
    }
    long address = Capi.binding_direct_buffer_address(buffer)
                   + (long) buffer.position() * elementBytes;
    return new long[] {address, bytes / dtypeBytes(dtype)};
  }

  private static ByteOrder order(Buffer buffer) {
    return buffer instanceof FloatBuffer ? ((FloatBuffer) buffer).order()
           : buffer instanceof ShortBuffer ? ((ShortBuffer) buffer).order()
           : ((ByteBuffer) buffer).order();
  }

  private static void setInput(LayerInputs in, int index, long address, long count) {
    switch (index) {
      case 0: in.setQ(address); in.setQCount(count); break;
      case 1: in.setK(address); in.setKCount(count); break;
      case 2: in.setV(address); in.setVCount(count); break;
      case 3: in.setG(address); in.setGCount(count); break;
      default: in.setBeta(address); in.setBetaCount(count); break;
    }
  }
}
