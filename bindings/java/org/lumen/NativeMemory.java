package org.lumen;

import java.lang.System.Logger.Level;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The native memory of lumen's objects, which the Java collector does not see. A session's
 * state (megabytes for a real model) lives outside the Java heap, so a dropped session costs
 * the collector only a small object: it may not run for a long time while the process holds
 * gigabytes of states. {@code close()} (try-with-resources) returns the memory at once; the
 * {@link java.lang.ref.Cleaner} that frees a handle nothing closed is a safety net only.
 *
 * <p>This class counts what is held and what leaked. With the system property
 * {@code lumen.reportLeaks=true} (e.g. {@code java -Dlumen.reportLeaks=true}), each handle that
 * the collector frees because nothing closed it is also logged as a WARNING of the
 * {@link System.Logger} "org.lumen", with the stack where it was created (taken at creation,
 * only while the property is set).
 */
public final class NativeMemory {
  /** The system property that turns leak reports on. */
  public static final String REPORT_LEAKS_PROPERTY = "lumen.reportLeaks";

  private static final AtomicLong sessionStateBytes = new AtomicLong();
  private static final AtomicLong openSessions = new AtomicLong();
  private static final AtomicLong freedByCollector = new AtomicLong();
  private static final System.Logger LOGGER = System.getLogger("org.lumen");

  private NativeMemory() {}

  /** Bytes of state held by the sessions not yet freed ({@link Session#stateBytes()} each). */
  public static long sessionStateBytes() {
    return sessionStateBytes.get();
  }

  /** Sessions not yet freed: neither closed nor freed by the collector. */
  public static long openSessions() {
    return openSessions.get();
  }

  /**
   * Handles (sessions, engines, models, builders) that the collector freed because nothing
   * closed them: each held its native memory until a collection happened to find it.
   */
  public static long freedByCollector() {
    return freedByCollector.get();
  }

  /** Whether a handle created now is reported should the collector free it. */
  static boolean reportingLeaks() {
    return Boolean.getBoolean(REPORT_LEAKS_PROPERTY);
  }

  static void sessionOpened(long stateBytes) {
    sessionStateBytes.addAndGet(stateBytes);
    openSessions.incrementAndGet();
  }

  static void sessionFreed(long stateBytes) {
    sessionStateBytes.addAndGet(-stateBytes);
    openSessions.decrementAndGet();
  }

  /** A handle of class {@code kind} was freed by the collector; createdAt null: no report. */
  static void leaked(String kind, long stateBytes, Throwable createdAt) {
    if (createdAt != null) {
      String held = stateBytes > 0 ? " (" + stateBytes + " bytes of native state)" : "";
      LOGGER.log(Level.WARNING, kind + " was not closed: the collector freed it" + held
                 + "; close it, e.g. with try-with-resources. It was created here:", createdAt);
    }
    freedByCollector.incrementAndGet();
  }
}
