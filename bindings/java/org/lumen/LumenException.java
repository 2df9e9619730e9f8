package org.lumen;

import org.lumen.capi.Capi;

/**
 * A lumen call failed. Carries the call's status ({@link #status()}, its C value
 * {@link #statusCode()} and name {@link #statusName()}) and the library's message for the
 * calling thread.
 */
public class LumenException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final int status;
  private final String statusName;

  /** An exception for a lumen_status value, its name and a message. */
  public LumenException(int status, String statusName, String message) {
    super(statusName + ": " + message);
    this.status = status;
    this.statusName = statusName;
  }

  /** An exception for a status and a message (the name is the library's for the status). */
  LumenException(Status status, String message) {
    this(status.value(), Capi.lumen_status_string(status.value()), message);
  }

  /** What failed. */
  public Status status() {
    return Status.of(status);
  }

  /** The lumen_status value, also for a status this binding does not know. */
  public int statusCode() {
    return status;
  }

  /** The status's name, e.g. "LUMEN_ERROR_OUT_OF_RANGE". */
  public String statusName() {
    return statusName;
  }

  /** Throws for any status other than LUMEN_OK, with the calling thread's message. */
  public static void check(int status) {
    if (status != 0) {
      throw new LumenException(status, Capi.lumen_status_string(status),
                               Capi.lumen_last_error_message());
    }
  }
}
