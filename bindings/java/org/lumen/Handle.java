package org.lumen;

import java.lang.ref.Cleaner;
import java.util.function.LongConsumer;

/**
 * Owns one native handle: {@link #close()} frees it, and a {@link Cleaner} frees it if the
 * object becomes unreachable unclosed. The library counts references, so closing an engine
 * while its sessions live is safe.
 */
abstract class Handle implements AutoCloseable {
  private final long address;
  private final Cleaner.Cleanable cleanable;
  private volatile boolean closed;

  Handle(long address, LongConsumer destroy) {
    this.address = address;
    this.cleanable = NativeLibrary.CLEANER.register(this, () -> destroy.accept(address));
  }

  /** The native handle, for calls through {@link org.lumen.capi.Capi}. */
  public long address() {
    if (closed) {
      throw new IllegalStateException(getClass().getSimpleName() + " is closed");
    }
    return address;
  }

  /** Frees the native object now; later calls are no-ops. */
  @Override
  public void close() {
    closed = true;
    cleanable.clean();
  }
}
