package org.lumen;

import org.lumen.capi.LumenConvActivation;

/**
 * The activation after a layer's short convolution.
 * The C values (lumen_conv_activation) are {@link #value()}; {@link #of(int)} goes back.
 */
public enum ConvActivation {
  /** x * sigmoid(x): fla's and the models' default. */
  SILU(LumenConvActivation.SILU),
  /** None. */
  NONE(LumenConvActivation.NONE);

  private final int value;

  ConvActivation(int value) {
    this.value = value;
  }

  /** The lumen_conv_activation value. */
  public int value() {
    return value;
  }

  /**
   * The constant of a lumen_conv_activation value; IllegalArgumentException for a value that
   * lumen.h does not define.
   */
  public static ConvActivation of(int value) {
    for (ConvActivation constant : values()) {
      if (constant.value == value) return constant;
    }
    throw new IllegalArgumentException("no lumen_conv_activation has the value " + value);
  }
}
