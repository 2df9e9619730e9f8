using System;
using Lumen.CApi;

namespace Lumen {

/// <summary>A lumen call failed: the call's lumen_status, its name and the library's message
/// for the calling thread.</summary>
public class LumenException : Exception {
  public LumenException(int status, string statusName, string message)
      : base(statusName + ": " + message) {
    Status = status;
    StatusName = statusName;
  }

  /// <summary>The lumen_status code.</summary>
  public int Status { get; }

  /// <summary>The status as an enumeration value.</summary>
  public LumenStatus Code => (LumenStatus)Status;

  /// <summary>The status's name, e.g. "LUMEN_ERROR_OUT_OF_RANGE".</summary>
  public string StatusName { get; }

  /// <summary>Throws for any status other than LUMEN_OK, with the calling thread's
  /// message.</summary>
  public static void Check(int status) {
    if (status != 0) {
      throw new LumenException(status, Capi.lumen_status_string(status),
                               Capi.lumen_last_error_message());
    }
  }
}

}
