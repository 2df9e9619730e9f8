using System;
using System.Threading;

namespace Lumen {

/// <summary>The native bytes that live lumen objects hold (session states, an engine's spare
/// state block), told to the runtime. GC.AddMemoryPressure lets a runtime that acts on it
/// (.NET) collect sooner; Mono's collector (SGen, 6.8) takes the numbers and never collects for
/// them, so an undisposed session would hold its state until managed allocations happen to
/// cause a collection. The binding therefore also collects by itself: when the bytes held pass a
/// limit, it runs a full collection and waits for the finalizers, which release the handles of
/// dropped objects. The limit is then twice what survived, and at least 64 MiB, so a program
/// that disposes its objects never pays for a collection, and one that drops them pays one
/// collection per doubling.</summary>
internal static class NativeMemory {
  private const long MinimumLimit = 64L << 20;
  private static readonly object collecting = new object();
  private static long held;
  private static long limit = MinimumLimit;

  /// <summary>Counts bytes a new object holds; collects first when they pass the limit.</summary>
  internal static void Add(long bytes) {
    if (bytes <= 0) return;
    GC.AddMemoryPressure(bytes);
    if (Interlocked.Add(ref held, bytes) > Interlocked.Read(ref limit)) Collect();
  }

  /// <summary>Counts bytes an object gave back (Dispose, or its finalizer).</summary>
  internal static void Remove(long bytes) {
    if (bytes <= 0) return;
    Interlocked.Add(ref held, -bytes);
    GC.RemoveMemoryPressure(bytes);
  }

  private static void Collect() {
    lock (collecting) {
      // Another thread may have collected while this one waited for the lock.
      if (Interlocked.Read(ref held) <= Interlocked.Read(ref limit)) return;
      GC.Collect();
      GC.WaitForPendingFinalizers();
      Interlocked.Exchange(ref limit, Math.Max(MinimumLimit, 2 * Interlocked.Read(ref held)));
    }
  }
}

}
