using System;
using Lumen.CApi;

namespace Lumen {

/// <summary>A lumen call failed: the call's status, its name and the library's message for the
/// calling thread. The call changed nothing.</summary>
public class LumenException : Exception {
  /// <summary>An exception for a failed call with the library's message.</summary>
  public LumenException(LumenStatus status, string message)
      : base(Capi.lumen_status_string(status) + ": " + message) {
    Status = status;
  }

  /// <summary>Why the call failed, e.g. LumenStatus.OUT_OF_RANGE.</summary>
  public LumenStatus Status { get; }

  /// <summary>The status's name, e.g. "LUMEN_ERROR_OUT_OF_RANGE".</summary>
  public string StatusName => Capi.lumen_status_string(Status);

  /// <summary>Throws for any status other than LUMEN_OK, with the calling thread's message
  /// (every Capi call that returns a lumen_status goes through it).</summary>
  internal static void Check(int status) {
    if (status != 0) {
      throw new LumenException((LumenStatus)status, Capi.lumen_last_error_message());
    }
  }
}

}
