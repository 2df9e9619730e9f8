package org.lumen;

import org.lumen.capi.LumenDtype;

/**
 * Element types of inputs, outputs and stored state.
 * The C values (lumen_dtype) are {@link #value()}; {@link #of(int)} goes back.
 */
public enum Dtype {
  /** 32-bit IEEE floats: {@code float[]}, {@code FloatBuffer}. */
  FLOAT32(LumenDtype.FLOAT32),
  /** bfloat16 bits in {@code short[]} or {@code ShortBuffer}. */
  BFLOAT16(LumenDtype.BFLOAT16),
  /** IEEE half-precision bits in {@code short[]} or {@code ShortBuffer}. */
  FLOAT16(LumenDtype.FLOAT16);

  private final int value;

  Dtype(int value) {
    this.value = value;
  }

  /** The lumen_dtype value. */
  public int value() {
    return value;
  }

  /**
   * The constant of a lumen_dtype value; IllegalArgumentException for a value that
   * lumen.h does not define.
   */
  public static Dtype of(int value) {
    for (Dtype constant : values()) {
      if (constant.value == value) return constant;
    }
    throw new IllegalArgumentException("no lumen_dtype has the value " + value);
  }
}
