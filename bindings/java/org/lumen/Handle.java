package org.lumen;

import java.lang.ref.Cleaner;
import java.lang.ref.Reference;
import java.util.Objects;
import java.util.function.Function;
import java.util.function.LongConsumer;
import java.util.function.LongFunction;

/**
 * Owns one native handle: {@link #close()} frees it, and a {@link Cleaner} frees it if the
 * object becomes unreachable unclosed (a safety net only: see {@link NativeMemory}). The
 * library counts references, so closing an engine while its sessions live is safe.
 *
 * <p>Every native call goes through {@link #withAddress}, which keeps the handle reachable
 * until the call returns: compiled code may otherwise drop an object as soon as its address
 * was read, and the Cleaner would free it during the call.
 */
public abstract class Handle implements AutoCloseable {
  private final long address;
  private final Release release;
  private final Cleaner.Cleanable cleanable;
  private volatile boolean closed;

  Handle(long address, LongConsumer destroy) {
    this(address, destroy, false, 0);
  }

  /** A session's handle, counted with its state's bytes by {@link NativeMemory}. */
  Handle(long address, LongConsumer destroy, long stateBytes) {
    this(address, destroy, true, stateBytes);
  }

  private Handle(long address, LongConsumer destroy, boolean session, long stateBytes) {
    this.address = address;
    String kind = getClass().getName();
    Throwable createdAt = NativeMemory.reportingLeaks() ? new Throwable(kind + " created") : null;
    this.release = new Release(address, destroy, kind, session, stateBytes, createdAt);
    if (session) NativeMemory.sessionOpened(stateBytes);
    this.cleanable = NativeLibrary.CLEANER.register(this, release);
  }

  /**
   * Runs {@code call} with the native handle (for calls through {@link org.lumen.capi.Capi})
   * and keeps this object reachable until it returns, so that the handle stays valid
   * throughout. Throws IllegalStateException once closed.
   */
  public final <R> R withAddress(LongFunction<R> call) {
    try {
      return call.apply(address());
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /** {@link #withAddress} for a call whose result is not needed. */
  final void useAddress(LongConsumer call) {
    try {
      call.accept(address());
    } finally {
      Reference.reachabilityFence(this);
    }
  }

  /**
   * Runs {@code call} with the native handles of {@code handles}, in order, and keeps every
   * one reachable until it returns.
   */
  static <R> R withAddresses(Handle[] handles, Function<long[], R> call) {
    Handle[] held = Objects.requireNonNull(handles, "handles").clone();
    long[] addresses = new long[held.length];
    for (int i = 0; i < held.length; ++i) {
      if (held[i] == null) throw new NullPointerException("element " + i + " is null");
      addresses[i] = held[i].address();
    }
    try {
      return call.apply(addresses);
    } finally {
      Reference.reachabilityFence(held);
    }
  }

  /**
   * The native handle. Keep this object reachable until a call that uses it returns
   * ({@link Reference#reachabilityFence}), or the collector may free the handle during the
   * call.
   *
   * @deprecated use {@link #withAddress}, which keeps the handle valid for the call
   */
  @Deprecated
  public long address() {
    if (closed) {
      throw new IllegalStateException(getClass().getSimpleName() + " is closed");
    }
    return address;
  }

  /**
   * Frees the native object now; later calls throw IllegalStateException, and a second close
   * does nothing. Not while another thread is in a call of this object.
   */
  @Override
  public void close() {
    closed = true;
    release.closed = true;
    cleanable.clean();
  }

  /** Frees a handle once, from close() or from the Cleaner; refers to no Handle. */
  private static final class Release implements Runnable {
    final long address;
    final LongConsumer destroy;
    final String kind;
    final boolean session;
    final long stateBytes;
    final Throwable createdAt;
    volatile boolean closed;

    Release(long address, LongConsumer destroy, String kind, boolean session, long stateBytes,
            Throwable createdAt) {
      this.address = address;
      this.destroy = destroy;
      this.kind = kind;
      this.session = session;
      this.stateBytes = stateBytes;
      this.createdAt = createdAt;
    }

    @Override
    public void run() {
      destroy.accept(address);
      if (session) NativeMemory.sessionFreed(stateBytes);
      if (!closed) NativeMemory.leaked(kind, stateBytes, createdAt);
    }
  }
}
