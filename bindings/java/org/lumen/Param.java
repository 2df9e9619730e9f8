package org.lumen;

import org.lumen.capi.LumenParam;

/**
 * The parameters of a layer (ModelBuilder.setParam); lumen.h gives each one's size.
 * The C values (lumen_param) are {@link #value()}; {@link #of(int)} goes back.
 */
public enum Param {
  /** A_log [HV]: the decay rate of a raw gate. */
  A_LOG(LumenParam.A_LOG),
  /** dt_bias [HV] ([HV * K] for kda): the bias of a raw gate. */
  DT_BIAS(LumenParam.DT_BIAS),
  /** The per-head decay gamma [HV] of retention, each in (0, 1). */
  DECAY(LumenParam.DECAY),
  /** The convolution weights of q, [H * K, W]. */
  CONV_Q_WEIGHT(LumenParam.CONV_Q_WEIGHT),
  /** The convolution weights of k, [H * K, W]. */
  CONV_K_WEIGHT(LumenParam.CONV_K_WEIGHT),
  /** The convolution weights of v, [HV * V, W]. */
  CONV_V_WEIGHT(LumenParam.CONV_V_WEIGHT),
  /** The convolution bias of q, [H * K]. */
  CONV_Q_BIAS(LumenParam.CONV_Q_BIAS),
  /** The convolution bias of k, [H * K]. */
  CONV_K_BIAS(LumenParam.CONV_K_BIAS),
  /** The convolution bias of v, [HV * V]. */
  CONV_V_BIAS(LumenParam.CONV_V_BIAS),
  /** D [HV]: Mamba-2's skip connection (ssd with gate_raw). */
  D(LumenParam.D);

  private final int value;

  Param(int value) {
    this.value = value;
  }

  /** The lumen_param value. */
  public int value() {
    return value;
  }

  /**
   * The constant of a lumen_param value; IllegalArgumentException for a value that
   * lumen.h does not define.
   */
  public static Param of(int value) {
    for (Param constant : values()) {
      if (constant.value == value) return constant;
    }
    throw new IllegalArgumentException("no lumen_param has the value " + value);
  }
}
