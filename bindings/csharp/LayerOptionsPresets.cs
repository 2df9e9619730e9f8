using System;

namespace Lumen.CApi {

/// <summary>The layers of published models (the header's lumen_layer_options_init_* presets),
/// as factories: each returns new options with the model's dims and flags, which may still be
/// changed before ModelBuilder.AddLayer. The layer's parameters (A_log, dt_bias, conv weights)
/// come from the checkpoint through ModelBuilder.SetParam.</summary>
public partial class LayerOptions {
  /// <summary>Qwen3-Next-80B-A3B's Gated DeltaNet layer: GATED_DELTA_NET, H 16, HV 32,
  /// K = V = 128, conv_size 4, qk_l2norm, beta_sigmoid, gate_raw.</summary>
  public static LayerOptions Qwen3NextGatedDeltaNet() =>
      Preset(Capi.lumen_layer_options_init_qwen3_next_gated_delta_net);

  /// <summary>Kimi-Linear-48B-A3B's KDA layer: KDA, H = HV = 32, K = V = 128, conv_size 4,
  /// qk_l2norm, beta_sigmoid, gate_raw.</summary>
  public static LayerOptions KimiLinearKda() =>
      Preset(Capi.lumen_layer_options_init_kimi_linear_kda);

  /// <summary>Mamba-2 2.7B's layer on SSD: H 1, HV 80, K 128, V 64, conv_size 4 with biases,
  /// gate_raw, scale 1 (q = C, k = B, v = x, g = dt).</summary>
  public static LayerOptions Mamba2() => Preset(Capi.lumen_layer_options_init_mamba2);

  private static LayerOptions Preset(Action<LayerOptions> init) {
    var options = new LayerOptions();
    init(options);
    return options;
  }
}

}
