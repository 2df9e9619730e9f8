package org.lumen;

import org.lumen.capi.LumenStateLayout;

/**
 * The layouts a state part is read and written in (Session.readState, Session.writeState).
 * The C values (lumen_state_layout) are {@link #value()}; {@link #of(int)} goes back.
 */
public enum StateLayout {
  /** lumen's canonical layout: the matrix [HV, K, V], a conv window [C, W - 1]. */
  LUMEN(LumenStateLayout.LUMEN),
  /**
   * flash-linear-attention's layer caches: the matrix V-first, [HV, V, K]; a conv window
   * [C, W] whose oldest column lumen does not keep (read as 0, ignored on write).
   */
  FLA(LumenStateLayout.FLA);

  private final int value;

  StateLayout(int value) {
    this.value = value;
  }

  /** The lumen_state_layout value. */
  public int value() {
    return value;
  }

  /**
   * The constant of a lumen_state_layout value; IllegalArgumentException for a value that
   * lumen.h does not define.
   */
  public static StateLayout of(int value) {
    for (StateLayout constant : values()) {
      if (constant.value == value) return constant;
    }
    throw new IllegalArgumentException("no lumen_state_layout has the value " + value);
  }
}
