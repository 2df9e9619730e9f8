package org.lumen;

import java.lang.ref.Reference;
import java.nio.Buffer;
import java.nio.ByteBuffer;
import java.nio.FloatBuffer;
import java.nio.ShortBuffer;
import org.lumen.capi.Capi;
import org.lumen.capi.LayerInputs;
import org.lumen.capi.LayerOutput;
import org.lumen.capi.LumenDtype;
import org.lumen.capi.LumenMemory;

/** Fills lumen_layer_inputs / lumen_layer_output from Java arrays and buffers and runs a call. */
final class LayerCall {
  static final int STEP = 0, PREFILL = 1, STEP_BATCH = 2, PREFILL_VARLEN = 3;
  private static final String[] NAMES = {"q", "k", "v", "g", "beta", "o"};

  private LayerCall() {}

  static void run(int call, long target, int layer, int numTokens, long[] sessions,
                  int[] cuSeqlens, Inputs inputs, Object out) {
    int dtype = inputDtype(inputs);
    LayerInputs in = new LayerInputs();
    LayerOutput output = new LayerOutput();
    Object[] pinned = new Object[6];
    try {
      in.setDtype(dtype);
      in.setMemory(LumenMemory.HOST);
      for (int i = 0; i < 5; ++i) {
        Object array = inputs.arrays[i];
        if (array == null) continue;
        long[] addressAndCount = describe(NAMES[i], array, dtype, pinned, i);
        setInput(in, i, addressAndCount[0], addressAndCount[1]);
      }
      int outDtype = out instanceof float[] || out instanceof FloatBuffer ? LumenDtype.FLOAT32
                     : out instanceof ByteBuffer && dtype == LumenDtype.FLOAT32 ? LumenDtype.FLOAT32
                     : dtype;
      long[] o = describe("o", out, outDtype, pinned, 5);
      output.setDtype(outDtype);
      output.setMemory(LumenMemory.HOST);
      output.setO(o[0]);
      output.setOCount(o[1]);
      Capi.binding_run_pinned(call, target, layer, numTokens, sessions, cuSeqlens, in, output,
                              pinned);
    } finally {
      in.delete();
      output.delete();
      Reference.reachabilityFence(inputs);
      Reference.reachabilityFence(out);
    }
  }

  private static int inputDtype(Inputs inputs) {
    if (inputs.dtype >= 0) return inputs.dtype;
    for (Object array : inputs.arrays) {
      if (array instanceof short[] || array instanceof ShortBuffer) {
        throw new IllegalArgumentException(
            "16-bit inputs need Inputs.dtype(LumenDtype.BFLOAT16 or FLOAT16)");
      }
    }
    return LumenDtype.FLOAT32;
  }

  private static int dtypeBytes(int dtype) {
    return dtype == LumenDtype.FLOAT32 ? 4 : 2;
  }

  /** {address or 0 when pinned, element count}; a pinned array goes into pinned[index]. */
  private static long[] describe(String name, Object array, int dtype, Object[] pinned,
                                 int index) {
    if (array == null) {
      throw new IllegalArgumentException(name + " is null");
    }
    if (array instanceof float[] || array instanceof short[]) {
      boolean isFloat = array instanceof float[];
      if (isFloat != (dtype == LumenDtype.FLOAT32)) {
        throw new IllegalArgumentException(name + ": " + (isFloat ? "float[]" : "short[]")
                                           + " does not hold dtype " + dtype);
      }
      pinned[index] = array;
      return new long[] {0, isFloat ? ((float[]) array).length : ((short[]) array).length};
    }
    if (!(array instanceof Buffer) || !((Buffer) array).isDirect()) {
      throw new IllegalArgumentException(
          name + ": expected float[], short[] or a direct FloatBuffer, ShortBuffer or ByteBuffer");
    }
    Buffer buffer = (Buffer) array;
    int elementBytes = buffer instanceof FloatBuffer ? 4
                       : buffer instanceof ShortBuffer ? 2
                       : buffer instanceof ByteBuffer ? 1 : -1;
    if (elementBytes < 0 || (elementBytes == 4) != (dtype == LumenDtype.FLOAT32)
        && elementBytes != 1) {
      throw new IllegalArgumentException(name + ": " + buffer.getClass().getSimpleName()
                                         + " does not hold dtype " + dtype);
    }
    long bytes = (long) buffer.remaining() * elementBytes;
    if (bytes % dtypeBytes(dtype) != 0) {
      throw new IllegalArgumentException(name + ": " + bytes + " bytes is not a whole number of "
                                         + "elements");
    }
    long address = Capi.binding_direct_buffer_address(buffer)
                   + (long) buffer.position() * elementBytes;
    return new long[] {address, bytes / dtypeBytes(dtype)};
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
