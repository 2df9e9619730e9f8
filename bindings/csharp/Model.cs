using System;
using Lumen.CApi;

namespace Lumen {

/// <summary>Collects the layers of a model (lumen_model_builder). Not thread-safe.</summary>
public sealed class ModelBuilder : Handle {
  public ModelBuilder() : base(Create(), Capi.lumen_model_builder_destroy) {}

  private static IntPtr Create() {
    Capi.lumen_model_builder_create(out IntPtr builder);
    return builder;
  }

  /// <summary>Appends a layer (options validated now); returns its index.</summary>
  public int AddLayer(LayerOptions options) {
    Capi.lumen_model_builder_add_layer(Address, options, out int layer);
    GC.KeepAlive(this);
    return layer;
  }

  /// <summary>Sets a parameter of a layer from fp32 values.</summary>
  public ModelBuilder SetParam(int layer, LumenParam param, float[] values) {
    Capi.lumen_model_builder_set_param(Address, layer, (int)param, values, values.Length);
    GC.KeepAlive(this);
    return this;
  }

  /// <summary>Builds an immutable model from the layers so far; the builder may go on.</summary>
  public Model Build() {
    Capi.lumen_model_builder_build(Address, out IntPtr model);
    GC.KeepAlive(this);
    return new Model(model);
  }
}

/// <summary>An immutable, validated list of layers (lumen_model). Thread-safe.</summary>
public sealed class Model : Handle {
  internal Model(IntPtr address) : base(address, Capi.lumen_model_destroy) {}

  public int NumLayers {
    get {
      Capi.lumen_model_num_layers(Address, out int layers);
      GC.KeepAlive(this);
      return layers;
    }
  }

  /// <summary>A copy of a layer's options, defaults resolved.</summary>
  public LayerOptions LayerOptions(int layer) {
    var options = new LayerOptions();
    Capi.lumen_model_layer_options(Address, layer, options);
    GC.KeepAlive(this);
    return options;
  }

  /// <summary>Elements of one part of a layer's fp32 state.</summary>
  public long StateCount(int layer, LumenStatePart part) {
    Capi.lumen_model_state_count(Address, layer, (int)part, out long count);
    GC.KeepAlive(this);
    return count;
  }

  /// <summary>Bytes a session keeps for a layer, or for the whole model with layer -1.</summary>
  public long StateBytes(int layer = -1) {
    Capi.lumen_model_state_bytes(Address, layer, out long bytes);
    GC.KeepAlive(this);
    return bytes;
  }
}

}
