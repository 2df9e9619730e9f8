using System;
using System.Threading;

namespace Lumen {

/// <summary>Owns one native handle: Dispose frees it, and the finalizer frees it if the object
/// is collected undisposed. The library counts references, so disposing an engine while its
/// sessions live is safe.</summary>
public abstract class Handle : IDisposable {
  private IntPtr address;
  private readonly Action<IntPtr> destroy;

  protected Handle(IntPtr address, Action<IntPtr> destroy) {
    this.address = address;
    this.destroy = destroy;
  }

  /// <summary>The native handle, for calls through Lumen.CApi.Capi.</summary>
  public IntPtr Address {
    get {
      IntPtr value = address;
      if (value == IntPtr.Zero) throw new ObjectDisposedException(GetType().Name);
      return value;
    }
  }

  public void Dispose() {
    Release();
    GC.SuppressFinalize(this);
  }

  ~Handle() {
    Release();
  }

  private void Release() {
    IntPtr value = Interlocked.Exchange(ref address, IntPtr.Zero);
    if (value != IntPtr.Zero) destroy(value);
  }
}

}
