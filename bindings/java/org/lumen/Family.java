package org.lumen;

import org.lumen.capi.LumenFamily;

/**
 * The layer families: each one's update rule is in docs/spec.md §2.
 * The C values (lumen_family) are {@link #value()}; {@link #of(int)} goes back.
 */
public enum Family {
  /** S += phi(k) v^T. */
  LINEAR_ATTN(LumenFamily.LINEAR_ATTN),
  /** S = gamma_h S + k v^T. */
  RETENTION(LumenFamily.RETENTION),
  /** S = exp(g) S + k v^T (Mamba-2). */
  SSD(LumenFamily.SSD),
  /** S = Diag(exp(g)) S + k v^T. */
  GLA(LumenFamily.GLA),
  /** The delta rule. */
  DELTA_NET(LumenFamily.DELTA_NET),
  /** A scalar gate, then the delta rule (Qwen3-Next). */
  GATED_DELTA_NET(LumenFamily.GATED_DELTA_NET),
  /** A per-channel gate, then the delta rule (Kimi Linear). */
  KDA(LumenFamily.KDA);

  private final int value;

  Family(int value) {
    this.value = value;
  }

  /** The lumen_family value. */
  public int value() {
    return value;
  }

  /**
   * The constant of a lumen_family value; IllegalArgumentException for a value that
   * lumen.h does not define.
   */
  public static Family of(int value) {
    for (Family constant : values()) {
      if (constant.value == value) return constant;
    }
    throw new IllegalArgumentException("no lumen_family has the value " + value);
  }
}
