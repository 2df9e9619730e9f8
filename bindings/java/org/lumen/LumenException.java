package org.lumen;

import org.lumen.capi.Capi;

/**
 * A lumen call failed. Carries the call's {@code lumen_status} ({@link #status()}), its name
 * and the library's message for the calling thread.
 */
public class LumenException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final int status;
  private final String statusName;

  public LumenException(int status, String statusName, String message) {
    super(statusName + ": " + message);
    this.status = status;
    this.statusName = statusName;
  }

  /** The lumen_status code (a {@link org.lumen.capi.LumenStatus} constant). */
  public int status() {
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
