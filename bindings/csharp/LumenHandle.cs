using System;
using System.Runtime.InteropServices;

namespace Lumen {

/// <summary>Owns one lumen handle (builder, model, engine or session) as a SafeHandle: it is
/// freed exactly once, by Dispose of its owner or, when the owner is dropped undisposed, by the
/// runtime's finalizer, and never while a call of this binding is using it (each call holds a
/// reference on it, so a Dispose on another thread waits for the call to return). The native
/// bytes it holds are reported to the garbage collector for as long as it lives.</summary>
public sealed class LumenHandle : SafeHandle {
  private readonly Action<IntPtr> destroy;
  private readonly long nativeBytes;

  internal LumenHandle(IntPtr address, Action<IntPtr> destroy, long nativeBytes)
      : base(IntPtr.Zero, true) {
    SetHandle(address);
    this.destroy = destroy;
    this.nativeBytes = nativeBytes;
    NativeMemory.Add(nativeBytes);
  }

  /// <summary>True for the NULL handle.</summary>
  public override bool IsInvalid => handle == IntPtr.Zero;

  /// <summary>Bytes of native memory the object holds, as reported to the collector.</summary>
  public long NativeBytes => nativeBytes;

  /// <summary>Frees the native object (called once, by Dispose or the finalizer).</summary>
  protected override bool ReleaseHandle() {
    destroy(handle);
    NativeMemory.Remove(nativeBytes);
    return true;
  }
}

/// <summary>A reference held on a handle for one native call: the handle stays reachable and
/// open until Dispose, whatever happens to its owner meanwhile.</summary>
internal struct HandleLease : IDisposable {
  private readonly LumenHandle handle;

  /// <summary>The native address, valid until Dispose.</summary>
  internal readonly IntPtr Address;

  internal HandleLease(LumenHandle handle, string owner) {
    bool added = false;
    try {
      handle.DangerousAddRef(ref added);
    } catch (ObjectDisposedException) {
      throw new ObjectDisposedException(owner);
    }
    this.handle = handle;
    Address = handle.DangerousGetHandle();
  }

  public void Dispose() => handle.DangerousRelease();
}

/// <summary>Base of the classes that own a lumen object. Dispose (or a using block) frees the
/// native object, and its memory, now; an object dropped undisposed is freed by the finalizer
/// after a collection. The library counts references, so disposing an engine while its sessions
/// live is safe.</summary>
public abstract class NativeObject : IDisposable {
  internal NativeObject(IntPtr address, Action<IntPtr> destroy, long nativeBytes) {
    Handle = new LumenHandle(address, destroy, nativeBytes);
  }

  /// <summary>The SafeHandle that owns the native object, for calls through Lumen.CApi.Capi:
  /// take the address with DangerousAddRef and DangerousGetHandle, and release it after the
  /// call.</summary>
  public LumenHandle Handle { get; }

  /// <summary>Frees the native object now; later calls throw ObjectDisposedException. Calling
  /// it again does nothing.</summary>
  public void Dispose() => Handle.Dispose();

  /// <summary>Holds the handle open for one call (throws ObjectDisposedException once
  /// disposed).</summary>
  internal HandleLease Lease() => new HandleLease(Handle, GetType().Name);
}

}
