package org.lumen;

import org.lumen.capi.Capi;

/** Collects the layers of a model (lumen_model_builder). Not thread-safe. */
public final class ModelBuilder extends Handle {
  /** An empty builder. */
  public ModelBuilder() {
    super(create(), Capi::lumen_model_builder_destroy);
  }

  private static long create() {
    long[] out = new long[1];
    Capi.lumen_model_builder_create(out);
    return out[0];
  }

  /** Appends a layer (its options validated now); returns its index. */
  public int addLayer(LayerOptions options) {
    int[] layer = new int[1];
    try (org.lumen.capi.LayerOptions copy = options.toNative()) {
      useAddress(builder -> Capi.lumen_model_builder_add_layer(builder, copy, layer));
    }
    return layer[0];
  }

  /**
   * Appends a layer described by the raw struct.
   *
   * @deprecated use {@link #addLayer(LayerOptions)}, which needs nothing freed
   */
  @Deprecated
  public int addLayer(org.lumen.capi.LayerOptions options) {
    int[] layer = new int[1];
    useAddress(builder -> Capi.lumen_model_builder_add_layer(builder, options, layer));
    return layer[0];
  }

  /** Sets a parameter of a layer to a copy of {@code values} (lumen.h gives each one's size). */
  public ModelBuilder setParam(int layer, Param param, float[] values) {
    return setParam(layer, param.value(), values);
  }

  /**
   * Sets a parameter given by its lumen_param value.
   *
   * @deprecated use {@link #setParam(int, Param, float[])}
   */
  @Deprecated
  public ModelBuilder setParam(int layer, int param, float[] values) {
    useAddress(builder -> Capi.lumen_model_builder_set_param(builder, layer, param, values));
    return this;
  }

  /** Builds an immutable model from the layers so far; the builder may go on. */
  public Model build() {
    long[] out = new long[1];
    useAddress(builder -> Capi.lumen_model_builder_build(builder, out));
    return new Model(out[0]);
  }
}
