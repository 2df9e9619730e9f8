package org.lumen;

import org.lumen.capi.LumenStatus;

/**
 * What a failed call reports ({@link LumenException#status()}). The C values (lumen_status)
 * are {@link #value()}; {@link #of(int)} goes back.
 */
public enum Status {
  /** Success; never carried by an exception. */
  OK(LumenStatus.OK),
  /** An argument is null, out of range, inconsistent, or a buffer has the wrong size. */
  INVALID_ARGUMENT(LumenStatus.INVALID_ARGUMENT),
  /** A layer index is outside the model. */
  OUT_OF_RANGE(LumenStatus.OUT_OF_RANGE),
  /** A session belongs to another engine or model than the call needs. */
  MODEL_MISMATCH(LumenStatus.MODEL_MISMATCH),
  /** Memory could not be allocated. */
  OUT_OF_MEMORY(LumenStatus.OUT_OF_MEMORY),
  /** The request is valid but this build or backend cannot do it (e.g. CUDA not built). */
  UNSUPPORTED(LumenStatus.UNSUPPORTED),
  /** The backend (a device runtime) failed. */
  BACKEND(LumenStatus.BACKEND),
  /** A bug in lumen: please report it with the message. */
  INTERNAL(LumenStatus.INTERNAL),
  /** A buffer is smaller than the result. */
  BUFFER_TOO_SMALL(LumenStatus.BUFFER_TOO_SMALL),
  /** Snapshot bytes are truncated, damaged or not a lumen snapshot. */
  CORRUPT_SNAPSHOT(LumenStatus.CORRUPT_SNAPSHOT),
  /** A snapshot was written in a newer format version than the library reads. */
  SNAPSHOT_VERSION(LumenStatus.SNAPSHOT_VERSION),
  /** A file could not be opened, read, written, flushed or renamed. */
  IO(LumenStatus.IO),
  /** A store holds no value under the key. Since 0.3. */
  NOT_FOUND(LumenStatus.NOT_FOUND),
  /** A save's expected version is not the stored one: another writer saved first. Since 0.3. */
  VERSION_CONFLICT(LumenStatus.VERSION_CONFLICT),
  /** A store's server cannot be reached, or closed the connection. Since 0.3. */
  UNAVAILABLE(LumenStatus.UNAVAILABLE),
  /** A store's server did not answer in time. Since 0.3. */
  TIMEOUT(LumenStatus.TIMEOUT),
  /** The session holds tentative tokens: commit them first. Since 0.4. */
  UNCOMMITTED_TOKENS(LumenStatus.UNCOMMITTED_TOKENS),
  /**
   * A status that this binding does not know, from a newer library;
   * {@link LumenException#statusCode()} has its value.
   */
  UNKNOWN(-1);

  private final int value;

  Status(int value) {
    this.value = value;
  }

  /** The lumen_status value (-1 for {@link #UNKNOWN}). */
  public int value() {
    return value;
  }

  /** The constant of a lumen_status value; {@link #UNKNOWN} for one lumen.h does not define. */
  public static Status of(int value) {
    for (Status constant : values()) {
      if (constant.value == value && constant != UNKNOWN) return constant;
    }
    return UNKNOWN;
  }
}
