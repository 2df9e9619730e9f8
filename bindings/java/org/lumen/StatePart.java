package org.lumen;

import org.lumen.capi.LumenStatePart;

/**
 * The parts of a layer's state (Session.readState, Session.writeState).
 * The C values (lumen_state_part) are {@link #value()}; {@link #of(int)} goes back.
 */
public enum StatePart {
  /** S, [HV, K, V]. */
  MATRIX(LumenStatePart.MATRIX),
  /** z, [HV, K]: linear_attn with normalize only. */
  NORMALIZER(LumenStatePart.NORMALIZER),
  /** The convolution window of q, [H * K, W - 1]. */
  CONV_Q(LumenStatePart.CONV_Q),
  /** The convolution window of k, [H * K, W - 1]. */
  CONV_K(LumenStatePart.CONV_K),
  /** The convolution window of v, [HV * V, W - 1]. */
  CONV_V(LumenStatePart.CONV_V);

  private final int value;

  StatePart(int value) {
    this.value = value;
  }

  /** The lumen_state_part value. */
  public int value() {
    return value;
  }

  /**
   * The constant of a lumen_state_part value; IllegalArgumentException for a value that
   * lumen.h does not define.
   */
  public static StatePart of(int value) {
    for (StatePart constant : values()) {
      if (constant.value == value) return constant;
    }
    throw new IllegalArgumentException("no lumen_state_part has the value " + value);
  }
}
