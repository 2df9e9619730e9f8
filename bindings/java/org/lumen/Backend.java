package org.lumen;

import org.lumen.capi.LumenBackend;

/**
 * Where an engine runs its layers.
 * The C values (lumen_backend) are {@link #value()}; {@link #of(int)} goes back.
 */
public enum Backend {
  /** The best backend built, present and able to run the model (as an option only). */
  AUTO(LumenBackend.AUTO),
  /** The CPU. */
  CPU(LumenBackend.CPU),
  /** NVIDIA GPUs of compute capability 8.0 or newer. */
  CUDA(LumenBackend.CUDA),
  /** AMD GPUs of the targets the library was built for. */
  ROCM(LumenBackend.ROCM);

  private final int value;

  Backend(int value) {
    this.value = value;
  }

  /** The lumen_backend value. */
  public int value() {
    return value;
  }

  /**
   * The constant of a lumen_backend value; IllegalArgumentException for a value that
   * lumen.h does not define.
   */
  public static Backend of(int value) {
    for (Backend constant : values()) {
      if (constant.value == value) return constant;
    }
    throw new IllegalArgumentException("no lumen_backend has the value " + value);
  }
}
