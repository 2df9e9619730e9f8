package org.lumen;

import org.lumen.capi.Capi;

/**
 * An immutable, validated list of layers (lumen_model). Thread-safe. Engines and sessions
 * keep the native model alive, so it may be closed once its engines are made.
 */
public final class Model extends Handle {
  Model(long address) {
    super(address, Capi::lumen_model_destroy);
  }

  /** The number of layers. */
  public int numLayers() {
    int[] out = new int[1];
    useAddress(model -> Capi.lumen_model_num_layers(model, out));
    return out[0];
  }

  /** A copy of a layer's options, defaults resolved (HV, scale, normalizeEps). */
  public LayerOptions layerOptions(int layer) {
    try (org.lumen.capi.LayerOptions options = new org.lumen.capi.LayerOptions()) {
      useAddress(model -> Capi.lumen_model_layer_options(model, layer, options));
      return LayerOptions.of(options);
    }
  }

  /** Elements of one part of a layer's state in the canonical fp32 layout (0: not kept). */
  public long stateCount(int layer, StatePart part) {
    return stateCount(layer, part.value());
  }

  /**
   * Elements of one part of a layer's state in a layout ({@link StateLayout#FLA}: fla's layer
   * caches, a conv window W columns wide).
   */
  public long stateCount(int layer, StatePart part, StateLayout layout) {
    long[] out = new long[1];
    useAddress(model -> Capi.lumen_model_state_count_as(model, layer, part.value(),
                                                        layout.value(), out));
    return out[0];
  }

  /**
   * Elements of the state part given by its lumen_state_part value.
   *
   * @deprecated use {@link #stateCount(int, StatePart)}
   */
  @Deprecated
  public long stateCount(int layer, int part) {
    long[] out = new long[1];
    useAddress(model -> Capi.lumen_model_state_count(model, layer, part, out));
    return out[0];
  }

  /** Bytes a session keeps for a layer, or for the whole model with layer -1. */
  public long stateBytes(int layer) {
    long[] out = new long[1];
    useAddress(model -> Capi.lumen_model_state_bytes(model, layer, out));
    return out[0];
  }

  /** Bytes of a session's state for the whole model: what each session holds natively. */
  public long stateBytes() {
    return stateBytes(-1);
  }
}
