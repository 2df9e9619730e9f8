using System;
using Lumen.CApi;

namespace Lumen {

/// <summary>Collects the layers of a model (lumen_model_builder). Not thread-safe.</summary>
public sealed class ModelBuilder : NativeObject {
  /// <summary>An empty builder.</summary>
  public ModelBuilder() : base(Create(), Capi.lumen_model_builder_destroy, 0) {}

  private static IntPtr Create() {
    Capi.lumen_model_builder_create(out IntPtr builder);
    return builder;
  }

  /// <summary>Appends a layer (options validated now); returns its index.</summary>
  public int AddLayer(LayerOptions options) {
    using (HandleLease builder = Lease()) {
      Capi.lumen_model_builder_add_layer(builder.Address, options, out int layer);
      return layer;
    }
  }

  /// <summary>Sets a parameter of a layer from fp32 values; returns this builder.</summary>
  public ModelBuilder SetParam(int layer, LumenParam param, float[] values) {
    if (values == null) throw new ArgumentNullException(nameof(values));
    using (HandleLease builder = Lease()) {
      Capi.lumen_model_builder_set_param(builder.Address, layer, param, values, values.Length);
    }
    return this;
  }

  /// <summary>Builds an immutable model from the layers so far; the builder may go on.</summary>
  public Model Build() {
    using (HandleLease builder = Lease()) {
      Capi.lumen_model_builder_build(builder.Address, out IntPtr model);
      return new Model(model);
    }
  }
}

/// <summary>An immutable, validated list of layers (lumen_model). Thread-safe.</summary>
public sealed class Model : NativeObject {
  internal Model(IntPtr address) : base(address, Capi.lumen_model_destroy, 0) {}

  /// <summary>The number of layers.</summary>
  public int NumLayers {
    get {
      using (HandleLease model = Lease()) {
        Capi.lumen_model_num_layers(model.Address, out int layers);
        return layers;
      }
    }
  }

  /// <summary>A copy of a layer's options, defaults resolved (dispose it).</summary>
  public LayerOptions LayerOptions(int layer) {
    var options = new LayerOptions();
    try {
      using (HandleLease model = Lease()) Capi.lumen_model_layer_options(model.Address, layer, options);
      return options;
    } catch {
      options.Dispose();
      throw;
    }
  }

  /// <summary>Elements of one part of a layer's fp32 state.</summary>
  public long StateCount(int layer, LumenStatePart part) {
    using (HandleLease model = Lease()) {
      Capi.lumen_model_state_count(model.Address, layer, part, out long count);
      return count;
    }
  }

  /// <summary>The element count of a state part in a layout (LumenStateLayout.FLA: fla's
  /// layer caches, a conv window W columns wide).</summary>
  public long StateCount(int layer, LumenStatePart part, LumenStateLayout layout) {
    using (HandleLease model = Lease()) {
      Capi.lumen_model_state_count_as(model.Address, layer, part, layout, out long count);
      return count;
    }
  }

  /// <summary>Bytes a session keeps for a layer, or for the whole model with layer -1.</summary>
  public long StateBytes(int layer = -1) {
    using (HandleLease model = Lease()) {
      Capi.lumen_model_state_bytes(model.Address, layer, out long bytes);
      return bytes;
    }
  }
}

}
