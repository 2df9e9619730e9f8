package org.lumen;

import org.lumen.capi.Capi;
import org.lumen.capi.LayerOptions;

/** Collects the layers of a model (lumen_model_builder). Not thread-safe. */
public final class ModelBuilder extends Handle {
  public ModelBuilder() {
    super(create(), Capi::lumen_model_builder_destroy);
  }

  private static long create() {
    long[] out = new long[1];
    Capi.lumen_model_builder_create(out);
    return out[0];
  }

  /** Appends a layer (options validated now); returns its index. */
  public int addLayer(LayerOptions options) {
    int[] layer = new int[1];
    Capi.lumen_model_builder_add_layer(address(), options, layer);
    return layer[0];
  }

  /** Sets a parameter (a {@link org.lumen.capi.LumenParam} constant) of a layer. */
  public ModelBuilder setParam(int layer, int param, float[] values) {
    Capi.lumen_model_builder_set_param(address(), layer, param, values);
    return this;
  }

  /** Builds an immutable model from the layers so far; the builder may go on. */
  public Model build() {
    long[] out = new long[1];
    Capi.lumen_model_builder_build(address(), out);
    return new Model(out[0]);
  }
}
