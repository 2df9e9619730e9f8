package org.lumen;

import org.lumen.capi.LumenFeatureMap;

/**
 * The feature map phi of linear_attn layers.
 * The C values (lumen_feature_map) are {@link #value()}; {@link #of(int)} goes back.
 */
public enum FeatureMap {
  /** phi(x) = x. */
  IDENTITY(LumenFeatureMap.IDENTITY),
  /** phi(x) = elu(x) + 1. */
  ELU1(LumenFeatureMap.ELU1),
  /** phi(x) = max(x, 0). */
  RELU(LumenFeatureMap.RELU);

  private final int value;

  FeatureMap(int value) {
    this.value = value;
  }

  /** The lumen_feature_map value. */
  public int value() {
    return value;
  }

  /**
   * The constant of a lumen_feature_map value; IllegalArgumentException for a value that
   * lumen.h does not define.
   */
  public static FeatureMap of(int value) {
    for (FeatureMap constant : values()) {
      if (constant.value == value) return constant;
    }
    throw new IllegalArgumentException("no lumen_feature_map has the value " + value);
  }
}
