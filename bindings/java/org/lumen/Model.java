package org.lumen;

import org.lumen.capi.Capi;
import org.lumen.capi.LayerOptions;

/** An immutable, validated list of layers (lumen_model). Thread-safe. */
public final class Model extends Handle {
  Model(long address) {
    super(address, Capi::lumen_model_destroy);
  }

  public int numLayers() {
    int[] out = new int[1];
    Capi.lumen_model_num_layers(address(), out);
    return out[0];
  }

  /** A copy of a layer's options, defaults resolved. */
  public LayerOptions layerOptions(int layer) {
    LayerOptions options = new LayerOptions();
    Capi.lumen_model_layer_options(address(), layer, options);
    return options;
  }

  /** Elements of one part ({@link org.lumen.capi.LumenStatePart}) of a layer's fp32 state. */
  public long stateCount(int layer, int part) {
    long[] out = new long[1];
    Capi.lumen_model_state_count(address(), layer, part, out);
    return out[0];
  }

  /** Bytes a session keeps for a layer, or for the whole model with layer -1. */
  public long stateBytes(int layer) {
    long[] out = new long[1];
    Capi.lumen_model_state_bytes(address(), layer, out);
    return out[0];
  }
}
